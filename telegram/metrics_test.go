package telegram_test

import (
	"slices"
	"testing"

	"switchyard/metrictest"
	"switchyard/telegram"
)

// TestDeferralsExistFromTheStart: a limiter makes the deferral counter of
// each limit exist at 0, so an alert on deferrals sees 0, not "no data".
func TestDeferralsExistFromTheStart(t *testing.T) {
	telegram.NewLimiter(telegram.Limits{})
	have := metrictest.LabelValues(t, "switchyard_telegram_ratelimit_deferrals_total", "scope")
	for _, scope := range []string{"chat", "group", "bot", "pause"} {
		if !slices.Contains(have, scope) {
			t.Errorf("no deferrals series for scope %q (have %v)", scope, have)
		}
	}
}
