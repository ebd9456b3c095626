package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

func TestSavepointTx(t *testing.T) {
	t.Parallel()

	t.Run("a failed piece's send is rolled back, not counted and wakes nobody, while its neighbours' commit", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		name := fmt.Sprintf("savepoint-%d", time.Now().UnixNano())
		q := queue.New(queue.NewOpts{DB: db, Name: name})
		sent := func() float64 {
			return metricValue(t, "switchyard_queue_messages_sent_total", map[string]string{"queue": name})
		}
		before := sent()
		boom := errors.New("boom")
		var results []error
		err := db.Tx(context.Background(), func(tx *sql.Tx) error {
			results = results[:0]
			for i, fail := range []bool{false, true, false} {
				results = append(results, queue.SavepointTx(context.Background(), db, tx, func() error {
					if _, err := q.SendTx(context.Background(), tx, queue.Message{Body: []byte(fmt.Sprint(i)), Key: fmt.Sprint("k", i), OrderKey: "one-key"}); err != nil {
						return err
					}
					if fail {
						return boom
					}
					return nil
				}))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if results[0] != nil || !errors.Is(results[1], boom) || results[2] != nil || errors.Is(results[1], queue.ErrSavepoint) {
			t.Fatalf("SavepointTx results = %v, want nil, boom (not ErrSavepoint), nil", results)
		}
		if n := liveMessages(t, db, name); n != 2 {
			t.Errorf("%d messages on the queue, want the two whose savepoints were kept", n)
		}
		if n := count(t, db, `select count(*) from queue_keys where queue = ? and key = 'k1'`, name); n != 0 {
			t.Errorf("the failed piece's idempotency key was kept")
		}
		if got := sent() - before; got != 2 {
			t.Errorf("sends counted: %v, want 2", got)
		}
		// The third message is held behind the first of its order key: the
		// failed one took no place in the key's order.
		var got []string
		w := start(t, q, queue.WorkerOpts{PollInterval: 10 * time.Millisecond, Handler: func(_ context.Context, m queue.Message) error {
			got = append(got, string(m.Body))
			return nil
		}, Concurrency: 1})
		testwait.Until(t, 10*time.Second, "", func() bool { return liveMessages(t, db, name) == 0 }, func() string { return "the two messages were never handled" })
		if err := w.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"0", "2"}) {
			t.Errorf("handled %v, want [0 2]", got)
		}
	})
}

func TestBatchHandler(t *testing.T) {
	t.Parallel()

	t.Run("one receive's messages come together, each with its own result, and one order key's never in one batch", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		name := fmt.Sprintf("batch-%d", time.Now().UnixNano())
		q := queue.New(queue.NewOpts{DB: db, Name: name, Retry: queue.RetryPolicy{MaxAttempts: 5, MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
		const keys, perKey = 10, 3
		for i := range perKey {
			for k := range keys {
				if _, err := q.Send(context.Background(), queue.Message{Body: []byte(fmt.Sprintf("%d/%d", k, i)), OrderKey: fmt.Sprint("key-", k)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		var (
			mu       sync.Mutex
			batches  [][]string
			attempts = map[string]int{}
			failures = map[string]bool{"3/0": true} // fails once
		)
		start(t, q, queue.WorkerOpts{Concurrency: 64, PollInterval: 10 * time.Millisecond, BatchHandler: func(_ context.Context, msgs []queue.Message) []error {
			mu.Lock()
			defer mu.Unlock()
			errs := make([]error, len(msgs))
			var batch []string
			for i, m := range msgs {
				body := string(m.Body)
				batch = append(batch, body)
				attempts[body]++
				if failures[body] {
					delete(failures, body)
					errs[i] = errors.New("fails once")
				}
			}
			batches = append(batches, batch)
			return errs
		}})
		testwait.Until(t, 10*time.Second, "", func() bool { return liveMessages(t, db, name) == 0 }, func() string { return fmt.Sprintf("%d messages left", liveMessages(t, db, name)) })
		mu.Lock()
		defer mu.Unlock()
		if len(batches[0]) != keys {
			t.Errorf("first batch = %v, want the %d heads of the keys together", batches[0], keys)
		}
		for _, b := range batches {
			seen := map[string]bool{}
			for _, body := range b {
				var k, i int
				fmt.Sscanf(body, "%d/%d", &k, &i)
				if seen[fmt.Sprint(k)] {
					t.Errorf("batch %v holds two messages of key %d", b, k)
				}
				seen[fmt.Sprint(k)] = true
			}
		}
		for body, n := range attempts {
			want := 1
			if body == "3/0" {
				want = 2
			}
			if n != want {
				t.Errorf("%s handled %d times, want %d: a failure is retried alone", body, n, want)
			}
		}
		if len(attempts) != keys*perKey {
			t.Errorf("%d messages handled, want %d", len(attempts), keys*perKey)
		}
	})

	t.Run("a batch handler that panics fails each of its messages, which are retried", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		name := fmt.Sprintf("batch-panic-%d", time.Now().UnixNano())
		q := queue.New(queue.NewOpts{DB: db, Name: name, Retry: queue.RetryPolicy{MaxAttempts: 5, MinBackoff: 10 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}})
		for i := range 3 {
			if _, err := q.Send(context.Background(), queue.Message{Body: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu    sync.Mutex
			calls int
			done  = map[string]bool{}
		)
		start(t, q, queue.WorkerOpts{PollInterval: 10 * time.Millisecond, BatchHandler: func(_ context.Context, msgs []queue.Message) []error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls == 1 {
				panic("first call")
			}
			for _, m := range msgs {
				done[string(m.Body)] = true
			}
			return nil
		}})
		testwait.Until(t, 10*time.Second, "", func() bool { return liveMessages(t, db, name) == 0 }, func() string { return "messages left" })
		mu.Lock()
		defer mu.Unlock()
		if len(done) != 3 {
			t.Errorf("handled %v, want all three after the panic", done)
		}
	})
}
