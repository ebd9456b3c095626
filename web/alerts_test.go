package web_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/alerts"
	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/referral"
	"switchyard/store/storetest"
	"switchyard/testwait"
	"switchyard/web"
	"switchyard/web/webtest"
)

// TestOverviewAlerts: the Overview shows the alert rules' conditions as
// they hold, decided by the rules' thresholds, on the database (dead
// letters, G1 lookups, the referral group's lag, readiness) and on this
// process's counters (chat deliveries, 429s, webhook 5xx).
func TestOverviewAlerts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	ob := backend.NewOutbox(backend.OutboxOpts{DB: db})
	ref, err := referral.New(ctx, referral.Opts{DB: db, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, ref.Run)

	// This process's counters, on a registry of the test's own.
	reg := prometheus.NewRegistry()
	sends := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_omni_outbound_sends_total", Help: "h"}, []string{"outcome"})
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_http_requests_total", Help: "h"}, []string{"route", "method", "code"})
	tooMany := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_telegram_too_many_requests_total", Help: "h"}, []string{"bot"})
	reg.MustRegister(sends, requests, tooMany)
	opts := web.Options{DB: db, Queues: qa, Outbox: ob, Referral: ref}
	c := newConsole(t, opts)
	overview := func() map[string]string {
		doc := c.get(t, "/admin/", http.StatusOK)
		out := map[string]string{}
		tid(doc, "alerts").Find("li").Each(func(_ int, li *goquery.Selection) {
			id, _ := li.Attr("data-testid")
			out[strings.TrimPrefix(id, "alert-")+" "+trimmed(li.Find(`[data-testid="alert-subject"]`))] = trimmed(li)
		})
		return out
	}

	t.Run("a quiet instance says no condition holds, and shows its disk", func(t *testing.T) {
		doc := c.get(t, "/admin/", http.StatusOK)
		if tid(doc, "alerts-none").Length() != 1 || tid(doc, "alerts").Find("li").Length() != 0 {
			t.Fatalf("alerts card: %q", trimmed(tid(doc, "alerts")))
		}
		disk := trimmed(tid(doc, "database-disk"))
		if db.Postgres() != (disk == "") || (disk != "" && !strings.Contains(disk, " available of ")) {
			t.Fatalf("database disk %q", disk)
		}
	})

	// An outbox event dead-lettered now: its tenth retry.
	id, err := ob.Emit(ctx, backend.NewEvent{Type: contract.EventRegistered, Target: backend.Target{MagnetUID: 7},
		Payload: []byte(`{"leaderUid":1,"phone":"+79991231234"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range contract.BOT_OUTBOX_MAX_ATTEMPTS {
		if i > 0 {
			clock.Advance(24 * time.Hour)
		}
		if _, err := ob.Ack(ctx, contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{fmt.Sprint(id): "telegram: 502"}}); err != nil {
			t.Fatal(err)
		}
	}
	// The sampler starts here, as with a process: its counters are 0.
	sampler := alerts.NewSampler(alerts.SamplerOpts{Gatherer: reg, Now: db.Now})
	opts.AlertCounters = sampler
	c = newConsole(t, opts) // the first session expired over the retries' days
	// A queue message dead-lettered on its first failure.
	q := queue.New(queue.NewOpts{DB: db, Name: "alerts.test"})
	w := q.Start(ctx, queue.WorkerOpts{Handler: func(context.Context, queue.Message) error { return queue.Permanent(errors.New("never")) }})
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	if _, err := q.Send(ctx, queue.Message{Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// Five registrations whose referral link does not exist (G1), of five
	// lookups: above 10%, and five at least.
	for i := range alerts.LinkNotFoundMin {
		user := fmt.Sprintf("dddddddd-0000-4000-8000-%012d", i+1)
		slug := "no-such-link"
		if _, err := qa.Publish(ctx, referral.TopicIdentityUsers, user,
			identityEvent(fmt.Sprintf("6f1c1a52-0000-4000-9000-%012d", i+1), user, "Investor", "+79990001234", &slug)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 10*time.Second, "the dead letters and the five G1s", func() bool {
		dead, _ := qa.DeadLetteredSince(ctx, db.Now().Add(-time.Minute))
		l, _ := ref.LinkLookupsBetween(ctx, db.Now().Add(-time.Minute), time.Time{})
		return len(dead) == 1 && l.Missing == int64(alerts.LinkNotFoundMin)
	})
	// A registration through a link whose owner has no replica yet: it
	// retries (REFERRAL_OWNER_REPLICA_MISSING) and holds the group's lag.
	if _, err := ref.CreateLink(ctx, referral.NewLink{URL: "olga-2026", OwnerUserID: ownerID, TenantID: tenantID, Channel: "web"}); err != nil {
		t.Fatal(err)
	}
	slug := "olga-2026"
	waiting := "eeeeeeee-0000-4000-8000-000000000001"
	if _, err := qa.Publish(ctx, referral.TopicIdentityUsers, waiting,
		identityEvent("6f1c1a52-0000-4000-9000-100000000001", waiting, "Investor", "+79990001234", &slug)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the registration retrying", func() bool {
		st, _ := qa.Stats(ctx)
		for _, tp := range st.Topics {
			for _, g := range tp.Groups {
				if g.Group == referral.ConsumerGroup && g.Retrying == 1 {
					return true
				}
			}
		}
		return false
	})

	t.Run("the database's conditions show within their windows", func(t *testing.T) {
		clock.Advance(alerts.ReferralLagMax) // exactly 5 minutes old: not above
		got := overview()
		if _, ok := got[string(alerts.ReferralConsumerLag)+" "]; ok {
			t.Errorf("a lag of exactly %s warned: %v", alerts.ReferralLagMax, got)
		}
		clock.Advance(time.Minute)
		got = overview()
		for key, want := range map[string][]string{
			"SwitchyardReferralConsumerLag ":    {"critical", "is 6m0s old", "alert above 5m", "docs/runbooks/referral-consumer-lag.md"},
			"SwitchyardDeadLetters alerts.test": {"warning", "1 dead-lettered in the last 15m", "docs/runbooks/dead-letters.md"},
			"SwitchyardOutboxDeadLetters ":      {"warning", "1 outbox events dead-lettered in the last 15m"},
			"SwitchyardReferralLinkNotFound ":   {"warning", "5 of 5 registrations", "alert above 10%, with 5 at least", "docs/runbooks/referral-link-not-found.md"},
		} {
			text, ok := got[key]
			if !ok {
				t.Errorf("no %q warning in %v", key, got)
				continue
			}
			for _, w := range want {
				if !strings.Contains(text, w) {
					t.Errorf("%s: %q lacks %q", key, text, w)
				}
			}
		}
		if len(got) != 4 {
			t.Errorf("%d warnings, want the 4: %v", len(got), got)
		}
	})

	t.Run("this process's counters show over their windows", func(t *testing.T) {
		sends.WithLabelValues("sent").Add(20)
		sends.WithLabelValues("retry").Add(5)
		sends.WithLabelValues("rate_limited").Add(1000)
		requests.WithLabelValues("/webhooks/telegram", "POST", "200").Add(30)
		requests.WithLabelValues("/webhooks/telegram", "POST", "503").Add(3)
		requests.WithLabelValues("/admin/api/queues", "GET", "500").Add(30)
		tooMany.WithLabelValues("7300000002").Inc()
		got := overview()
		for key, want := range map[string]string{
			"SwitchyardOutboundFailures ":                      "5 of 25 chat delivery attempts failed in the last 15m",
			"SwitchyardTelegramTooManyRequests bot 7300000002": "429 to 1 calls in the last 15m",
			"SwitchyardWebhookErrors /webhooks/telegram":       "3 of 33 requests answered 5xx in the last 5m",
		} {
			if text, ok := got[key]; !ok || !strings.Contains(text, want) {
				t.Errorf("%s: %q, want it to say %q (all: %v)", key, text, want, got)
			}
		}
		if _, ok := got["SwitchyardWebhookErrors /admin/api/queues"]; ok {
			t.Error("the admin API's 500s warned as a webhook's")
		}
		doc := c.get(t, "/admin/", http.StatusOK)
		if note := trimmed(tid(doc, "alerts")); !strings.Contains(note, "this process's own, counted since it started") {
			t.Errorf("the card does not say whose counters it read: %q", note)
		}

		// Five minutes on, the webhook's 5xx are out of their window; the
		// deliveries and the 429 are not.
		if err := sampler.Sample(); err != nil {
			t.Fatal(err)
		}
		clock.Advance(alerts.WebhookWindow)
		got = overview()
		if _, ok := got["SwitchyardWebhookErrors /webhooks/telegram"]; ok {
			t.Errorf("webhook 5xx of %s ago still warn", alerts.WebhookWindow)
		}
		if _, ok := got["SwitchyardOutboundFailures "]; !ok {
			t.Errorf("the delivery failures, within their 15 minutes, no longer warn: %v", got)
		}
	})

	t.Run("an instance whose schema is behind is not ready, first of all", func(t *testing.T) {
		st, err := db.MigrationStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		storetest.SchemaBehind(t, db)
		var doc *goquery.Document
		testwait.Until(t, 10*time.Second, "the not-ready warning", func() bool {
			doc = c.get(t, "/admin/", http.StatusOK)
			return tid(doc, "alert-"+string(alerts.NotReady)).Length() == 1
		})
		first := tid(doc, "alerts").Find("li").First()
		if id, _ := first.Attr("data-testid"); id != "alert-"+string(alerts.NotReady) ||
			!regexp.MustCompile(fmt.Sprintf(`schema at version \d+, %d expected; run switchyard migrate`, st.Latest)).MatchString(trimmed(first)) {
			t.Fatalf("first warning %q", trimmed(first))
		}
	})
}

// TestMetricsRefreshReadiness: a scrape of /metrics probes readiness first,
// so switchyard_store_ready says what /readyz would answer, and every
// webhook route's request series exist at 0. Not parallel: the gauge is the
// process's, and a parallel test's probe of its own database would set it.
func TestMetricsRefreshReadiness(t *testing.T) {
	db := storetest.New(t)
	srv := webtest.NewWith(t, web.Options{DB: db, Public: []web.RoutesFunc{func(r *mux.Router) {
		r.HandleFunc("/webhooks/probe", func(w http.ResponseWriter, _ *http.Request) {}).Methods(http.MethodPost)
	}}})
	scrape := func() string {
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if m := scrape(); !strings.Contains(m, "\nswitchyard_store_ready 1\n") {
		t.Fatalf("a ready database scrapes as:\n%s", grepLines(m, "switchyard_store_ready"))
	}
	for _, code := range []string{"200", "500", "503"} {
		if line := fmt.Sprintf(`switchyard_http_requests_total{code=%q,method="POST",route="/webhooks/probe"} 0`, code); !strings.Contains(scrape(), line) {
			t.Errorf("no %s", line)
		}
	}
	storetest.SchemaBehind(t, db)
	var m string
	testwait.Until(t, 10*time.Second, "a scrape to say not ready", func() bool {
		m = scrape()
		return strings.Contains(m, "\nswitchyard_store_ready 0\n")
	}, func() string { return grepLines(m, "switchyard_store_ready") })
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d while the gauge says not ready", resp.StatusCode)
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestOverviewLinkLookupsWindow: the G1 warning counts the lookups of the
// alert's last hour exactly, as the referral context counts them, while the
// Overview keeps finished minutes' counts between polls and the hour slides.
func TestOverviewLinkLookupsWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	ref, err := referral.New(ctx, referral.Opts{DB: db, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, ref.Run)
	c := newConsole(t, web.Options{DB: db, Queues: qa, Referral: ref})
	clock.Advance(17 * time.Second) // off the minute
	start := db.Now()
	// check compares the G1 warning with the referral context's own count of
	// the last hour.
	check := func() {
		t.Helper()
		want, err := ref.LinkLookupsBetween(ctx, db.Now().Add(-alerts.LinkNotFoundWindow), time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		doc := c.get(t, "/admin/", http.StatusOK)
		got := trimmed(tid(doc, "alert-"+string(alerts.ReferralLinkNotFound)))
		if want.Missing < alerts.LinkNotFoundMin {
			if got != "" {
				t.Fatalf("at %s: %d of %d lookups found no link, fewer than %d, but the Overview warns %q",
					db.Now().Sub(start), want.Missing, want.Looked, alerts.LinkNotFoundMin, got)
			}
			return
		}
		if text := fmt.Sprintf("%d of %d registrations", want.Missing, want.Looked); !strings.Contains(got, text) {
			t.Fatalf("at %s: the warning says %q, want %q", db.Now().Sub(start), got, text)
		}
	}
	slug := "no-such-link"
	n := 0
	for minute := range 5 {
		for range 2 {
			n++
			user := fmt.Sprintf("dddddddd-0000-4000-8000-%012d", n)
			if _, err := qa.Publish(ctx, referral.TopicIdentityUsers, user,
				identityEvent(fmt.Sprintf("6f1c1a52-0000-4000-9000-%012d", n), user, "Investor", "+79990001234", &slug)); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 10*time.Second, "the lookups consumed", func() bool {
			l, _ := ref.LinkLookupsBetween(ctx, start, time.Time{})
			return l.Looked == int64(n)
		})
		if minute >= 2 {
			check()
		}
		clock.Advance(time.Minute)
	}
	check()
	// The hour slides past the first two minutes' lookups, a poll at a time.
	for range 3 {
		clock.Advance(20 * time.Minute)
		if db.Now().Sub(start) > alerts.LinkNotFoundWindow+3*time.Minute {
			break
		}
		check()
	}
	clock.Set(start.Add(alerts.LinkNotFoundWindow + 30*time.Second)) // the first minute's out: 8 of 8
	check()
	// The hour now begins 48 s after start: inside the minute of the second
	// batch (17 s past a minute + 48 s), which the Overview counts afresh.
	clock.Set(start.Add(alerts.LinkNotFoundWindow + 48*time.Second))
	check()
	clock.Set(start.Add(alerts.LinkNotFoundWindow + 2*time.Minute + 30*time.Second)) // 4 of 4: too few
	check()
}
