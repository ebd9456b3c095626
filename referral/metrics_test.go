package referral

import (
	"slices"
	"testing"

	"switchyard/metrictest"
)

// TestEveryOutcomeIsCountedFromTheStart: each Outcome is either one of
// attachOutcomes, whose series exist at 0 from the consumer's start, or one
// of the few that are not attach outcomes — so a new outcome cannot be
// added without deciding which.
func TestEveryOutcomeIsCountedFromTheStart(t *testing.T) {
	notAttach := []Outcome{OutcomeOwnerMissing, OutcomeBlocked, OutcomeStale, OutcomeNoReplica}
	for name, v := range metrictest.Constants(t, "rules.go", "Outcome") {
		attach, other := slices.Contains(attachOutcomes, Outcome(v)), slices.Contains(notAttach, Outcome(v))
		if attach == other {
			t.Errorf("%s (%q): in attachOutcomes %v, among the others %v; want exactly one", name, v, attach, other)
		}
	}

	t.Run("declareMetrics makes a series for each attach outcome, retry and dead-letter reason and result", func(t *testing.T) {
		declareMetrics()
		for _, c := range []struct {
			metric, label string
			values        []string
		}{
			{"switchyard_referral_attach_outcomes_total", "outcome", []string{"R1", "G1", "G2", "G3", "G4", "G5", "first-seen-skip", "replica-only", "invalid-slug", "race-lost"}},
			{"switchyard_referral_dead_lettered_total", "reason", []string{"bad-payload", "owner-replica-missing", "transient"}},
			{"switchyard_referral_retries_total", "reason", []string{"owner-replica-missing", "transient"}},
			{"switchyard_referral_consumed_messages_total", "result", []string{"ok", "duplicate", "ignored", "retry", "dead"}},
			{"switchyard_referral_replica_writes_total", "result", []string{"applied", "stale"}},
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
