package web

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard/referral"
	"switchyard/referral/referraltest"
	"switchyard/rollup"
	"switchyard/store/storetest"
)

// The chart model: bars of the range's step ending with now's, a value
// axis up to a round number above the tallest bar, a time axis labelled at
// round times, and a peak that is the busiest minute of the series the
// card's number counts.
func TestBuildChart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 15, 12, 34, 20, 0, time.UTC)
	for _, tc := range []struct {
		rg          chartRange
		first, last string
		ticks       []string
		barLabel    string
	}{
		{chartRanges[0], "11:35", "12:34", []string{"11:40", "11:50", "12:00", "12:10", "12:20", "12:30"}, "12:34 UTC: 7 handled"},
		{chartRanges[1], "12:45", "12:30", []string{"15:00", "18:00", "21:00", "00:00", "03:00", "06:00", "09:00", "12:00"}, "12:30–12:45 UTC: 7 handled"},
		{chartRanges[2], "Thu 8 Jan 13:00", "Thu 15 Jan 12:00", []string{"Fri 9", "Sat 10", "Sun 11", "Mon 12", "Tue 13", "Wed 14", "Thu 15"}, "Thu 15 Jan 12:00–13:00 UTC: 7 handled"},
	} {
		t.Run("the "+tc.rg.Key+" chart has "+countInt(tc.rg.N)+" bars and its axes", func(t *testing.T) {
			t.Parallel()
			from := tc.rg.from(now)
			handled := make([]rollup.Bucket, tc.rg.N)
			for i := range handled {
				handled[i].Start = from.Add(time.Duration(i) * tc.rg.Step)
			}
			handled[3] = rollup.Bucket{Start: handled[3].Start, Sum: 45, Peak: 9}
			handled[tc.rg.N-1] = rollup.Bucket{Start: handled[tc.rg.N-1].Start, Sum: 7, Peak: 7}
			c := buildChart(chartSpec{Testid: "c", Title: "Outbox events handled", Range: tc.rg, From: from,
				Stack: []chartSeries{{Label: "handled", Class: "s1", Buckets: handled}}, Peaks: []chartSeries{{Buckets: handled}}})
			if len(c.Bars) != tc.rg.N {
				t.Fatalf("%d bars", len(c.Bars))
			}
			if got := handled[0].Start.Format(tc.rg.BarLayout); got != tc.first {
				t.Errorf("first bar starts %s, want %s", got, tc.first)
			}
			if got := handled[tc.rg.N-1].Start.Format(tc.rg.BarLayout); got != tc.last {
				t.Errorf("last bar starts %s, want %s", got, tc.last)
			}
			if c.Bars[tc.rg.N-1].Label != tc.barLabel {
				t.Errorf("last bar says %q, want %q", c.Bars[tc.rg.N-1].Label, tc.barLabel)
			}
			var ticks []string
			for _, x := range c.XTicks {
				ticks = append(ticks, x.Label)
			}
			if strings.Join(ticks, " ") != strings.Join(tc.ticks, " ") {
				t.Errorf("time axis %v, want %v", ticks, tc.ticks)
			}
			if c.Top != 50 || len(c.YTicks) != 3 || c.YTicks[1].Label != "25" || c.YTicks[2].Label != "50" {
				t.Errorf("value axis to %d, ticks %+v; want 0, 25, 50", c.Top, c.YTicks)
			}
			// The peak is the busiest minute (9 in the bar of 45), not a bar.
			if c.PeakText() != "peak 9/min" || c.Total != 52 {
				t.Errorf("%s, total %d; want peak 9/min, 52", c.PeakText(), c.Total)
			}
			if !strings.Contains(c.Summary(), tc.rg.Span) || !strings.Contains(c.Summary(), tc.rg.Unit) {
				t.Errorf("summary %q says neither span nor unit", c.Summary())
			}
		})
	}
	t.Run("a stacked chart names every series in a bar and a peak per series", func(t *testing.T) {
		t.Parallel()
		rg := chartRanges[0]
		in, out := make([]rollup.Bucket, rg.N), make([]rollup.Bucket, rg.N)
		in[59], out[59] = rollup.Bucket{Sum: 4, Peak: 4}, rollup.Bucket{Sum: 6, Peak: 6}
		c := buildChart(chartSpec{Range: rg, From: rg.from(now),
			Stack: []chartSeries{{Label: "inbound", Class: "s1", Buckets: in}, {Label: "outbound", Class: "s2", Buckets: out}},
			Peaks: []chartSeries{{Label: "in", Buckets: in}, {Label: "out", Buckets: out}}})
		if c.Bars[59].Label != "12:34 UTC: 4 inbound, 6 outbound" || len(c.Bars[59].Segs) != 2 || c.Bars[59].Value != "10" {
			t.Fatalf("bar %+v", c.Bars[59])
		}
		if c.PeakText() != "peak 4/min in, 6/min out" || c.Top != 10 || len(c.YTicks) != 3 {
			t.Fatalf("%s, top %d", c.PeakText(), c.Top)
		}
	})
	t.Run("an empty chart still has its axes", func(t *testing.T) {
		t.Parallel()
		rg := chartRanges[0]
		c := buildChart(chartSpec{Range: rg, From: rg.from(now), Stack: []chartSeries{{Label: "handled"}}, Peaks: []chartSeries{{}}})
		if len(c.Bars) != rg.N || c.Top != 1 || len(c.YTicks) != 2 || len(c.XTicks) == 0 || c.PeakText() != "peak 0/min" {
			t.Fatalf("%d bars, top %d, ticks %+v %+v, %s", len(c.Bars), c.Top, c.YTicks, c.XTicks, c.PeakText())
		}
	})
}

