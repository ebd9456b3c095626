package omni

import (
	"slices"
	"testing"

	"switchyard/metrictest"
	"switchyard/store/storetest"
)

// TestMetricLabelsAreDeclared: every EventType and every apply outcome is
// in the lists the chat role declares its series from, and constructing the
// chat and outbound roles makes each series exist — so an alert on a rare
// event type or outcome sees 0, not "no data".
func TestMetricLabelsAreDeclared(t *testing.T) {
	for name, v := range metrictest.Constants(t, "envelope.go", "EventType") {
		if !slices.Contains(eventTypes, EventType(v)) {
			t.Errorf("%s (%q) is not in eventTypes", name, v)
		}
	}
	for name, v := range metrictest.Constants(t, "chat_apply.go", "applyOutcome") {
		if !slices.Contains(chatOutcomes, v) {
			t.Errorf("%s (%q) is not in chatOutcomes", name, v)
		}
	}

	t.Run("the chat and outbound roles declare every series when built", func(t *testing.T) {
		db := storetest.New(t)
		NewChat(ChatOpts{DB: db})
		NewOutbound(OutboundOpts{DB: db, Token: inboxToken, APIURL: "http://127.0.0.1:1"})
		for _, c := range []struct {
			metric, label string
			values        []string
		}{
			{"switchyard_omni_chat_events_total", "event_type", []string{"message.created", "message.edited", "message.deleted", "connection.updated", "membership.updated", "callback.received", "unknown", "invalid"}},
			{"switchyard_omni_chat_events_total", "outcome", []string{"applied", "duplicate", "ignored", "retry", "dead"}},
			{"switchyard_omni_outbound_sends_total", "outcome", []string{"sent", "duplicate", "rate_limited", "retry", "failed", "refused", "deferred"}},
			{"switchyard_omni_lane_moves_total", "lane", []string{"receiver", "sender"}},
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
