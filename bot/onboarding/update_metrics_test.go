package onboarding

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
)

// updatesCounter reads switchyard_bot_onboarding_updates_total{kind,outcome}
// from the process's registry, as a scrape would; ok is false when the
// series is not exported at all.
func updatesCounter(t *testing.T, kind, outcome string) (v float64, ok bool) {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "switchyard_bot_onboarding_updates_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["kind"] == kind && labels["outcome"] == outcome {
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestUpdateMetricOutcomes is not parallel: it reads the process's counters,
// which the package's parallel tests move too; they wait until it is done.
func TestUpdateMetricOutcomes(t *testing.T) {
	t.Run("every kind and outcome is exported from the start", func(t *testing.T) {
		for _, kind := range append(append([]string(nil), allowedUpdates...), "other") {
			for _, outcome := range updateOutcomes {
				if _, ok := updatesCounter(t, kind, outcome); !ok {
					t.Errorf("switchyard_bot_onboarding_updates_total{kind=%q,outcome=%q} is not exported", kind, outcome)
				}
			}
		}
	})

	t.Run("a webhook update delivered three times counts once received and twice duplicate", func(t *testing.T) {
		e := newOnbEnv(t)
		b := e.newBot(e.db, func(o *Opts) { o.Updates, o.WebhookSecret = UpdatesWebhook, testWebhookSecret })
		r := mux.NewRouter()
		b.Routes(r)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		received, _ := updatesCounter(t, "message", "received")
		duplicate, _ := updatesCounter(t, "message", "duplicate")
		body := `{"update_id":9101,"message":{"message_id":1,"date":1700000000,"chat":{"id":6101,"type":"private"},` +
			`"from":{"id":6101,"is_bot":false,"first_name":"Алиса"},"text":"/help"}}`
		for range 3 {
			if status := postWebhook(t, srv.URL, testWebhookSecret, body); status != http.StatusOK {
				t.Fatalf("status %d, want 200", status)
			}
		}
		r2, _ := updatesCounter(t, "message", "received")
		d2, _ := updatesCounter(t, "message", "duplicate")
		if r2-received != 1 || d2-duplicate != 2 {
			t.Errorf("received +%v, duplicate +%v; want +1 and +2", r2-received, d2-duplicate)
		}
	})

	t.Run("a polled batch that repeats stored updates counts only the new ones as received", func(t *testing.T) {
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		raw := func(id int) rawUpdate {
			return rawUpdate{ID: id, ChatID: "6102", Kind: "message", Payload: fmt.Appendf(nil,
				`{"update_id":%d,"message":{"message_id":%d,"date":1700000000,"chat":{"id":6102,"type":"private"},"text":"hi"}}`, id, id)}
		}
		if _, err := b.storeUpdates(context.Background(), []rawUpdate{raw(9201)}, 9202); err != nil {
			t.Fatal(err)
		}
		received, _ := updatesCounter(t, "message", "received")
		duplicate, _ := updatesCounter(t, "message", "duplicate")
		stored, err := b.storeUpdates(context.Background(), []rawUpdate{raw(9201), raw(9202)}, 9203)
		if err != nil {
			t.Fatal(err)
		}
		r2, _ := updatesCounter(t, "message", "received")
		d2, _ := updatesCounter(t, "message", "duplicate")
		if stored != 1 || r2-received != 1 || d2-duplicate != 1 {
			t.Errorf("stored %d, received +%v, duplicate +%v; want 1, +1, +1", stored, r2-received, d2-duplicate)
		}
	})
}
