package store_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

func TestLeaseViews(t *testing.T) {
	t.Parallel()
	const ttl = 30 * time.Second

	acquire := func(t *testing.T, db *store.DB, name, owner string) {
		t.Helper()
		if held, err := db.AcquireLease(t.Context(), name, owner, ttl); err != nil || !held {
			t.Fatalf("AcquireLease(%s, %s) = %v, %v", name, owner, held, err)
		}
	}

	t.Run("leases by prefix are exactly those whose names start with it, expired ones included, judged at the lease clock", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		for _, name := range []string{"q.g/t/g/0", "q.g/t/g/1", "q.g/t/g0", "q.g/t/G/0", "q.g/t/gx/0", "q.m/t/g/a", "q.m/t/h/a", "other"} {
			acquire(t, db, name, "o:"+name)
		}
		clock.Advance(ttl / 2)
		acquire(t, db, "q.g/t/g/1", "o:q.g/t/g/1") // renewed: expires later than the rest
		clock.Advance(ttl / 2)
		if err := db.ReleaseLease(t.Context(), "q.g/t/g/0", "o:q.g/t/g/0"); err != nil {
			t.Fatal(err)
		}
		acquire(t, db, "q.g/t/g/2", "o:q.g/t/g/2")

		leases, now, err := db.LeasesByPrefix(t.Context(), "q.g/t/g/", "q.m/t/g/")
		if err != nil {
			t.Fatal(err)
		}
		if !now.Equal(clock.Now()) {
			t.Errorf("judged at %s, want the store's clock %s", now, clock.Now())
		}
		var names []string
		for _, l := range leases {
			names = append(names, l.Name)
			if l.Owner != "o:"+l.Name {
				t.Errorf("lease %s owned by %s", l.Name, l.Owner)
			}
		}
		if want := []string{"q.g/t/g/1", "q.g/t/g/2", "q.m/t/g/a"}; !slices.Equal(names, want) {
			t.Errorf("leases %v, want %v (the released one gone, other names and cases left out)", names, want)
		}
		for _, l := range leases {
			if held, want := l.HeldAt(now), l.Name != "q.m/t/g/a"; held != want {
				t.Errorf("lease %s held at the read: %v, want %v (its TTL ran out unless renewed)", l.Name, held, want)
			}
		}
	})

	t.Run("a lease is held in a transaction only by its owner and only until it expires", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		acquire(t, db, "job", "a")
		heldBy := func(owner string) bool {
			t.Helper()
			var held bool
			if err := db.Tx(t.Context(), func(tx *sql.Tx) error {
				var err error
				held, err = db.LeaseHeldTx(t.Context(), tx, "job", owner)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return held
		}
		if !heldBy("a") || heldBy("b") || func() bool {
			var held bool
			_ = db.Tx(t.Context(), func(tx *sql.Tx) error {
				var err error
				held, err = db.LeaseHeldTx(t.Context(), tx, "nobody", "a")
				return err
			})
			return held
		}() {
			t.Error("held by a = false, by b = true, or a lease never taken held")
		}
		clock.Advance(ttl)
		if heldBy("a") {
			t.Error("a still holds the lease at its expiry")
		}
	})

	t.Run("on PostgreSQL a takeover waits for the transaction that checked the lease to end", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "on SQLite the checking transaction is the only writer; nothing can run beside it")
		db, clock := storetest.NewWithClock(t)
		acquire(t, db, "job", "a")
		checked, commit, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			done <- db.Tx(context.Background(), func(tx *sql.Tx) error {
				held, err := db.LeaseHeldTx(context.Background(), tx, "job", "a")
				if err != nil || !held {
					t.Errorf("LeaseHeldTx = %v, %v", held, err)
				}
				close(checked)
				<-commit
				return err
			})
		}()
		<-checked
		clock.Advance(ttl) // a's lease expires while its transaction still runs
		took := make(chan bool, 1)
		go func() {
			held, err := db.AcquireLease(context.Background(), "job", "b", ttl)
			if err != nil {
				t.Error(err)
			}
			took <- held
		}()
		testwait.Until(t, 10*time.Second, "the takeover waits for the row lock", func() bool {
			return storetest.LockWaiters(t, db) > 0
		})
		select {
		case <-took:
			t.Fatal("b took the lease while a's transaction, which checked it, was still open")
		default:
		}
		close(commit)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !<-took {
			t.Error("b did not take the expired lease once a's transaction ended")
		}
	})

	t.Run("pruning removes the leases of a prefix that expired before the cutoff", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		acquire(t, db, "m/a", "a")
		acquire(t, db, "x/a", "a")
		clock.Advance(2 * ttl)
		acquire(t, db, "m/b", "b")
		n, err := db.PruneLeases(t.Context(), "m/", clock.Now().Add(-ttl/2))
		if err != nil || n != 1 {
			t.Fatalf("PruneLeases = %d, %v; want the one lease of m/ that expired before the cutoff", n, err)
		}
		leases, _, err := db.LeasesByPrefix(t.Context(), "m/", "x/")
		if err != nil {
			t.Fatal(err)
		}
		if len(leases) != 2 || leases[0].Name != "m/b" || leases[1].Name != "x/a" {
			t.Errorf("leases left %+v, want m/b and x/a", leases)
		}
	})
}
