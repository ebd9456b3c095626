package web

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"time"

	"switchyard/rollup"
)

// The console's throughput: the Overview's charts and its "per minute"
// numbers. Each series is counted by the package that owns its table
// (through a countFunc, the owner's …Between method) and rolled up per
// minute by package rollup; the console reads the rollups grouped into a
// chart's bars, so a chart of seven days costs about what one of an hour
// does.

// countFunc counts a series' rows stamped in [from, to); a zero to has no
// end. backend.Outbox.CountHandled, referral.Service.ConsumedBetween and
// omni.Admin.InboundBetween are such functions.
type countFunc = rollup.CountFunc

// series names a throughput line of the console's charts.
type series = rollup.Series

// The console's throughput series.
const (
	outboxHandled    = rollup.OutboxHandled
	identityConsumed = rollup.IdentityConsumed
	bondsCreated     = rollup.BondsCreated
	chatInbound      = rollup.ChatInbound
	chatOutbound     = rollup.ChatOutbound
)

// rollupReader is what the console reads of the rollups (*rollup.Rollups).
type rollupReader interface {
	Buckets(ctx context.Context, q rollup.Query) ([]rollup.Bucket, error)
}

// counters returns the counting function of each series whose owner is wired.
func (s *Server) counters() map[series]countFunc {
	c := map[series]countFunc{}
	if s.opts.Outbox != nil {
		c[outboxHandled] = s.opts.Outbox.CountHandled
	}
	if s.opts.Referral != nil {
		c[identityConsumed] = s.opts.Referral.ConsumedBetween
		c[bondsCreated] = s.opts.Referral.BondsBetween
	}
	if s.opts.Chat != nil {
		c[chatInbound] = s.opts.Chat.InboundBetween
		c[chatOutbound] = s.opts.Chat.OutboundBetween
	}
	return c
}

// finalAfter is how long after a minute ends its count is taken as final
// (a transaction stamped inside the minute may commit a little later).
const finalAfter = rollup.DefaultSettle

// minuteKey is the bucket of t: its minute in the stored timestamp form.
func minuteKey(t time.Time) string { return t.UTC().Format("2006-01-02T15:04") }

// since counts sr's rows stamped at or after t.
func (s *Server) since(ctx context.Context, sr series, t time.Time) (int64, error) {
	count, ok := s.counts[sr]
	if !ok {
		return 0, nil
	}
	return count(ctx, t, time.Time{})
}

// chartRange is a span the charts show, as the URL's range names it, and
// the bars it is cut into.
type chartRange struct {
	Key   string // "1h", the URL's ?range=
	Label string // "1 h", the switch's link
	Span  string // "last hour"
	Unit  string // what one bar counts: "per minute"
	Step  time.Duration
	N     int
	// Tick is the spacing of the time axis's labels, TickLayout their
	// format; BarLayout formats a bar's start in its label.
	Tick                  time.Duration
	TickLayout, BarLayout string
}

// chartRanges are the charts' spans, the first the default: each about a
// hundred bars or fewer.
var chartRanges = []chartRange{
	{Key: "1h", Label: "1 h", Span: "last hour", Unit: "per minute", Step: time.Minute, N: 60,
		Tick: 10 * time.Minute, TickLayout: "15:04", BarLayout: "15:04"},
	{Key: "24h", Label: "24 h", Span: "last 24 hours", Unit: "per 15 minutes", Step: 15 * time.Minute, N: 96,
		Tick: 3 * time.Hour, TickLayout: "15:04", BarLayout: "15:04"},
	{Key: "7d", Label: "7 d", Span: "last 7 days", Unit: "per hour", Step: time.Hour, N: 168,
		Tick: 24 * time.Hour, TickLayout: "Mon 2", BarLayout: "Mon 2 Jan 15:04"},
}

// rangeOf is the request's ?range=, the first range when it names none.
func rangeOf(r *http.Request) chartRange {
	key := r.URL.Query().Get("range")
	for _, rg := range chartRanges {
		if rg.Key == key {
			return rg
		}
	}
	return chartRanges[0]
}

// from is the start of rg's first bar when the last one holds now: bars
// start at multiples of the step.
func (rg chartRange) from(now time.Time) time.Time {
	return now.UTC().Truncate(rg.Step).Add(-time.Duration(rg.N-1) * rg.Step)
}

