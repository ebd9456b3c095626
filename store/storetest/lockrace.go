package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/testwait"
)

// PostgresOnly skips tb on SQLite, whose single writer runs one write
// transaction at a time (and never runs one again), so that what why names
// cannot happen there.
func PostgresOnly(tb testing.TB, why string) {
	tb.Helper()
	if !Postgres() {
		tb.Skip("PostgreSQL only: " + why)
	}
}

// LockWaiters counts the sessions of db's PostgreSQL database that wait for
// a lock, leaving out the broadcasts' sending connections, which may wait a
// moment for the server-wide notification lock whatever the test does.
func LockWaiters(tb testing.TB, db *store.DB) int {
	tb.Helper()
	var n int
	if err := db.Read.QueryRow(`select count(*) from pg_stat_activity
		where datname = current_database() and wait_event_type = 'Lock'
		and application_name not like '%(notify)'`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// LockRace is a transaction of the test that holds locks while the calls
// under test start: each call then reads before the holder's commit and
// writes after it, the interleaving in which a decision taken from a stale
// read does harm (PostgreSQL only).
type LockRace struct {
	t     testing.TB
	db    *store.DB
	tx    *sql.Tx
	mu    sync.Mutex
	calls []chan error
	ended int
}

// HoldLocks begins a transaction on db and runs hold in it; its locks stay
// held until Release.
func HoldLocks(t testing.TB, db *store.DB, hold func(tx *sql.Tx) error) *LockRace {
	t.Helper()
	tx, err := db.Write.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if err := hold(tx); err != nil {
		t.Fatalf("take the locks: %v", err)
	}
	return &LockRace{t: t, db: db, tx: tx}
}

// Start runs call in a goroutine and returns once every call started so far
// waits for a lock or has returned.
func (r *LockRace) Start(call func() error) {
	r.t.Helper()
	done := make(chan error, 1)
	go func() {
		err := call()
		done <- err
		r.mu.Lock()
		r.ended++
		r.mu.Unlock()
	}()
	r.calls = append(r.calls, done)
	want := len(r.calls)
	testwait.Until(r.t, 30*time.Second, fmt.Sprintf("%d calls waiting for a lock or returned", want), func() bool {
		return r.Returned()+LockWaiters(r.t, r.db) >= want
	})
}

// Returned counts the calls that have returned.
func (r *LockRace) Returned() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ended
}

// Release commits the holder's transaction and returns the calls' errors, in
// the order they started.
func (r *LockRace) Release() []error {
	r.t.Helper()
	if err := r.tx.Commit(); err != nil {
		r.t.Fatalf("commit the holder: %v", err)
	}
	errs := make([]error, len(r.calls))
	for i, done := range r.calls {
		select {
		case errs[i] = <-done:
		case <-time.After(30 * time.Second):
			r.t.Fatalf("call %d did not return within 30 s of the holder's commit", i)
		}
	}
	return errs
}
