package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"switchyard/metrictest"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

func fileModeOf(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestFileModes(t *testing.T) {
	storetest.SQLiteOnly(t, "file modes are those of SQLite's files; PostgreSQL's are the server's")
	t.Parallel()
	ctx := context.Background()

	t.Run("the database, its WAL and shared-memory files and backups are readable by the owner only", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t) // migrated, so the WAL and shm files exist
		if err := db.SetSetting(ctx, "k", "v"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{db.Path(), db.Path() + "-wal", db.Path() + "-shm"} {
			if m := fileModeOf(t, p); m != 0o600 {
				t.Errorf("%s: mode %v, want 0600", filepath.Base(p), m)
			}
		}
		backup := filepath.Join(t.TempDir(), "backup.db")
		if err := db.Backup(ctx, backup); err != nil {
			t.Fatal(err)
		}
		if m := fileModeOf(t, backup); m != 0o600 {
			t.Errorf("backup: mode %v, want 0600", m)
		}
	})

	t.Run("files an earlier version left readable by others are tightened at open", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "old.db")
		db := storetest.NewWith(t, store.Options{Path: path})
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		storetest.NewWith(t, store.Options{Path: path})
		if m := fileModeOf(t, path); m != 0o600 {
			t.Errorf("mode after reopening: %v, want 0600", m)
		}
	})
}

func TestEmptyFileRefused(t *testing.T) {
	storetest.SQLiteOnly(t, "an empty file is SQLite's failure")
	t.Parallel()
	path := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(context.Background(), store.Options{Path: path})
	if err == nil {
		db.Close()
		t.Fatal("an existing 0-byte file was opened as a database")
	}
	if !errors.Is(err, store.ErrEmptyFile) {
		t.Fatalf("err = %v, want ErrEmptyFile", err)
	}
	// A file this process creates is new and fine.
	storetest.NewWith(t, store.Options{Path: filepath.Join(t.TempDir(), "new.db")})
}

func TestCorruption(t *testing.T) {
	storetest.SQLiteOnly(t, "it damages SQLite's file format; PostgreSQL's pages are the server's")
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "damaged.db")
	db := storetest.NewWith(t, store.Options{Path: path})
	if err := db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`create table things (id integer primary key, name text not null)`); err != nil {
			return err
		}
		if _, err := tx.Exec(`create index things_name on things (name)`); err != nil {
			return err
		}
		_, err := tx.Exec(`insert into things (name)
			with recursive c(x) as (select 1 union all select x + 1 from c limit 2000) select 'thing-' || x from c`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.CheckIntegrity(ctx, true); err != nil {
		t.Fatalf("a sound file failed its check: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	storetest.DamageIndex(t, path, "things_name")

	db, err := store.Open(ctx, store.Options{Path: path})
	if err != nil {
		t.Fatalf("open: %v", err) // opening reads the header only
	}
	t.Cleanup(func() { db.Close() })

	t.Run("the integrity checks find the damage", func(t *testing.T) {
		for _, full := range []bool{false, true} {
			if err := db.CheckIntegrity(ctx, full); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("CheckIntegrity(full=%v) = %v, want ErrCorrupt", full, err)
			}
		}
	})

	t.Run("the first statement that meets the damage makes the database unready for good", func(t *testing.T) {
		if err := db.Corrupt(); err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("Corrupt() = %v", err)
		}
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.Exec(`insert into things (name) values ('one more')`)
			return err
		})
		if !store.IsCorrupt(err) {
			t.Fatalf("a write through the damaged index: %v, want a corruption error", err)
		}
		if err := db.Corrupt(); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("Corrupt() = %v, want ErrCorrupt", err)
		}
		if _, err := db.Ready(ctx); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("Ready() = %v, want ErrCorrupt", err)
		}
	})
}

func TestReady(t *testing.T) {
	t.Parallel()

	t.Run("asking often writes the heartbeat at most once per probe interval", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		first := clock.Now()
		for range 50 {
			if _, err := db.Ready(context.Background()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Minute)
		}
		var at store.Timestamp
		if err := db.Read.QueryRow(`select at from store_heartbeat where id = 1`).Scan(&at); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
		// Fifty calls within far less than the probe interval of real time:
		// the first one wrote, the others used its answer.
		if !at.Time.Equal(first) {
			t.Fatalf("heartbeat written at %v; the first call was at %v: a later call wrote again", at.Time, first)
		}
	})

	t.Run("callers that hang up mid-probe disturb nobody", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		var wg sync.WaitGroup
		errs := make([]error, 64)
		for i := range 64 {
			wg.Go(func() {
				if i%2 == 0 {
					ctx, cancel := context.WithCancel(context.Background())
					cancel()
					_, _ = db.Ready(ctx)
					return
				}
				errs[i] = db.Tx(context.Background(), func(tx *sql.Tx) error {
					_, err := tx.Exec(`insert into store_settings (key, value, updated_at) values (?, 'v', 'now')`, fmt.Sprint(i))
					return err
				})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("writer %d: %v", i, err)
			}
		}
		if _, err := db.Ready(context.Background()); err != nil {
			t.Fatalf("Ready: %v", err)
		}
	})
}

// TestReadyGauge: switchyard_store_ready says what the last probe found. Not
// parallel: the gauge is the process's, and a parallel test's probe of its
// own database would set it under this one.
func TestReadyGauge(t *testing.T) {
	ctx := context.Background()
	db := storetest.New(t)
	ready := func() float64 {
		v, ok := metrictest.Value(t, "switchyard_store_ready")
		if !ok {
			t.Fatal("no switchyard_store_ready series")
		}
		return v
	}
	if _, err := db.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if v := ready(); v != 1 {
		t.Fatalf("a writable, current database: switchyard_store_ready = %v, want 1", v)
	}

	// The newest migration unrecorded: the schema is behind the binary, and
	// /readyz answers 503 until `switchyard migrate` runs.
	restore := storetest.SchemaBehind(t, db)
	testwait.Until(t, 10*time.Second, "the gauge to say not ready while a migration is pending", func() bool {
		st, err := db.Ready(ctx)
		return err == nil && st.Pending() && ready() == 0
	}, func() string { return fmt.Sprintf("gauge %v", ready()) })

	restore()
	testwait.Until(t, 10*time.Second, "the gauge to say ready again", func() bool {
		st, err := db.Ready(ctx)
		return err == nil && !st.Pending() && ready() == 1
	}, func() string { return fmt.Sprintf("gauge %v", ready()) })
}
