// Package storetest opens migrated databases in a test's temporary folder.
package storetest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"switchyard/store"
)

// New opens a migrated database in t.TempDir() on the system clock.
func New(t testing.TB) *store.DB {
	t.Helper()
	return NewWith(t, store.Options{})
}

// NewWithClock opens a migrated database whose clock is a ManualClock, and returns both.
func NewWithClock(t testing.TB) (*store.DB, *store.ManualClock) {
	t.Helper()
	clock := store.NewManualClock(time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC))
	return NewWith(t, store.Options{Clock: clock}), clock
}

// NewWith opens a migrated database with opts; an empty Path means a file in t.TempDir().
func NewWith(t testing.TB, opts store.Options) *store.DB {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "switchyard.db")
	}
	db, err := store.Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("open database: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return db
}

// RefuseWrites makes every write to db fail from now on, as on a read-only
// file (root ignores file modes): query_only sticks to the writer, which is
// one connection. The returned function lets writes through again.
func RefuseWrites(tb testing.TB, db *store.DB) (allow func()) {
	tb.Helper()
	if _, err := db.Write.Exec(`pragma query_only = on`); err != nil {
		tb.Fatal(err)
	}
	return func() {
		tb.Helper()
		if _, err := db.Write.Exec(`pragma query_only = off`); err != nil {
			tb.Fatal(err)
		}
	}
}
