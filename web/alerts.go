package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"switchyard/alerts"
	"switchyard/queue"
	"switchyard/referral"
	"switchyard/store"
)

// The Overview's alerts: the conditions of the Prometheus rules file
// (docs/alerts/switchyard-rules.yml), decided by alerts.Check with the
// rules' own thresholds, on what this instance knows. The database's facts
// (the referral group's lag, dead letters, G1 lookups, readiness, the
// disk) are every instance's; the counter rules (chat deliveries, 429s,
// webhook 5xx) read this process's own counters, through the sampler.

// alertCounters is this process's counters over the rules' windows
// (*alerts.Sampler).
type alertCounters interface {
	Counters() (alerts.CounterFacts, error)
}

// alertsModel is the Overview's alerts card.
type alertsModel struct {
	Firing []alerts.Firing
	// Counters says what the counter rules read; empty when they are not
	// checked here.
	Counters string
	// Disk is the SQLite file's file system, "12.3 GiB available of 40.0
	// GiB"; empty on PostgreSQL.
	Disk string
}

// readyWait bounds how long the Overview waits for a readiness probe.
const readyWait = 2 * time.Second

func (s *Server) alertsView(ctx context.Context, now time.Time, st queue.Stats) (alertsModel, error) {
	f, err := s.alertFacts(ctx, now, st)
	if err != nil {
		return alertsModel{}, err
	}
	m := alertsModel{Firing: alerts.Check(f)}
	if d := f.Disk; d != nil {
		m.Disk = bytesText(d.Available) + " available of " + bytesText(d.Size)
	}
	if c := f.Counters; c != nil {
		m.Counters = "Chat deliveries, 429s and webhook 5xx are this process's own"
		if longest := max(alerts.OutboundWindow, alerts.TooManyRequestsWindow, alerts.WebhookWindow); now.Sub(c.Since) < longest {
			m.Counters += ", counted since it started " + ago(now, c.Since)
		}
		m.Counters += "."
	}
	return m, nil
}

// alertFacts gathers what Check decides on, from the subsystems wired here.
func (s *Server) alertFacts(ctx context.Context, now time.Time, st queue.Stats) (alerts.Facts, error) {
	var f alerts.Facts
	if g, ok := groupOf(st, referral.TopicIdentityUsers, referral.ConsumerGroup); ok {
		f.ReferralLag = &g.OldestAge
	}
	if s.opts.Queues != nil {
		dead, err := s.opts.Queues.DeadLetteredSince(ctx, now.Add(-alerts.DeadLetterWindow))
		if err != nil {
			return f, err
		}
		for _, d := range dead {
			f.DeadLettered = append(f.DeadLettered, alerts.QueueCount{Queue: d.Queue, Group: d.Group, Count: d.Count})
		}
	}
	if s.opts.Outbox != nil {
		n, err := s.opts.Outbox.CountDeadLettered(ctx, now.Add(-alerts.DeadLetterWindow), time.Time{})
		if err != nil {
			return f, err
		}
		f.OutboxDeadLettered = &n
	}
	if s.opts.Referral != nil {
		l, err := s.linkLookups(ctx, now.Add(-alerts.LinkNotFoundWindow), now)
		if err != nil {
			return f, err
		}
		f.LinkLookups = &alerts.Counts{Bad: float64(l.Missing), All: float64(l.Looked)}
	}
	if s.opts.AlertCounters != nil {
		c, err := s.opts.AlertCounters.Counters()
		if err != nil {
			return f, err
		}
		f.Counters = &c
	}
	rctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	mst, err := s.opts.DB.Ready(rctx)
	reason := notReady(mst, err)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		reason = "the readiness probe did not answer within " + readyWait.String()
	}
	f.Readiness = &alerts.Readiness{Ready: reason == "", Reason: reason}
	if !s.opts.DB.Postgres() {
		sp, err := s.opts.DB.Space(ctx)
		if err != nil {
			return f, err
		}
		if sp.DiskBytes > 0 {
			f.Disk = &alerts.Disk{Available: sp.DiskAvailableBytes, Size: sp.DiskBytes}
		}
	}
	return f, nil
}

