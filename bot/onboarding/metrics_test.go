package onboarding

import (
	"slices"
	"testing"

	"switchyard/metrictest"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
)

// TestMetricLabelsAreDeclared: the onboarding bot makes the series of every
// event type, Telegram method and delivery outcome exist when it is built,
// so an alert on a rare one sees 0, not "no data" (the contract's tests keep
// every EventType in EventTypes, the list they are made from).
func TestMetricLabelsAreDeclared(t *testing.T) {
	t.Run("the onboarding bot declares every series when built", func(t *testing.T) {
		db := storetest.New(t)
		if _, err := New(Opts{
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
