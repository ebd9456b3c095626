package web

import (
	"context"
	"net/http"
	"strings"
	"time"

	"switchyard/bot/backend"
	"switchyard/referral"
	"switchyard/store"
)

// overviewModel is the Overview page: each subsystem's live numbers with a
// throughput chart, the queues, and the process.
type overviewModel struct {
	Version       string
	Roles         string
	SchemaVersion int64
	Database      string

	Bot      botSummary
	Referral referralSummary
	Chat     chatSummary
	Queues   []queueRow
	// QueueDepth and QueueDead sum every queue.
	QueueDepth, QueueDead int64
	// Demo is the simulator's state; nil when this process has none.
	Demo *DemoStatus
	// Retention is the database's space and the retention rules; nil
	// without a retention runner.
	Retention *retentionModel
	// Alerts are the alert rules' conditions that hold now.
	Alerts alertsModel
}

// botSummary is the bot outbox's card.
type botSummary struct {
	Pending, Retrying, Dead int64
	PerMinute               int64 // events handled in the last 60 s
	Chart                   chartModel
}

// referralSummary is the referral consumer's card.
type referralSummary struct {
	Lag       int64
	OldestAge time.Duration
	Bonds     int64
	DLQ       int64
	PerMinute int64 // identity events consumed in the last 60 s
	Chart     chartModel
}

// chatSummary is the chat platform's card.
type chatSummary struct {
	Open, Unread             int64
	InboundPerMin, OutPerMin int64
	Failed                   int64
	Chart                    chartModel
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	m, err := s.overviewModel(r)
	if err != nil {
		s.failed(w, r, "overview", err)
		return
	}
	s.render(w, r, overviewPage(s.newPage(w, r, "Overview", "overview"), m))
}

func (s *Server) overviewModel(r *http.Request) (overviewModel, error) {
	ctx := r.Context()
	now := s.opts.DB.Now()
	m := overviewModel{
		Version:  s.opts.Version,
		Roles:    strings.Join(s.opts.Roles, ", "),
		Database: store.Redact(s.opts.DB.Path()),
	}
	if st, err := s.opts.DB.MigrationStatus(ctx); err == nil {
		m.SchemaVersion = st.Current
	}
	st, _ := s.queueStats(r)
	m.Queues = toQueueRows(st)
	m.QueueDepth, m.QueueDead = queueTotals(m.Queues)
	if s.opts.Demo != nil {
		st := s.opts.Demo.TrafficStatus()
		m.Demo = &st
	}

	var err error
	if m.Bot, err = s.botSummary(ctx, now); err != nil {
		return m, err
	}
	if m.Referral, err = s.referralSummary(ctx, now); err != nil {
		return m, err
	}
	if g, ok := groupOf(st, referral.TopicIdentityUsers, referral.ConsumerGroup); ok {
		m.Referral.Lag, m.Referral.DLQ, m.Referral.OldestAge = g.Lag, g.Dead, g.OldestAge
	}
	if m.Chat, err = s.chatSummary(ctx, now); err != nil {
		return m, err
	}
	if m.Retention, err = s.retentionView(ctx, now); err != nil {
		return m, err
	}
	if m.Alerts, err = s.alertsView(ctx, now, st); err != nil {
		return m, err
	}
	return m, nil
}

func (s *Server) botSummary(ctx context.Context, now time.Time) (botSummary, error) {
	var b botSummary
	c := backend.Counts{}
	if s.opts.Outbox != nil {
		var err error
		if c, err = s.opts.Outbox.CountUnfinished(ctx); err != nil {
			return b, err
		}
	}
	var err error
	b.Pending, b.Retrying, b.Dead = c.Pending, c.Retrying, c.Dead
	if b.PerMinute, err = s.since(ctx, outboxHandled, now.Add(-time.Minute)); err != nil {
		return b, err
	}
	handled, err := s.perMinute(ctx, outboxHandled, now)
	if err != nil {
		return b, err
	}
	b.Chart = buildChart("chart-bot", "Outbox events handled per minute, last 30 minutes", now,
		chartSeries{Label: "handled", Class: "s1", Counts: handled})
	return b, nil
}

func (s *Server) referralSummary(ctx context.Context, now time.Time) (referralSummary, error) {
	var ref referralSummary
	var err error
	if s.opts.Referral != nil {
		if ref.Bonds, err = s.opts.Referral.CountBonds(ctx); err != nil {
			return ref, err
		}
	}
	if ref.PerMinute, err = s.since(ctx, identityConsumed, now.Add(-time.Minute)); err != nil {
		return ref, err
	}
	consumed, err := s.perMinute(ctx, identityConsumed, now)
	if err != nil {
		return ref, err
	}
	bonds, err := s.perMinute(ctx, bondsCreated, now)
	if err != nil {
		return ref, err
	}
	// A bond is also a consumed event: the chart stacks bonds on the rest.
	rest := make(map[string]int64, len(consumed))
	for k, n := range consumed {
		rest[k] = max(n-bonds[k], 0)
	}
	ref.Chart = buildChart("chart-referral", "Identity events consumed per minute (bonds created in green), last 30 minutes", now,
		chartSeries{Label: "bond created", Class: "s2", Counts: bonds},
		chartSeries{Label: "other events", Class: "s1", Counts: rest})
	return ref, nil
}

func (s *Server) chatSummary(ctx context.Context, now time.Time) (chatSummary, error) {
	var c chatSummary
	var err error
	if s.opts.Chat != nil {
		cc, err := s.opts.Chat.Counts(ctx)
		if err != nil {
			return c, err
		}
		c.Open, c.Unread, c.Failed = cc.OpenThreads, cc.Unread, cc.Failed
	}
	minuteAgo := now.Add(-time.Minute)
	if c.InboundPerMin, err = s.since(ctx, chatInbound, minuteAgo); err != nil {
		return c, err
	}
	if c.OutPerMin, err = s.since(ctx, chatOutbound, minuteAgo); err != nil {
		return c, err
	}
	in, err := s.perMinute(ctx, chatInbound, now)
	if err != nil {
		return c, err
	}
	out, err := s.perMinute(ctx, chatOutbound, now)
	if err != nil {
		return c, err
	}
	c.Chart = buildChart("chart-chat", "Chat messages per minute, inbound and outbound, last 30 minutes", now,
		chartSeries{Label: "inbound", Class: "s1", Counts: in},
		chartSeries{Label: "outbound", Class: "s2", Counts: out})
	return c, nil
}
