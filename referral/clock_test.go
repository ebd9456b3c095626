package referral

import (
	"database/sql"
	"errors"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// TestOwnerMissingOnManualClock runs the consumer with its real retry
// policy (1 s doubling to 15 minutes) on a clock moved by hand, as an
// integration test of a --clock manual instance does: a referral whose
// owner's replica is missing is retried only when the clock passes each
// backoff, up to the 15-minute one (spread ±25 %), and bonds at the first retry after the
// owner's event has arrived — twenty-odd minutes of the store's clock in
// well under the real seconds they would take.
func TestOwnerMissingOnManualClock(t *testing.T) {
	t.Parallel()
	db, clock := storetest.NewWithClock(t)
	h := newHarness(t, harnessOpts{DB: db, Retry: queue.RetryPolicy{
		MaxAttempts: DefaultMaxAttempts, MinBackoff: DefaultMinBackoff, MaxBackoff: DefaultMaxBackoff}})
	// retry is the referral's retry: its attempts and when it is due.
	retry := func() (attempts int, due time.Time) {
		t.Helper()
		var nb store.Timestamp
		err := db.Read.QueryRow(`select attempts, not_before from queue_group_retries where topic = ? and grp = ?`,
			TopicIdentityUsers, ConsumerGroup).Scan(&attempts, &nb)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, time.Time{}
		}
		if err != nil {
			t.Fatal(err)
		}
		return attempts, nb.Time
	}
	// advance moves the clock as the clock's admin API does, the leases
	// live now carried forward with it.
	advance := func(d time.Duration) {
		t.Helper()
		if _, err := db.AdvanceClock(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	// looked proves the consumer has looked at its records since: another
	// user's event is handled.
	looked := func(what string) {
		t.Helper()
		other := newUser()
		h.publish(upsert(other, 1).json())
		testwait.Until(t, 10*time.Second, what, func() bool { return h.replica(other) != nil })
	}

	began, start := time.Now(), clock.Now()
	owner, user := newUser(), newUser()
	h.link("late-owner", owner)
	ev := upsert(user, 1).referrer("late-owner")
	h.publish(ev.json())
	testwait.Until(t, 10*time.Second, "the referral's first failure", func() bool { n, _ := retry(); return n == 1 })

	// capAttempt is the first failure whose backoff is the 15-minute cap
	// (1 s doubled: 1,024 s > 900 s at the eleventh), spread ±25 % as every
	// backoff is.
	const capAttempt = 11
	t.Run("the retries come due only as the clock passes each backoff, up to 15 minutes", func(t *testing.T) {
		for {
			attempts, due := retry()
			backoff := due.Sub(clock.Now())
			if attempts == capAttempt {
				if lo, hi := DefaultMaxBackoff*3/4, DefaultMaxBackoff*5/4; backoff < lo || backoff >= hi {
					t.Fatalf("attempt %d: backoff %v, want the 15-minute cap ±25 %%", attempts, backoff)
				}
				break
			}
			advance(backoff - time.Microsecond)
			looked("the consumer to look a microsecond before the retry is due")
			if n, _ := retry(); n != attempts {
				t.Fatalf("attempt %d was retried before its backoff of %v ended", attempts, backoff)
			}
			advance(time.Microsecond)
			testwait.Until(t, 10*time.Second, "the retry once the clock passed its backoff", func() bool { n, _ := retry(); return n == attempts+1 })
		}
	})

	t.Run("once the owner has arrived the next retry, 15 minutes on, bonds", func(t *testing.T) {
		h.publish(upsert(owner, 1).set("Type", "Agent").json())
		testwait.Until(t, 10*time.Second, "the owner's replica", func() bool { return h.replica(owner) != nil })
		_, due := retry()
		advance(due.Sub(clock.Now()) - time.Second)
		looked("the consumer to look a second before the retry")
		if got := h.markOutcome(TypeUserUpserted, ev.MessageID); got != "" {
			t.Fatalf("the referral was handled (%q) before its retry was due", got)
		}
		advance(time.Second)
		testwait.Until(t, 10*time.Second, "the referral bonded", func() bool { return h.markOutcome(TypeUserUpserted, ev.MessageID) == OutcomeR1 })
		if n := len(h.outgoing(TopicBonds)); n != 1 {
			t.Fatalf("%d bond events, want 1", n)
		}
		if owed := clock.Now().Sub(start); owed < 20*time.Minute {
			t.Fatalf("the store's clock moved %v, want over 20 minutes", owed)
		}
		t.Logf("owner missing for %v of the store's clock; bonded after %v of real time", clock.Now().Sub(start), time.Since(began))
	})
}
