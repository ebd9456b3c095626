package backend

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/bot/contract"
	"switchyard/metrictest"
	"switchyard/store/storetest"
)

// TestMetricLabelsAreDeclared: the outbox makes the series of every event
// type and ack outcome exist when it is built, so an alert on a rare one
// sees 0, not "no data".
func TestMetricLabelsAreDeclared(t *testing.T) {
	t.Run("the outbox declares every series when built", func(t *testing.T) {
		NewOutbox(OutboxOpts{DB: storetest.New(t)})
		events := []string{"wallet_connected", "registered", "new_partner", "status_nft_activated", "reactivation", "struct_overtake"}
		for _, c := range []struct {
			metric, label string
			values        []string
		}{
			{"switchyard_bot_outbox_emitted_events_total", "event_type", events},
			{"switchyard_bot_outbox_acked_events_total", "outcome", []string{"processed", "retry", "dead_letter", "closed"}},
		} {
			have := metrictest.LabelValues(t, c.metric, c.label)
			for _, v := range c.values {
				if !slices.Contains(have, v) {
					t.Errorf("%s has no series with %s=%q", c.metric, c.label, v)
				}
			}
		}
	})
}

// emitted reads the emitted counter of event type t from the default registry.
func emitted(tb testing.TB, t contract.EventType) float64 {
	tb.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "switchyard_bot_outbox_emitted_events_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "event_type" && l.GetValue() == string(t) {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	tb.Fatalf("no emitted series for %s", t)
	return 0
}

// TestEmittedCountsCommits is not parallel: the counter is the process's,
// and no parallel test runs beside a test that is not.
func TestEmittedCountsCommits(t *testing.T) {
	t.Run("an emit whose transaction rolls back is not counted, one that commits is", func(t *testing.T) {
		e := newBackendEnv(t)
		ctx := context.Background()
		o := e.b.Outbox()
		typ := contract.EventStructOvertake
		before := emitted(t, typ)
		boom := errors.New("the business change failed after the emit")
		err := o.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := o.EmitTx(ctx, tx, NewEvent{Type: typ, Target: Target{MagnetUID: 1}}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err %v", err)
		}
		if got := emitted(t, typ) - before; got != 0 {
			t.Fatalf("a rolled-back emit counted %v", got)
		}
		if _, err := o.Emit(ctx, NewEvent{Type: typ, Target: Target{MagnetUID: 1}}); err != nil {
			t.Fatal(err)
		}
		if got := emitted(t, typ) - before; got != 1 {
			t.Fatalf("a committed emit counted %v, want 1", got)
		}
	})
}
