package referral

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"switchyard/metrictest"
	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
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

// TestObservedOnlyOnceCommitted: what a record did is logged and counted
// when its transaction commits, never for a run of it that was rolled back
// (a failed commit, or a PostgreSQL transaction that Tx runs again).
func TestObservedOnlyOnceCommitted(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	logs := &testwait.Buffer{}
	svc, err := New(context.Background(), Opts{DB: db, Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ev := upsert(newUser(), 1)
	rec := queue.Record{Topic: TopicIdentityUsers, Key: string(ev.User), Value: ev.json(), Attempt: 1}
	consumed := func() int { return strings.Count(logs.String(), `"msg":"replica-upserted"`) }
	errRolledBack := errors.New("rolled back after the handler")

	err = db.Tx(context.Background(), func(tx *sql.Tx) error {
		if err := svc.handle(context.Background(), tx, rec); err != nil {
			return err
		}
		return errRolledBack
	})
	if !errors.Is(err, errRolledBack) {
		t.Fatalf("Tx = %v", err)
	}
	if n := consumed(); n != 0 || strings.Contains(logs.String(), ev.MessageID) {
		t.Fatalf("a rolled back transaction logged the message (%d replica-upserted lines):\n%s", n, logs)
	}

	if err := db.Tx(context.Background(), func(tx *sql.Tx) error { return svc.handle(context.Background(), tx, rec) }); err != nil {
		t.Fatal(err)
	}
	if n := consumed(); n != 1 {
		t.Fatalf("%d replica-upserted lines after the commit, want 1:\n%s", n, logs)
	}
}