// lookupCache keeps the link lookups of finished minutes.
type lookupCache struct {
	mu sync.Mutex
	m  map[string]referral.LinkLookups
}

// linkLookups counts the referral link lookups of [from, now]: the whole
// minutes between from and now's minute from the cache once they are final
// (finalAfter), the partial minutes at either end afresh, so that a poll
// counts about two minutes of marks rather than the alert's whole hour.
func (s *Server) linkLookups(ctx context.Context, from, now time.Time) (referral.LinkLookups, error) {
	var total referral.LinkLookups
	add := func(l referral.LinkLookups) { total.Looked += l.Looked; total.Missing += l.Missing }
	first := from.Truncate(time.Minute)
	if first.Before(from) {
		first = first.Add(time.Minute)
	}
	last := now.Truncate(time.Minute)
	if first.After(last) {
		l, err := s.opts.Referral.LinkLookupsBetween(ctx, from, time.Time{})
		return l, err
	}
	if from.Before(first) {
		l, err := s.opts.Referral.LinkLookupsBetween(ctx, from, first)
		if err != nil {
			return total, err
		}
		add(l)
	}
	c := &s.lookups
	for m := first; m.Before(last); m = m.Add(time.Minute) {
		key := minuteKey(m)
		c.mu.Lock()
		l, ok := c.m[key]
		c.mu.Unlock()
		if !ok {
			var err error
			if l, err = s.opts.Referral.LinkLookupsBetween(ctx, m, m.Add(time.Minute)); err != nil {
				return total, err
			}
			if now.Sub(m) >= time.Minute+finalAfter {
				c.put(key, l, minuteKey(first))
			}
		}
		add(l)
	}
	l, err := s.opts.Referral.LinkLookupsBetween(ctx, last, time.Time{})
	if err != nil {
		return total, err
	}
	add(l)
	return total, nil
}

func (c *lookupCache) put(key string, l referral.LinkLookups, oldest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]referral.LinkLookups{}
	}
	c.m[key] = l
	for k := range c.m {
		if k < oldest {
			delete(c.m, k)
		}
	}
}

// notReady says why the database is not ready, as /readyz answers it with
// a 503; "" when it is ready.
func notReady(st store.MigrationStatus, err error) string {
	switch {
	case errors.Is(err, store.ErrCorrupt):
		return "the database file is damaged: restore it from a backup and restart"
	case err != nil:
		return "database is not writable"
	case st.Pending():
		return fmt.Sprintf("schema at version %d, %d expected; run switchyard migrate", st.Current, st.Latest)
	}
	return ""
}

// metricsHandler serves /metrics with switchyard_store_ready refreshed: the
// scrape asks the database's readiness first (cached by store.DB.Ready for
// a moment, so a scrape costs at most one heartbeat write), so the gauge
// says what /readyz would answer at the scrape, even where nothing else
// probes /readyz.
func (s *Server) metricsHandler() http.Handler {
	h := promhttp.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyWait)
		_, _ = s.opts.DB.Ready(ctx)
		cancel()
		h.ServeHTTP(w, r)
	})
}

// webhookCodes are the statuses of a webhook route whose
// switchyard_http_requests_total series exist at 0 from the start: the
// answers the webhook alert reads (a 200, and the 5xx a webhook gives).
var webhookCodes = []int{http.StatusOK, http.StatusInternalServerError, http.StatusServiceUnavailable}

// declareWebhookSeries makes the request counter of every webhook route
// (its template starts with /webhooks/) exist at 0, so the webhook alert's
// rate sees the first 5xx rather than a series that appears with it.
func declareWebhookSeries(r *mux.Router) {
	_ = r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tmpl, err := route.GetPathTemplate()
		if err != nil || !strings.HasPrefix(tmpl, "/webhooks/") || route.GetHandler() == nil {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			return nil
		}
		for _, m := range methods {
			for _, c := range webhookCodes {
				httpRequests.WithLabelValues(tmpl, m, strconv.Itoa(c))
			}
		}
		return nil
	})
}