func TestRangeOf(t *testing.T) {
	t.Parallel()
	for q, want := range map[string]string{"": "1h", "?range=24h": "24h", "?range=7d": "7d", "?range=1y": "1h"} {
		if got := rangeOf(httptest.NewRequest("GET", "/admin"+q, nil)).Key; got != want {
			t.Errorf("%q: %s, want %s", q, got, want)
		}
	}
}

// The Overview's referral card over a week of rolled-up marks: the number
// of this minute is never above the chart's peak, and the 7-day chart
// reads the rollups.
func TestOverviewThroughput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	ref, err := referral.New(ctx, referral.Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	var marks []time.Time
	for i := range 36 { // every 4 hours until the sixth day
		marks = append(marks, start.Add(time.Duration(i)*4*time.Hour+time.Duration(i)*time.Second))
	}
	// A busy minute, then a few marks in the minute the page is read in.
	for i := range 30 {
		marks = append(marks, start.Add(6*24*time.Hour+time.Duration(i)*time.Second))
	}
	now := start.Add(6*24*time.Hour + 30*time.Minute + 20*time.Second)
	for i := range 5 {
		marks = append(marks, now.Add(-time.Duration(5-i)*time.Second))
	}
	referraltest.Marks(t, db, referral.OutcomeR1, marks...)
	clock.Set(now)
	var calls int
	counted := func(ctx context.Context, from, to time.Time) (int64, error) {
		calls++
		return ref.ConsumedBetween(ctx, from, to)
	}
	ru := rollup.New(rollup.Opts{DB: db, Sources: map[rollup.Series]rollup.CountFunc{
		rollup.IdentityConsumed: counted, rollup.BondsCreated: ref.BondsBetween}})
	if _, err := ru.RollUp(ctx, now); err != nil {
		t.Fatal(err)
	}
	s := New(Options{DB: db, AdminToken: "admin-token-0123456789abcdef", Referral: ref, Rollups: ru})

	for _, rg := range chartRanges {
		t.Run("the "+rg.Key+" card's number is this minute's and under its peak", func(t *testing.T) {
			calls = 0
			ref, err := s.referralSummary(ctx, now, rg)
			if err != nil {
				t.Fatal(err)
			}
			if ref.PerMinute != 5 {
				t.Fatalf("this minute: %d, want 5", ref.PerMinute)
			}
			if len(ref.Chart.Peaks) != 1 || ref.Chart.Peaks[0].PerMinute != 30 {
				t.Fatalf("peaks %+v, want the busy minute's 30", ref.Chart.Peaks)
			}
			// The owner is asked only for the minutes not rolled up: this
			// one and the one settling, and the card's own minute.
			if calls > 3 {
				t.Fatalf("the %s chart counted %d times at the owner", rg.Key, calls)
			}
			if rg.Key == "7d" && ref.Chart.Total != int64(len(marks))-int64(countBefore(marks, rg.from(now))) {
				t.Fatalf("the week counts %d, want %d", ref.Chart.Total, len(marks)-countBefore(marks, rg.from(now)))
			}
		})
	}
}

func countBefore(marks []time.Time, t time.Time) int {
	n := 0
	for _, m := range marks {
		if m.Before(t) {
			n++
		}
	}
	return n
}
