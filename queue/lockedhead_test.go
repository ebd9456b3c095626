package queue_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
)

// A receive on PostgreSQL skips the rows another transaction has locked
// (another instance's receive, an acknowledgement in flight) instead of
// waiting for them, so one slow holder of the queue's head stalls no one.
func TestLockedHead(t *testing.T) {
	t.Parallel()

	t.Run("a receive passes over a head locked by another transaction and takes the next message", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "SQLite's one writer never has a row locked by another transaction while a receive runs")
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		head, err := q.Send(t.Context(), queue.Message{Body: []byte("head")})
		if err != nil {
			t.Fatal(err)
		}
		next, err := q.Send(t.Context(), queue.Message{Body: []byte("next")})
		if err != nil {
			t.Fatal(err)
		}
		// Another session locks the head's row, as a receive or an
		// acknowledgement of another instance does while it commits.
		holder := storetest.HoldLocks(t, db, func(tx *sql.Tx) error {
			_, err := tx.Exec(`select id from goqite where id = ? for update`, string(head.ID))
			return err
		})
		got := make(chan queue.ID, 2)
		start(t, q, queue.WorkerOpts{Concurrency: 1, PollInterval: 10 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			got <- m.ID
			return nil
		}})
		select {
		case id := <-got:
			if id != next.ID {
				t.Fatalf("received %s while the head %s was locked, want the next message %s", id, head.ID, next.ID)
			}
		case <-time.After(30 * time.Second):
			waiting := storetest.LockWaiters(t, db)
			holder.Release() // so that the worker can stop
			t.Fatalf("nothing received within 30 s while the head was locked; %d sessions wait for a lock", waiting)
		}
		holder.Release()
		select {
		case id := <-got:
			if id != head.ID {
				t.Fatalf("after the lock was released received %s, want the head %s", id, head.ID)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the head was not received within 30 s of its lock's release")
		}
	})
}
