// Package storetest opens migrated databases for tests: SQLite files in the
// test's temporary folder, or, when SWITCHYARD_TEST_DB names a PostgreSQL
// server, a database of the test's own on it (see EnvTestDB).
package storetest

import (
	"context"
	"database/sql"
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

// NewWith opens a migrated database with opts; an empty Path means a new
// database of the test's own (MigratedSource).
func NewWith(t testing.TB, opts store.Options) *store.DB {
	t.Helper()
	if opts.Path == "" {
		opts.Path = MigratedSource(t)
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
// one connection. On PostgreSQL the database is set to
// default_transaction_read_only, as on a standby, and its sessions are ended
// so that every new one starts read-only. The returned function lets writes
// through again.
func RefuseWrites(tb testing.TB, db *store.DB) (allow func()) {
	tb.Helper()
	if db.Postgres() {
		return refuseWritesPostgres(tb, db)
	}
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

func refuseWritesPostgres(tb testing.TB, db *store.DB) (allow func()) {
	tb.Helper()
	admin, _ := maintenance(tb)
	var name string
	if err := db.Read.QueryRow(`select current_database()`).Scan(&name); err != nil {
		tb.Fatal(err)
	}
	set := func(q string) {
		tb.Helper()
		if _, err := admin.Exec(`alter database ` + name + ` ` + q); err != nil {
			tb.Fatal(err)
		}
		// Idle sessions close cleanly; the few in use are ended.
		for _, pool := range []*sql.DB{db.Write, db.Read} {
			pool.SetMaxIdleConns(0)
		}
		if _, err := admin.Exec(`select pg_terminate_backend(pid) from pg_stat_activity where datname = $1`, name); err != nil {
			tb.Fatal(err)
		}
		for _, pool := range []*sql.DB{db.Write, db.Read} {
			pool.SetMaxIdleConns(4)
		}
	}
	set(`set default_transaction_read_only = on`)
	return func() {
		tb.Helper()
		set(`reset default_transaction_read_only`)
	}
}
