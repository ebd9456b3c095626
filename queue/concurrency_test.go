package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// The tests of this file are about concurrent transactions. On SQLite every
// write transaction runs alone (one writer), so they pass by construction;
// on PostgreSQL transactions run side by side, and these tests fail unless
// each read-then-write is made safe (row locks, SKIP LOCKED, atomic updates).

func TestConcurrentReceivers(t *testing.T) {
	t.Parallel()

	t.Run("eight workers receiving from one queue deliver each message exactly once", func(t *testing.T) {
		t.Parallel()
		const messages = 3000
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		// The messages are all there before any worker starts, so that the
		// eight receive transactions compete for the same rows.
		for sent := 0; sent < messages; sent += 500 {
			if err := db.Tx(t.Context(), func(tx *sql.Tx) error {
				for i := sent; i < sent+500; i++ {
					if _, err := q.SendTx(t.Context(), tx, queue.Message{Body: fmt.Appendf(nil, "%d", i)}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu         sync.Mutex
			deliveries = map[queue.ID]int{}
			total      int
		)
		for range 8 {
			start(t, q, queue.WorkerOpts{Concurrency: 16, PollInterval: time.Hour, Handler: func(ctx context.Context, m queue.Message) error {
				mu.Lock()
				defer mu.Unlock()
				deliveries[m.ID]++
				total++
				return nil
			}})
		}
		testwait.Until(t, 30*time.Second, "every message handled and acknowledged", func() bool {
			return liveMessages(t, db, "q") == 0
		}, func() string { return fmt.Sprintf("%d live", liveMessages(t, db, "q")) })
		mu.Lock()
		defer mu.Unlock()
		dups := 0
		for _, n := range deliveries {
			dups += n - 1
		}
		if len(deliveries) != messages || dups != 0 {
			t.Errorf("%d deliveries of %d distinct messages (%d duplicates), want each of %d delivered once",
				total, len(deliveries), dups, messages)
		}
	})
}
