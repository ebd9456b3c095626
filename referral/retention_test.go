package referral

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// pruneAllMarks prunes every mark written before cutoff in batches of
// batch, checking that no batch goes beyond it, and returns how many.
func pruneAllMarks(t *testing.T, h *harness, cutoff time.Time, batch int) int {
	t.Helper()
	total := 0
	for {
		n, err := h.svc.PruneMarks(context.Background(), cutoff, batch)
		if err != nil {
			t.Fatal(err)
		}
		if n > int64(batch) {
			t.Fatalf("one batch pruned %d marks, more than its limit %d", n, batch)
		}
		if n == 0 {
			return total
		}
		total += int(n)
	}
}

// sameEffects fails unless got has the replicas and bonds of want and the
// outgoing topics hold exactly one event of each kind per bond: the
// effects a replay must leave as they were (marks aside, which it writes
// again).
func sameEffects(t *testing.T, h *harness, want state, what string) {
	t.Helper()
	got := snapshotOf(t, h)
	if !reflect.DeepEqual(got.Replicas, want.Replicas) || !reflect.DeepEqual(got.Bonds, want.Bonds) {
		t.Fatalf("%s changed the state:\n%s", what, diff(state{Replicas: want.Replicas, Bonds: want.Bonds}, state{Replicas: got.Replicas, Bonds: got.Bonds}))
	}
	checkOutgoing(t, h, got)
}

// TestReplayAfterPruningMarks is the model test with retention: once the
// model's state is reached, every idempotency mark is pruned, and the log
// is consumed again from offset 0 by a second group, then re-sent by the
// producer into the first; the first-seen rule and the version guard alone
// must keep every replica, bond, journal entry and outgoing event as it
// was.
func TestReplayAfterPruningMarks(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed %d: with the marks pruned, replays from offset 0 change nothing", seed), func(t *testing.T) {
			t.Parallel()
			w := generate(seed)
			h := newHarness(t, harnessOpts{})
			w.setUp(t, h)
			var values [][]byte
			for i, e := range w.stream {
				values = append(values, e.json())
				if i == len(w.stream)/2 {
					values = append(values, w.broken...)
				}
			}
			publishAll(t, h, values)
			h.waitIdle()
			first := checkAgainstModel(t, h, w)

			// Marks inside the retention stay.
			if n := pruneAllMarks(t, h, h.db.Now().Add(-time.Hour), 100); n != 0 {
				t.Fatalf("pruned %d marks written within the last hour, want none", n)
			}
			// Every mark but those of messages a later state could still
			// make take effect goes.
			keep := h.count(`select count(*) from referral_processed_messages m
				where m.outcome in ('G1', 'G3', 'G5', 'no-replica')
				  and not exists (select 1 from referral_registrations r where r.referred_user_id = m.user_id)`)
			if n := pruneAllMarks(t, h, h.db.Now().Add(time.Minute), 100); n != len(first.Outcomes)-keep || n == 0 {
				t.Fatalf("pruned %d marks of %d, want all but the %d that may still decide something", n, len(first.Outcomes), keep)
			}
			if n := h.count(`select count(*) from referral_processed_messages`); n != keep {
				t.Fatalf("%d marks left after pruning, want %d", n, keep)
			}
			t.Logf("%d marks pruned, %d kept", len(first.Outcomes)-keep, keep)

			second := newHarness(t, harnessOpts{DB: h.db, Group: "referral-replay"})
			second.waitIdle()
			second.stop()
			sameEffects(t, h, first, "a replay from offset 0 without marks")
			if n := h.count(`select count(*) from referral_processed_messages`); n != len(first.Outcomes) {
				t.Fatalf("the replay wrote %d marks, want one per distinct message (%d)", n, len(first.Outcomes))
			}

			pruneAllMarks(t, h, h.db.Now().Add(time.Minute), 100)
			publishAll(t, h, values)
			h.waitIdle()
			sameEffects(t, h, first, "the producer re-sending everything without marks")
		})
	}
}
