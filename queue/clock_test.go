package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// TestManualClock moves the store's clock by hand, as a --clock manual
// instance's tests do, under workers that poll once an hour (and whose
// messages' visibility timeout is an hour, so no extension wakes them): a message
// comes due only when the clock passes its time, and the move itself wakes
// the worker (store.DB.OnClockMove), so that nothing waits for a poll of
// real time.
func TestManualClock(t *testing.T) {
	t.Parallel()
	const hour = time.Hour // the workers' poll: only a wake-up delivers in time

	t.Run("a delayed message is not delivered until the clock passes its delay, then at once", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Timeout: hour})
		var handled atomic.Int32
		var at atomic.Value
		start(t, q, queue.WorkerOpts{PollInterval: hour, Handler: func(ctx context.Context, m queue.Message) error {
			at.Store(db.Now())
			handled.Add(1)
			return nil
		}})
		t0 := db.Now()
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("later"), Delay: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
		// A message sent after it, without a delay, is handled: the worker
		// looked, and left the delayed one.
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("now")}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the undelayed message handled", func() bool { return handled.Load() == 1 })
		clock.Advance(10*time.Minute - time.Second)
		// The worker was woken by the move and looked: nothing due yet. A
		// second message without delay proves it has looked since.
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("now, again")}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the second undelayed message handled", func() bool { return handled.Load() == 2 })
		// A handler returns before its message's delete commits: wait for the
		// two handled ones to go, leaving the delayed one, unhandled.
		testwait.Until(t, 5*time.Second, "the delayed message alone left live", func() bool { return liveMessages(t, db, "q") == 1 })
		if n := handled.Load(); n != 2 {
			t.Fatalf("%d messages handled a second before the delay ends, want the two undelayed ones", n)
		}
		clock.Advance(time.Second)
		testwait.Until(t, 5*time.Second, "the delayed message handled once the clock passed its delay", func() bool { return handled.Load() == 3 })
		if got := at.Load().(time.Time); got.Before(t0.Add(10 * time.Minute)) {
			t.Fatalf("handled at %s, before its delay ended at %s", got, t0.Add(10*time.Minute))
		}
	})

	t.Run("a failed message is retried only when the clock passes its backoff", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Timeout: hour, Retry: queue.RetryPolicy{MaxAttempts: 5, MinBackoff: time.Minute, MaxBackoff: time.Hour}})
		var attempts atomic.Int32
		start(t, q, queue.WorkerOpts{PollInterval: hour, Handler: func(ctx context.Context, m queue.Message) error {
			if attempts.Add(1) == 1 {
				return queue.RetryAfter(15*time.Minute, errors.New("owner missing"))
			}
			return nil
		}})
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("job")}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the first attempt", func() bool { return attempts.Load() == 1 })
		// The handler returns before its retry is settled: wait for the
		// settle's row in the attempt history, so the backoff runs from
		// before the move, not after it.
		testwait.Until(t, 5*time.Second, "the first attempt settled as a retry", func() bool {
			return count(t, db, `select count(*) from queue_failures where queue = 'q' and outcome = 'retry'`) == 1
		})
		clock.Advance(14 * time.Minute)
		testwait.Until(t, 5*time.Second, "the message waiting for its retry", func() bool {
			return count(t, db, `select count(*) from goqite where queue = 'q' and received = 1`) == 1
		})
		if n := attempts.Load(); n != 1 {
			t.Fatalf("%d attempts 14 minutes into a 15-minute backoff", n)
		}
		clock.Advance(time.Minute)
		testwait.Until(t, 5*time.Second, "the retry once the clock passed the backoff", func() bool { return attempts.Load() == 2 })
		testwait.Until(t, 5*time.Second, "the message acknowledged", func() bool { return liveMessages(t, db, "q") == 0 })
	})
}
