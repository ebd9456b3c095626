package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

func count(t *testing.T, db *store.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func TestTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("commits concurrent callers and rolls back only the one that failed", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		var wg sync.WaitGroup
		errs := make([]error, 200)
		for i := range 200 {
			wg.Go(func() {
				errs[i] = db.Tx(ctx, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, `insert into store_settings (key, value, updated_at) values (?, 'v', 'now')`, fmt.Sprint("k", i)); err != nil {
						return err
					}
					if i%10 == 0 {
						return errors.New("refused")
					}
					return nil
				})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if (i%10 == 0) != (err != nil) {
				t.Fatalf("caller %d: err = %v", i, err)
			}
		}
		if got := count(t, db, `select count(*) from store_settings`); got != 180 {
			t.Fatalf("rows = %d, want 180", got)
		}
	})

	t.Run("a constraint error in one caller keeps the others' writes", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		var wg sync.WaitGroup
		errs := make([]error, 50)
		for i := range 50 {
			wg.Go(func() {
				errs[i] = db.Tx(ctx, func(tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, `insert into store_settings (key, value, updated_at) values (?, 'v', 'now')`, fmt.Sprint("k", i%25))
					return err
				})
			})
		}
		wg.Wait()
		failed := 0
		for _, err := range errs {
			if err != nil {
				if !store.IsUniqueViolation(err) {
					t.Fatalf("unexpected error: %v", err)
				}
				failed++
			}
		}
		if failed != 25 || count(t, db, `select count(*) from store_settings`) != 25 {
			t.Fatalf("failed = %d, rows = %d; want 25 and 25", failed, count(t, db, `select count(*) from store_settings`))
		}
	})

	t.Run("a panicking function becomes an error and writes nothing", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			_, _ = tx.ExecContext(ctx, `insert into store_settings (key, value, updated_at) values ('p', 'v', 'now')`)
			panic("boom")
		})
		if err == nil || count(t, db, `select count(*) from store_settings where key = 'p'`) != 0 {
			t.Fatalf("err = %v, row kept = %d", err, count(t, db, `select count(*) from store_settings where key = 'p'`))
		}
	})

	t.Run("a cancelled context is refused before running", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		ran := false
		err := db.Tx(cctx, func(*sql.Tx) error { ran = true; return nil })
		if !errors.Is(err, context.Canceled) || ran {
			t.Fatalf("err = %v, ran = %v", err, ran)
		}
	})

	t.Run("a full database fails the batch and keeps nothing", func(t *testing.T) {
		t.Parallel()
		storetest.SQLiteOnly(t, "a full database is SQLite's max_page_count here (see storetest.FillUp)")
		db := storetest.New(t)
		var pages int
		if err := db.Write.QueryRow(`pragma page_count`).Scan(&pages); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Write.Exec(fmt.Sprintf(`pragma max_page_count = %d`, pages+1)); err != nil {
			t.Fatal(err)
		}
		big := make([]byte, 64<<10)
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `insert into store_settings (key, value, updated_at) values ('big', ?, 'now')`, string(big))
			return err
		})
		if !store.IsFull(err) {
			t.Fatalf("err = %v, want database full", err)
		}
		if _, err := db.Write.Exec(`pragma max_page_count = 1073741823`); err != nil {
			t.Fatal(err)
		}
		if err := db.SetSetting(ctx, "after", "room"); err != nil {
			t.Fatalf("write after room is back: %v", err)
		}
		if count(t, db, `select count(*) from store_settings where key = 'big'`) != 0 {
			t.Fatal("the failed write was kept")
		}
	})

	t.Run("Close commits what is queued, then refuses", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		if err := db.SetSetting(ctx, "a", "b"); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := db.Tx(ctx, func(*sql.Tx) error { return nil }); !errors.Is(err, store.ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	})
}

func TestLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)

	t.Run("only one owner holds a lease until it expires or is released", func(t *testing.T) {
		ok, err := db.AcquireLease(ctx, "job", "a", 25*time.Second)
		if err != nil || !ok {
			t.Fatalf("a acquire: %v %v", ok, err)
		}
		if ok, _ := db.AcquireLease(ctx, "job", "b", 25*time.Second); ok {
			t.Fatal("b took a held lease")
		}
		if ok, _ := db.AcquireLease(ctx, "job", "a", 25*time.Second); !ok {
			t.Fatal("a could not re-acquire its own lease")
		}
		clock.Advance(26 * time.Second)
		if ok, _ := db.RenewLease(ctx, "job", "a", 25*time.Second); ok {
			t.Fatal("a renewed an expired lease")
		}
		if ok, _ := db.AcquireLease(ctx, "job", "b", 25*time.Second); !ok {
			t.Fatal("b could not take an expired lease")
		}
		if err := db.ReleaseLease(ctx, "job", "a"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := db.AcquireLease(ctx, "job", "a", 25*time.Second); ok {
			t.Fatal("a's release freed b's lease")
		}
		if err := db.ReleaseLease(ctx, "job", "b"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := db.AcquireLease(ctx, "job", "a", 25*time.Second); !ok {
			t.Fatal("a could not take a released lease")
		}
	})

	t.Run("eight racing owners: exactly one wins", func(t *testing.T) {
		var wg sync.WaitGroup
		wins := make(chan string, 8)
		for i := range 8 {
			wg.Go(func() {
				if ok, err := db.AcquireLease(ctx, "race", fmt.Sprint("o", i), time.Minute); err == nil && ok {
					wins <- fmt.Sprint("o", i)
				}
			})
		}
		wg.Wait()
		close(wins)
		if n := len(wins); n != 1 {
			t.Fatalf("%d owners won", n)
		}
	})
}

func TestEnsureSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	v1, created, err := db.EnsureSecret(ctx, "secret.x")
	if err != nil || !created || len(v1) != 64 {
		t.Fatalf("first: %q %v %v", v1, created, err)
	}
	v2, created, err := db.EnsureSecret(ctx, "secret.x")
	if err != nil || created || v2 != v1 {
		t.Fatalf("second: %q %v %v; want the first value kept", v2, created, err)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("applying twice is a no-op", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t) // migrated once
		applied, err := db.Migrate(ctx)
		if err != nil || len(applied) != 0 {
			t.Fatalf("second migrate applied %v, err %v", applied, err)
		}
		st, err := db.MigrationStatus(ctx)
		if err != nil || st.Pending() || st.Current == 0 {
			t.Fatalf("status %+v, err %v", st, err)
		}
	})

	t.Run("a database written by a newer binary is refused", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		if _, err := db.Write.Exec(`insert into goose_db_version (version_id, is_applied) values (99999, true)`); err != nil {
			t.Fatal(err)
		}
		_, err := db.Migrate(ctx)
		if !errors.Is(err, store.ErrNewerSchema) {
			t.Fatalf("err = %v, want ErrNewerSchema", err)
		}
	})
}

// Several instances starting at once on one PostgreSQL database migrate it
// once: goose holds its session advisory lock while it migrates.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	if !storetest.Postgres() {
		t.Skip("PostgreSQL only: instances on one SQLite file are the next issue's")
	}
	ctx := context.Background()
	source := storetest.Source(t) // empty
	const instances = 4
	var (
		wg      sync.WaitGroup
		applied [instances][]int64
		errs    [instances]error
	)
	for i := range instances {
		wg.Go(func() {
			db, err := store.Open(ctx, store.Options{Path: source})
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			applied[i], errs[i] = db.Migrate(ctx)
		})
	}
	wg.Wait()
	versions := map[int64]int{}
	for i := range instances {
		if errs[i] != nil {
			t.Fatalf("instance %d: %v", i, errs[i])
		}
		for _, v := range applied[i] {
			versions[v]++
		}
	}
	if len(versions) == 0 {
		t.Fatal("no instance applied anything")
	}
	for v, n := range versions {
		if n != 1 {
			t.Errorf("version %d applied %d times", v, n)
		}
	}
}

func TestTimestamp(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	at := time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.FixedZone("x", 3*3600))
	var got, null store.Timestamp
	if err := db.Read.QueryRow(`select ?, ?`, store.TS(at), store.Timestamp{}).Scan(&got, &null); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(at) || !null.IsZero() || null.Ptr() != nil {
		t.Fatalf("got %v, null %v", got, null)
	}
}

func TestBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	if db.Postgres() {
		err := db.Backup(ctx, filepath.Join(t.TempDir(), "backup.db"))
		if !errors.Is(err, store.ErrNotOnPostgres) || !strings.Contains(err.Error(), "pg_dump") {
			t.Fatalf("backup on PostgreSQL: %v, want a refusal that names pg_dump", err)
		}
		return
	}
	for i := range 100 {
		if err := db.SetSetting(ctx, fmt.Sprint("k", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	// Writers keep going while the backup runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := db.SetSetting(ctx, fmt.Sprint("during", i), "v"); err != nil {
				t.Errorf("write during backup: %v", err)
				return
			}
		}
	})
	dest := filepath.Join(t.TempDir(), "backup.db")
	err := db.Backup(ctx, dest)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Backup(ctx, dest); err == nil {
		t.Fatal("a backup overwrote an existing file")
	}
	copy := storetest.NewWith(t, store.Options{Path: dest})
	if n := count(t, copy, `select count(*) from store_settings where key like 'k%'`); n != 100 {
		t.Fatalf("backup holds %d of the 100 rows written before it", n)
	}
	// The read pool stays read-only after a backup.
	if _, err := db.Read.Exec(`insert into store_settings (key, value, updated_at) values ('x', 'y', 'z')`); err == nil {
		t.Fatal("a read connection took a write after the backup")
	}
}
