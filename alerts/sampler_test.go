package alerts

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// testClock is a clock a test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestSampler: the increase of each counter over its rule's window, on the
// process's counters: from the sample at the window's start to now, and
// since the first sample while the process is younger than the window.
func TestSampler(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	sends := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_omni_outbound_sends_total", Help: "h"}, []string{"outcome"})
	http := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_http_requests_total", Help: "h"}, []string{"route", "method", "code"})
	tooMany := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_telegram_too_many_requests_total", Help: "h"}, []string{"bot"})
	reg.MustRegister(sends, http, tooMany)
	for _, o := range []string{"sent", "retry", "failed", "rate_limited"} {
		sends.WithLabelValues(o)
	}
	clock := &testClock{t: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	s := NewSampler(SamplerOpts{Gatherer: reg, Now: clock.Now, Every: time.Minute})
	started := clock.Now()
	sample := func() {
		t.Helper()
		clock.Advance(time.Minute)
		if err := s.Sample(); err != nil {
			t.Fatal(err)
		}
	}
	counters := func() CounterFacts {
		t.Helper()
		c, err := s.Counters()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Ten minutes: 20 sent and 1 retry a minute; 100 paced (not attempts).
	// The webhook answers 200 100 times and 503 5 times a minute; the admin
	// API's 500s are no webhook's.
	for range 10 {
		sends.WithLabelValues("sent").Add(20)
		sends.WithLabelValues("retry").Add(1)
		sends.WithLabelValues("rate_limited").Add(100)
		http.WithLabelValues("/webhooks/telegram", "POST", "200").Add(100)
		http.WithLabelValues("/webhooks/telegram", "POST", "503").Add(5)
		http.WithLabelValues("/admin/api/topics/{topic}", "POST", "500").Add(50)
		sample()
	}
	tooMany.WithLabelValues("7").Inc() // after the last sample: Counters reads now

	c := counters()
	if !c.Since.Equal(started) {
		t.Errorf("since %v, want the first sample's %v", c.Since, started)
	}
	t.Run("a process younger than the windows counts since its start", func(t *testing.T) {
		if c.Outbound != (Counts{Bad: 10, All: 210}) {
			t.Errorf("outbound %+v, want 10 failed of 210 attempts", c.Outbound)
		}
		if w := c.Webhooks["/webhooks/telegram"]; w != (Counts{Bad: 25, All: 525}) || len(c.Webhooks) != 1 {
			t.Errorf("webhooks %+v, want 25 5xx of 525 on /webhooks/telegram only (5m window: the last 5 samples)", c.Webhooks)
		}
		if n := c.TooManyRequests["7"]; n != 1 {
			t.Errorf("429s %v, want the one counted after the last sample", c.TooManyRequests)
		}
	})

	t.Run("only the window counts", func(t *testing.T) {
		// Ten quiet minutes, then five with 4 failures a minute.
		for range 10 {
			sample()
		}
		for range 5 {
			sends.WithLabelValues("sent").Add(20)
			sends.WithLabelValues("failed").Add(4)
			sample()
		}
		sample()
		c := counters()
		if c.Outbound != (Counts{Bad: 20, All: 120}) {
			t.Errorf("outbound %+v, want the last 15 minutes: 20 failed of 120", c.Outbound)
		}
		if w := c.Webhooks["/webhooks/telegram"]; w != (Counts{}) {
			t.Errorf("webhooks %+v, want nothing in the last 5 minutes", w)
		}
		if n := c.TooManyRequests["7"]; n != 0 {
			t.Errorf("429s %v, want none in the last 15 minutes (the one was 16 minutes ago)", c.TooManyRequests)
		}
		if got := fired(Check(Facts{Counters: &c}), OutboundFailures); got == nil {
			t.Errorf("17%% of deliveries failing: no %s", OutboundFailures)
		}
	})

	t.Run("samples older than every window are dropped", func(t *testing.T) {
		s.mu.Lock()
		n := len(s.samples)
		s.mu.Unlock()
		if keep := int(s.keep / time.Minute); n > keep+1 {
			t.Errorf("%d samples kept, want at most %d", n, keep+1)
		}
	})
}
