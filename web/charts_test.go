package web_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"switchyard/omni"
	"switchyard/omni/omnitest"
	"switchyard/rollup"
	"switchyard/store/storetest"
	"switchyard/web"
)

// The Overview's charts over HTTP, without JavaScript: the range in the
// URL, the bars focusable with their time and value, the axes labelled.
func TestOverviewCharts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	chat := omni.NewAdmin(omni.AdminOpts{DB: db})
	start := clock.Now()
	omnitest.Thread(t, db,
		omnitest.Message{Direction: omni.DirectionInbound, At: start.Add(-2 * 24 * time.Hour)},
		omnitest.Message{Direction: omni.DirectionInbound, At: start.Add(-3 * time.Minute)},
		omnitest.Message{Direction: omni.DirectionOutbound, At: start.Add(-3*time.Minute + time.Second)},
		omnitest.Message{Direction: omni.DirectionInbound, At: start.Add(10 * time.Second)})
	clock.Set(start.Add(30 * time.Second))
	ru := rollup.New(rollup.Opts{DB: db, Sources: map[rollup.Series]rollup.CountFunc{
		rollup.ChatInbound: chat.InboundBetween, rollup.ChatOutbound: chat.OutboundBetween}})
	if _, err := ru.RollUp(ctx, clock.Now()); err != nil {
		t.Fatal(err)
	}
	c := newConsole(t, web.Options{DB: db, Chat: chat, Rollups: ru})

	for _, tc := range []struct {
		query, active string
		bars          int
		firstTick     string
		inAll         string
	}{
		{"", "1h", 60, "11:10", "3 in all"},
		{"?range=24h", "24h", 96, "15:00", "3 in all"},
		{"?range=7d", "7d", 168, "Fri 9", "4 in all"},
		{"?range=bogus", "1h", 60, "11:10", "3 in all"},
	} {
		t.Run("the overview"+tc.query+" draws the "+tc.active+" chart", func(t *testing.T) {
			doc := c.get(t, "/admin"+tc.query, http.StatusOK)
			for _, k := range []string{"1h", "24h", "7d"} {
				link := tid(doc, "range-"+k)
				if link.AttrOr("href", "") != "/admin?range="+k {
					t.Errorf("range link %s goes to %q", k, link.AttrOr("href", ""))
				}
				if _, current := link.Attr("aria-current"); current != (k == tc.active) {
					t.Errorf("range link %s current: %v", k, current)
				}
			}
			chart := tid(doc, "chart-chat")
			svg := chart.Find(`[data-testid="chart-svg"]`)
			label := svg.AttrOr("aria-label", "")
			if !strings.HasPrefix(label, "Chat messages") || !strings.Contains(label, tc.inAll) {
				t.Errorf("the chart's text alternative is %q, want it to count %s", label, tc.inAll)
			}
			bars := svg.Find("g.bar-g")
			if bars.Length() != tc.bars {
				t.Fatalf("%d bars, want %d", bars.Length(), tc.bars)
			}
			bars.Each(func(i int, b *goquery.Selection) {
				// One tab stop per chart, the newest bar; the arrow keys reach the rest.
				want := "-1"
				if i == tc.bars-1 {
					want = "0"
				}
				if b.AttrOr("tabindex", "") != want || b.AttrOr("role", "") != "img" || !strings.Contains(b.Find("title").Text(), " UTC: ") {
					t.Errorf("bar %d (tabindex %q, want %q) is not focusable with its time and value: %s", i, b.AttrOr("tabindex", ""), want, b.Find("title").Text())
				}
			})
			last := bars.Last()
			if got := trimmed(last.Find("title")); !strings.HasSuffix(got, "UTC: 1 inbound, 0 outbound") {
				t.Errorf("the last bar says %q", got)
			}
			if trimmed(svg.Find(`[data-testid="x-axis"] text`).First()) != tc.firstTick {
				t.Errorf("the time axis starts at %q, want %q", trimmed(svg.Find(`[data-testid="x-axis"] text`).First()), tc.firstTick)
			}
			if svg.Find(`[data-testid="y-axis"] text`).Length() < 3 {
				t.Error("the value axis has no labels")
			}
			if got := trimmed(chart.Find(`[data-testid="chart-peak"]`)); got != "peak 1/min in, 1/min out" {
				t.Errorf("caption peak %q", got)
			}
			if trimmed(tid(doc, "chat-in-per-minute")) != "1" {
				t.Errorf("in this minute: %q", trimmed(tid(doc, "chat-in-per-minute")))
			}
		})
	}
}
