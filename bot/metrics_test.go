package bot

import (
	"slices"
	"testing"

	"switchyard/metrictest"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
)

// TestMetricLabelsAreDeclared: the outbox and the onboarding bot make the
// series of every event type, ack outcome, Telegram method and delivery
// outcome exist when they are built, so an alert on a rare one sees 0, not
// "no data"; and every EventType is in EventTypes, the list they are made
// from.
func TestMetricLabelsAreDeclared(t *testing.T) {
	for name, v := range metrictest.Constants(t, "events.go", "EventType") {
		if !slices.Contains(EventTypes, EventType(v)) {
			t.Errorf("%s (%q) is not in EventTypes", name, v)
		}
	}

	t.Run("the outbox and the onboarding bot declare every series when built", func(t *testing.T) {
		db := storetest.New(t)
		NewOutbox(OutboxOpts{DB: db})
		if _, err := NewOnboarding(OnboardingOpts{
			DB: db, BackendURL: "http://127.0.0.1:1", BackendSecret: backendTestSecret,
			TelegramToken: fakebot.Token(onboardingTestBotID), TelegramAPIURL: "http://127.0.0.1:1",
		}); err != nil {
			t.Fatal(err)
		}
		events := []string{"wallet_connected", "registered", "new_partner", "status_nft_activated", "reactivation", "struct_overtake"}
		for _, c := range []struct {
			metric, label string
			values        []string
		}{
			{"switchyard_bot_outbox_emitted_events_total", "event_type", events},
			{"switchyard_bot_outbox_acked_events_total", "outcome", []string{"processed", "retry", "dead_letter", "closed"}},
			{"switchyard_bot_onboarding_events_total", "event_type", events},
			{"switchyard_bot_onboarding_events_total", "outcome", []string{"handled", "duplicate", "retry"}},
			{"switchyard_bot_onboarding_messages_total", "method", []string{"sendMessage", "editMessageReplyMarkup", "answerCallbackQuery"}},
			{"switchyard_bot_onboarding_messages_total", "outcome", []string{"sent", "retry", "fallback", "notified", "failed"}},
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