// rangeTabs are the range switch's links, to path with ?range=.
func rangeTabs(path string, active chartRange) []stateTab {
	tabs := make([]stateTab, 0, len(chartRanges))
	for _, rg := range chartRanges {
		tabs = append(tabs, stateTab{Label: rg.Label, Href: path + "?range=" + rg.Key,
			Active: rg.Key == active.Key, Testid: "range-" + rg.Key})
	}
	return tabs
}

// buckets are sr's bars over rg up to now; none when its owner is not
// wired.
func (s *Server) buckets(ctx context.Context, sr series, rg chartRange, now time.Time) ([]rollup.Bucket, error) {
	return s.rollups.Buckets(ctx, rollup.Query{Series: sr, From: rg.from(now), Step: rg.Step, N: rg.N})
}

// thisMinute counts sr's rows of now's minute so far: the card's "this
// minute" number, the last bar of the hour's chart, and a minute of the
// same series the charts' peaks are taken from, so never above them.
func (s *Server) thisMinute(ctx context.Context, sr series, now time.Time) (int64, error) {
	b, err := s.rollups.Buckets(ctx, rollup.Query{Series: sr, From: now.Truncate(time.Minute), Step: time.Minute, N: 1})
	if err != nil {
		return 0, err
	}
	return b[0].Sum, nil
}

// chartModel is one bar chart with a value axis and a time axis; a bar may
// stack two series. Every bar is focusable and says its time and value.
type chartModel struct {
	Testid string
	Title  string // what the bars count: "Outbox events handled"
	Range  chartRange
	Width  int
	Height int
	// PlotLeft, PlotRight, PlotTop and Base bound the bars' area.
	PlotLeft, PlotRight, PlotTop, Base, PlotHeight string
	Bars                                           []chartBar
	YTicks, XTicks                                 []chartTick
	Legend                                         []chartLegend
	// Top is the value axis's top; Total sums every bar.
	Top, Total int64
	// Peaks are the busiest minute of each series the card's numbers count,
	// "peak 176/min": never less than a minute the card shows.
	Peaks []chartPeak
}

// Summary is the chart's text alternative: what it counts over which span,
// the peaks and the total.
func (c chartModel) Summary() string {
	s := c.Title + ", " + c.Range.Span + ", " + c.Range.Unit + ": " + c.PeakText() + ", " + count(c.Total) + " in all"
	return s
}

// rovingTabIndex is a chart bar's tabindex: the newest bar is the chart's
// one stop in the tab order, the others are reached with the arrow keys.
func rovingTabIndex(newest bool) string {
	if newest {
		return "0"
	}
	return "-1"
}

// PeakText is "peak 176/min", or "peak 12/min in, 10/min out".
func (c chartModel) PeakText() string {
	s := "peak"
	for i, p := range c.Peaks {
		if i > 0 {
			s += ","
		}
		s += " " + count(p.PerMinute) + "/min"
		if p.Label != "" {
			s += " " + p.Label
		}
	}
	return s
}

type chartBar struct {
	X, W   string
	Segs   []chartSeg
	Label  string // "12:04 UTC: 37 handled"
	Value  string // "37", shown over the bar on hover and focus
	TipX   string
	TipY   string
	Testid string
}

type chartSeg struct {
	Y, H  string
	Class string
}

// chartTick is a labelled tick of an axis, at Pos (y for the value axis, x
// for the time axis).
type chartTick struct{ Pos, Label string }

type chartLegend struct{ Label, Class string }

type chartPeak struct {
	Label     string
	PerMinute int64
}

// chartSeries is one series' bars, as the rollups give them.
type chartSeries struct {
	Label   string // "handled", in a bar's label and the legend
	Class   string // its colour: "s1", "s2"
	Buckets []rollup.Bucket
}

// chartSpec says what a chart draws: series stacked bottom first, and the
// series whose busiest minute the caption names (peak Label).
type chartSpec struct {
	Testid, Title string
	Range         chartRange
	// From is the first bar's start (chartRange.from).
	From  time.Time
	Stack []chartSeries
	Peaks []chartSeries
}

