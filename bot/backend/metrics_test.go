package backend

import (
	"slices"
	"testing"

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
