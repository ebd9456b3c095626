package alerts

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultSampleEvery is how often a Sampler samples unless told otherwise.
const DefaultSampleEvery = 15 * time.Second

// SamplerOpts configure NewSampler.
type SamplerOpts struct {
	// Gatherer is the registry the counters are on (the default registry
	// when nil).
	Gatherer prometheus.Gatherer
	// Now is the clock (time.Now when nil); wire the store's, so tests can
	// move it.
	Now func() time.Time
	// Every is the time between samples (DefaultSampleEvery).
	Every  time.Duration
	Logger *slog.Logger
}

// Sampler keeps samples of the counters the counter rules read
// (OutboundFailures, TelegramTooManyRequests, WebhookErrors) for their
// longest window, so that the console can tell how much each rose over its
// rule's window, on this process's counters, as Prometheus does on the
// fleet's. A process's counters start at 0 with it and never reset, so an
// increase is the latest value less the one at the window's start.
type Sampler struct {
	gather prometheus.Gatherer
	now    func() time.Time
	every  time.Duration
	keep   time.Duration
	log    *slog.Logger
	want   map[string][]matcher // metric → the matchers of the series read of it

	mu      sync.Mutex
	samples []sample // oldest first
}

type sample struct {
	at     time.Time
	points map[string][]point // metric → its series that any rule reads
}

type point struct {
	labels map[string]string
	v      float64
}

// NewSampler returns a sampler that has taken its first sample.
func NewSampler(opts SamplerOpts) *Sampler {
	if opts.Gatherer == nil {
		opts.Gatherer = prometheus.DefaultGatherer
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Every <= 0 {
		opts.Every = DefaultSampleEvery
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sampler{gather: opts.Gatherer, now: opts.Now, every: opts.Every, log: opts.Logger, want: map[string][]matcher{}}
	for _, r := range []ratio{outboundRatio, webhookRatio} {
		s.keep = max(s.keep, r.window)
		for _, sr := range []Series{r.bad, r.all} {
			s.want[sr.Metric] = append(s.want[sr.Metric], sr.matcher())
		}
	}
	s.keep = max(s.keep, TooManyRequestsWindow) + s.every
	s.want[tooManyRequestsSeries.Metric] = append(s.want[tooManyRequestsSeries.Metric], tooManyRequestsSeries.matcher())
	if err := s.Sample(); err != nil {
		s.log.Warn("counters not sampled", slog.Any("err", err))
	}
	return s
}

// Name names the sampler as a worker of the process.
func (s *Sampler) Name() string { return "alert-sampler" }

// Run samples every Every until ctx ends.
func (s *Sampler) Run(ctx context.Context) error {
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if err := s.Sample(); err != nil {
				s.log.Warn("counters not sampled", slog.Any("err", err))
			}
		}
	}
}

// Sample takes a sample now and drops those no window needs any more.
func (s *Sampler) Sample() error {
	sm, err := s.take()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, sm)
	// Keep the newest sample at or before now-keep, the base of the longest
	// window, and every later one.
	cut := 0
	for i := range s.samples {
		if !s.samples[i].at.After(sm.at.Add(-s.keep)) {
			cut = i
		}
	}
	s.samples = s.samples[cut:]
	return nil
}

func (s *Sampler) take() (sample, error) {
	at := s.now()
	families, err := s.gather.Gather()
	if err != nil {
		return sample{}, fmt.Errorf("alerts: gather the counters: %w", err)
	}
	sm := sample{at: at, points: map[string][]point{}}
	for _, f := range families {
		ms, ok := s.want[f.GetName()]
		if !ok {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetCounter() == nil {
				continue // the rules read counters only
			}
			labels := make(map[string]string, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for _, mt := range ms {
				if mt.matches(labels) {
					sm.points[f.GetName()] = append(sm.points[f.GetName()], point{labels: labels, v: m.GetCounter().GetValue()})
					break
				}
			}
		}
	}
	return sm, nil
}

// Counters are the increases over each counter rule's window: from the
// newest sample at or before the window's start (the oldest sample, when
// the process is younger than the window) to the counters' values now.
func (s *Sampler) Counters() (CounterFacts, error) {
	now, err := s.take()
	if err != nil {
		return CounterFacts{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		s.samples = append(s.samples, now)
	}
	c := CounterFacts{Since: s.samples[0].at}
	c.Outbound = s.ratioCounts(outboundRatio, now)[""]
	c.TooManyRequests = s.increase(tooManyRequestsSeries, TooManyRequestsWindow, now, "bot")
	c.Webhooks = s.ratioCounts(webhookRatio, now)
	return c, nil
}

// ratioCounts is r's bad and all increases, by r.by.
func (s *Sampler) ratioCounts(r ratio, now sample) map[string]Counts {
	bad, all := s.increase(r.bad, r.window, now, r.by...), s.increase(r.all, r.window, now, r.by...)
	out := map[string]Counts{}
	for k, v := range all {
		out[k] = Counts{Bad: bad[k], All: v}
	}
	for k, v := range bad {
		c := out[k]
		c.Bad = v
		out[k] = c
	}
	return out
}

// increase sums, by the labels by, how much the series sr rose over window
// up to now: `sum by (by…) (increase(sr[window]))` on this process. A
// series the base sample lacks rose from 0, as every counter starts.
func (s *Sampler) increase(sr Series, window time.Duration, now sample, by ...string) map[string]float64 {
	base := s.samples[0]
	for _, sm := range s.samples {
		if !sm.at.After(now.at.Add(-window)) {
			base = sm
		}
	}
	m := sr.matcher()
	before := map[string]float64{}
	for _, p := range base.points[sr.Metric] {
		if m.matches(p.labels) {
			before[seriesKey(p.labels)] = p.v
		}
	}
	out := map[string]float64{}
	for _, p := range now.points[sr.Metric] {
		if !m.matches(p.labels) {
			continue
		}
		parts := make([]string, len(by))
		for i, l := range by {
			parts[i] = p.labels[l]
		}
		out[strings.Join(parts, "\x00")] += p.v - before[seriesKey(p.labels)]
	}
	return out
}

// seriesKey identifies a series by its labels.
func seriesKey(labels map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString(k + "=" + labels[k] + "\x00")
	}
	return b.String()
}
