package web

import (
	"context"
	"net/http"
	"strings"
	"time"

	"switchyard/bot/backend"
	"switchyard/referral"
	"switchyard/rollup"
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
	// Range is the charts' range switch (?range=).
	Range []stateTab
}

// botSummary is the bot outbox's card.
type botSummary struct {
	Pending, Retrying, Dead int64
	PerMinute               int64 // events handled in now's minute so far
	Chart                   chartModel
}

// referralSummary is the referral consumer's card.
type referralSummary struct {
	Lag       int64
	OldestAge time.Duration
	Bonds     int64
	DLQ       int64
	PerMinute int64 // identity events consumed in now's minute so far
	Chart     chartModel
}

// chatSummary is the chat platform's card.
type chatSummary struct {
	Open, Unread             int64
	InboundPerMin, OutPerMin int64 // messages of now's minute so far
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
	rg := rangeOf(r)
	m.Range = rangeTabs("/admin", rg)
	if m.Bot, err = s.botSummary(ctx, now, rg); err != nil {
		return m, err
	}
	if m.Referral, err = s.referralSummary(ctx, now, rg); err != nil {
		return m, err
	}
	if g, ok := groupOf(st, referral.TopicIdentityUsers, referral.ConsumerGroup); ok {
		m.Referral.Lag, m.Referral.DLQ, m.Referral.OldestAge = g.Lag, g.Dead, g.OldestAge
	}
	if m.Chat, err = s.chatSummary(ctx, now, rg); err != nil {
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

func (s *Server) botSummary(ctx context.Context, now time.Time, rg chartRange) (botSummary, error) {
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
	if b.PerMinute, err = s.thisMinute(ctx, outboxHandled, now); err != nil {
		return b, err
	}
	handled, err := s.buckets(ctx, outboxHandled, rg, now)
	if err != nil {
		return b, err
	}
	sr := chartSeries{Label: "handled", Class: "s1", Buckets: handled}
	b.Chart = buildChart(chartSpec{Testid: "chart-bot", Title: "Outbox events handled", Range: rg, From: rg.from(now),
		Stack: []chartSeries{sr}, Peaks: []chartSeries{{Buckets: handled}}})
	return b, nil
}

func (s *Server) referralSummary(ctx context.Context, now time.Time, rg chartRange) (referralSummary, error) {
	var ref referralSummary
	var err error
	if s.opts.Referral != nil {
		if ref.Bonds, err = s.opts.Referral.CountBonds(ctx); err != nil {
			return ref, err
		}
	}
	if ref.PerMinute, err = s.thisMinute(ctx, identityConsumed, now); err != nil {
		return ref, err
	}
	consumed, err := s.buckets(ctx, identityConsumed, rg, now)
	if err != nil {
		return ref, err
	}
	bonds, err := s.buckets(ctx, bondsCreated, rg, now)
	if err != nil {
		return ref, err
	}
	// A bond is also a consumed event: the chart stacks bonds on the rest.
	rest := make([]rollup.Bucket, len(consumed))
	for i, b := range consumed {
		rest[i] = b
		if i < len(bonds) {
			rest[i].Sum = max(b.Sum-bonds[i].Sum, 0)
		}
	}
	ref.Chart = buildChart(chartSpec{Testid: "chart-referral", Title: "Identity events consumed (bonds created in green)", Range: rg, From: rg.from(now),
		Stack: []chartSeries{{Label: "bonds created", Class: "s2", Buckets: bonds}, {Label: "other events", Class: "s1", Buckets: rest}},
		Peaks: []chartSeries{{Buckets: consumed}}})
	return ref, nil
}

func (s *Server) chatSummary(ctx context.Context, now time.Time, rg chartRange) (chatSummary, error) {
	var c chatSummary
	var err error
	if s.opts.Chat != nil {
		cc, err := s.opts.Chat.Counts(ctx)
		if err != nil {
			return c, err
		}
		c.Open, c.Unread, c.Failed = cc.OpenThreads, cc.Unread, cc.Failed
	}
	if c.InboundPerMin, err = s.thisMinute(ctx, chatInbound, now); err != nil {
		return c, err
	}
	if c.OutPerMin, err = s.thisMinute(ctx, chatOutbound, now); err != nil {
		return c, err
	}
	in, err := s.buckets(ctx, chatInbound, rg, now)
	if err != nil {
		return c, err
	}
	out, err := s.buckets(ctx, chatOutbound, rg, now)
	if err != nil {
		return c, err
	}
	c.Chart = buildChart(chartSpec{Testid: "chart-chat", Title: "Chat messages, inbound and outbound", Range: rg, From: rg.from(now),
		Stack: []chartSeries{{Label: "inbound", Class: "s1", Buckets: in}, {Label: "outbound", Class: "s2", Buckets: out}},
		Peaks: []chartSeries{{Label: "in", Buckets: in}, {Label: "out", Buckets: out}}})
	return c, nil
}
