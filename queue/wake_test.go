package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// TestWakeOrderKeys: a message waiting for a retry goes at once when its order key
// is woken, whatever its delay; others wait on, and one in a handler's hands
// is left alone.
func TestWakeOrderKeys(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	q := queue.New(queue.NewOpts{DB: db, Name: "wake.flow"})
	wake := func(prefix string) int64 {
		t.Helper()
		var n int64
		err := db.Tx(context.Background(), func(tx *sql.Tx) error {
			var err error
			n, err = q.WakeTx(context.Background(), tx, prefix)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	var (
		mu       sync.Mutex
		handled  = map[string]int{}
		held     = make(chan struct{})
		holding  atomic.Bool
		released = make(chan struct{})
	)
	start(t, q, queue.WorkerOpts{Concurrency: 4, PollInterval: time.Hour, Handler: func(ctx context.Context, m queue.Message) error {
		mu.Lock()
		handled[string(m.Body)]++
		n := handled[string(m.Body)]
		mu.Unlock()
		switch {
		case string(m.Body) == "held" && holding.CompareAndSwap(false, true):
			close(held)
			<-released
			return queue.RetryAfter(time.Hour, errors.New("not yet"))
		case n == 1 && string(m.Body) != "held":
			return queue.RetryAfter(time.Hour, errors.New("waits for its connection"))
		}
		return nil
	}})
	for _, m := range []queue.Message{
		{Body: []byte("a1"), OrderKey: "tg:1:business:conn-a:100"},
		{Body: []byte("a2"), OrderKey: "tg:1:business:conn-a:200"},
		{Body: []byte("b1"), OrderKey: "tg:1:business:conn-b:100"},
		{Body: []byte("held"), OrderKey: "tg:1:business:conn-a:300"},
	} {
		if _, err := q.Send(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	times := func(body string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return handled[body] >= 1 }
	}
	for _, b := range []string{"a1", "a2", "b1"} {
		testwait.Until(t, 5*time.Second, b+"'s first attempt", times(b))
	}
	<-held
	// a1, a2 and b1 wait an hour for their retry (settled: wait for the
	// retry rows); held is in its handler.
	testwait.Until(t, 5*time.Second, "three retries recorded", func() bool {
		return count(t, db, `select count(*) from queue_retries where queue = 'wake.flow'`) == 3
	})

	if n := wake("tg:1:business:conn-a:"); n != 2 {
		t.Errorf("woke %d, want a1 and a2 (held is in its handler)", n)
	}
	testwait.Until(t, 5*time.Second, "a1 and a2 handled again at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled["a1"] == 2 && handled["a2"] == 2
	})
	mu.Lock()
	if handled["b1"] != 1 || handled["held"] != 1 {
		t.Errorf("handled %v: b1 (another connection) and held (in its handler) must not go again", handled)
	}
	mu.Unlock()
	if n := wake("tg:1:business:conn-a:"); n != 0 {
		t.Errorf("a second wake woke %d, want none: nothing of conn-a waits for a retry", n)
	}
	close(released)
	if _, err := q.WakeTx(context.Background(), nil, ""); err == nil {
		t.Error("a wake with no prefix was taken")
	}
}