// The chart's geometry, in the SVG's user units.
const (
	chartWidth, chartHeight = 600, 170
	plotLeft, plotRight     = 46.0, 594.0
	plotTop, plotBase       = 14.0, 146.0
)

// buildChart lays out spec's bars and axes.
func buildChart(spec chartSpec) chartModel {
	rg := spec.Range
	c := chartModel{Testid: spec.Testid, Title: spec.Title, Range: rg, Width: chartWidth, Height: chartHeight,
		PlotLeft: f1(plotLeft), PlotRight: f1(plotRight), PlotTop: f1(plotTop), Base: f1(plotBase),
		PlotHeight: f1(plotBase - plotTop)}
	totals := make([]int64, rg.N)
	var most int64
	for i := range rg.N {
		for _, sr := range spec.Stack {
			totals[i] += sumAt(sr, i)
		}
		c.Total += totals[i]
		most = max(most, totals[i])
	}
	for _, sr := range spec.Stack {
		c.Legend = append(c.Legend, chartLegend{Label: sr.Label, Class: sr.Class})
	}
	for _, sr := range spec.Peaks {
		p := chartPeak{Label: sr.Label}
		for _, b := range sr.Buckets {
			p.PerMinute = max(p.PerMinute, b.Peak)
		}
		c.Peaks = append(c.Peaks, p)
	}
	c.Top = niceCeil(most)
	height := plotBase - plotTop
	yOf := func(v int64) float64 { return plotBase - height*float64(v)/float64(c.Top) }
	c.YTicks = append(c.YTicks, chartTick{Pos: f1(plotBase), Label: "0"})
	if c.Top%2 == 0 {
		c.YTicks = append(c.YTicks, chartTick{Pos: f1(yOf(c.Top / 2)), Label: count(c.Top / 2)})
	}
	c.YTicks = append(c.YTicks, chartTick{Pos: f1(plotTop), Label: count(c.Top)})

	slot := (plotRight - plotLeft) / float64(rg.N)
	gap := math.Min(2, slot*0.2)
	for i := range rg.N {
		start := spec.From.UTC().Add(time.Duration(i) * rg.Step)
		x := plotLeft + float64(i)*slot
		if start.Truncate(rg.Tick).Equal(start) {
			c.XTicks = append(c.XTicks, chartTick{Pos: f1(x), Label: start.Format(rg.TickLayout)})
		}
		b := chartBar{X: f1(x), W: f1(slot - gap), Value: count(totals[i]), Testid: "bar-" + strconv.Itoa(i),
			TipX: f1(x + (slot-gap)/2), TipY: f1(math.Max(yOf(totals[i])-3, 10)),
			Label: barTime(start, rg) + ": " + barValues(spec.Stack, i)}
		y := plotBase
		for _, sr := range spec.Stack {
			n := sumAt(sr, i)
			if n == 0 {
				continue
			}
			h := math.Max(height*float64(n)/float64(c.Top), 1)
			y -= h
			b.Segs = append(b.Segs, chartSeg{Y: f1(y), H: f1(h), Class: sr.Class})
		}
		c.Bars = append(c.Bars, b)
	}
	return c
}

func sumAt(sr chartSeries, i int) int64 {
	if i < len(sr.Buckets) {
		return sr.Buckets[i].Sum
	}
	return 0
}

// barTime is a bar's span: "12:04 UTC", "12:00–12:15 UTC",
// "Mon 15 Jan 12:00–13:00 UTC".
func barTime(start time.Time, rg chartRange) string {
	if rg.Step == time.Minute {
		return start.Format(rg.BarLayout) + " UTC"
	}
	return start.Format(rg.BarLayout) + "–" + start.Add(rg.Step).Format("15:04") + " UTC"
}

// barValues is "37 handled", or "12 inbound, 10 outbound".
func barValues(stack []chartSeries, i int) string {
	s := ""
	for k, sr := range stack {
		if k > 0 {
			s += ", "
		}
		s += count(sumAt(sr, i)) + " " + sr.Label
	}
	return s
}

// niceCeil is the least of 1, 2, 5, 10, 20, 50, … at or above v: the value
// axis's top.
func niceCeil(v int64) int64 {
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}
