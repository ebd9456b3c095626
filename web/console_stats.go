package web

import (
	"context"
	"sync"
	"time"
)

// The console's per-minute throughput. Each series is counted by the package
// that owns its table, through a countFunc (the owner's …Between method); the
// console only asks for the minutes of its charts and keeps the counts of the
// minutes that are over, so a poll counts only the current minute's rows.

// countFunc counts a series' rows stamped in [from, to); a zero to has no
// end. backend.Outbox.CountHandled, referral.Service.ConsumedBetween and
// omni.Admin.InboundBetween are such functions.
type countFunc func(ctx context.Context, from, to time.Time) (int64, error)

// series names a throughput line of the console's charts.
type series string

// The console's throughput series.
const (
	outboxHandled    series = "bot.outbox.handled"
	identityConsumed series = "referral.identity.consumed"
	bondsCreated     series = "referral.bonds.created"
	chatInbound      series = "omni.messages.inbound"
	chatOutbound     series = "omni.messages.outbound"
)

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
const finalAfter = 5 * time.Second

// minuteCache keeps the counts of finished minutes.
type minuteCache struct {
	mu     sync.Mutex
	counts map[series]map[string]int64
}

func (c *minuteCache) get(sr series, minute string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.counts[sr][minute]
	return n, ok
}

func (c *minuteCache) put(sr series, minute string, n int64, oldest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[series]map[string]int64)
	}
	m := c.counts[sr]
	if m == nil {
		m = make(map[string]int64)
		c.counts[sr] = m
	}
	m[minute] = n
	for k := range m {
		if k < oldest {
			delete(m, k)
		}
	}
}

// perMinute counts sr's rows in each of the chart's minutes up to now's; a
// series whose owner is not wired counts nothing.
func (s *Server) perMinute(ctx context.Context, sr series, now time.Time) (map[string]int64, error) {
	count, ok := s.counts[sr]
	out := make(map[string]int64, chartMinutes)
	if !ok {
		return out, nil
	}
	start := chartStart(now)
	for i := range chartMinutes {
		from := start.Add(time.Duration(i) * time.Minute)
		key := minuteKey(from)
		if n, ok := s.minutes.get(sr, key); ok {
			out[key] = n
			continue
		}
		n, err := count(ctx, from, from.Add(time.Minute))
		if err != nil {
			return nil, err
		}
		out[key] = n
		if now.Sub(from) >= time.Minute+finalAfter {
			s.minutes.put(sr, key, n, minuteKey(start))
		}
	}
	return out, nil
}

// since counts sr's rows stamped at or after t.
func (s *Server) since(ctx context.Context, sr series, t time.Time) (int64, error) {
	count, ok := s.counts[sr]
	if !ok {
		return 0, nil
	}
	return count(ctx, t, time.Time{})
}
