package store_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"switchyard/store/storetest"
)

func TestBeforeCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("runs after the transaction function, in order, before the commit, and its writes commit with the function's", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		var ran []string
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			db.AfterCommit(tx, func() { ran = append(ran, "after commit") })
			ok := db.BeforeCommit(tx, func(ctx context.Context) error {
				ran = append(ran, "first")
				// It sees what the function wrote, and what it writes commits.
				var n int
				if err := tx.QueryRowContext(ctx, `select count(*) from store_settings where key = 'fn'`).Scan(&n); err != nil || n != 1 {
					t.Errorf("the before-commit function saw %d of the function's rows (%v), want 1", n, err)
				}
				db.BeforeCommit(tx, func(context.Context) error {
					ran = append(ran, "given by the first")
					return nil
				})
				return setTx(ctx, tx, "before", "x")
			})
			if !ok {
				t.Error("BeforeCommit refused a transaction of Tx")
			}
			db.BeforeCommit(tx, func(context.Context) error {
				ran = append(ran, "second")
				return nil
			})
			if err := setTx(ctx, tx, "fn", "x"); err != nil {
				return err
			}
			ran = append(ran, "function")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"function", "first", "second", "given by the first", "after commit"}; !slices.Equal(ran, want) {
			t.Errorf("ran %q, want %q", ran, want)
		}
		if n := count(t, db, `select count(*) from store_settings where key in ('fn', 'before')`); n != 2 {
			t.Errorf("%d of the 2 rows committed", n)
		}
	})

	t.Run("never runs for a function that fails, and one that fails rolls its caller back and is what Tx returns", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		boom := errors.New("boom")
		ran := false
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			db.BeforeCommit(tx, func(context.Context) error { ran = true; return nil })
			return boom
		})
		if !errors.Is(err, boom) || ran {
			t.Errorf("Tx = %v, before-commit ran: %v; want the function's error and no run", err, ran)
		}

		refused := errors.New("refused before the commit")
		after := false
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			db.AfterCommit(tx, func() { after = true })
			db.BeforeCommit(tx, func(ctx context.Context) error {
				if err := setTx(ctx, tx, "before", "x"); err != nil {
					return err
				}
				return refused
			})
			return setTx(ctx, tx, "fn", "x")
		})
		if !errors.Is(err, refused) {
			t.Errorf("Tx = %v, want the before-commit function's error", err)
		}
		if n := count(t, db, `select count(*) from store_settings`); n != 0 || after {
			t.Errorf("%d rows kept, after-commit ran: %v; want none of either", n, after)
		}

		err = db.Tx(ctx, func(tx *sql.Tx) error {
			db.BeforeCommit(tx, func(context.Context) error { panic("in the before-commit function") })
			return setTx(ctx, tx, "fn", "x")
		})
		if err == nil || count(t, db, `select count(*) from store_settings`) != 0 {
			t.Errorf("a panicking before-commit function: Tx = %v, rows %d; want an error and none", err, count(t, db, `select count(*) from store_settings`))
		}
	})

	t.Run("a caller whose before-commit function fails rolls back alone, the others sharing its commit keep theirs", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		const callers = 6
		release := func() {}
		if !storetest.Postgres() {
			// Line the callers up behind a held writer, so that they share
			// one batch, one *sql.Tx and one commit.
			release = holdWriter(t, db)
		}
		refused := errors.New("refused")
		var wg sync.WaitGroup
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() {
				errs[i] = db.Tx(ctx, func(tx *sql.Tx) error {
					key := string(rune('a' + i))
					// Each caller has values of its own, although on SQLite
					// they share tx.
					if v, _ := db.TxValue(tx, "caller", func() any { return key }); v != key {
						t.Errorf("caller %s found the value %v", key, v)
					}
					db.BeforeCommit(tx, func(ctx context.Context) error {
						if err := setTx(ctx, tx, key+"-before", "x"); err != nil {
							return err
						}
						if i%3 == 0 {
							return refused
						}
						return nil
					})
					return setTx(ctx, tx, key, "x")
				})
			})
		}
		if !storetest.Postgres() {
			waitQueued(t, db, callers)
		}
		release()
		wg.Wait()
		for i, err := range errs {
			key := string(rune('a' + i))
			kept := count(t, db, `select count(*) from store_settings where key in (?, ?)`, key, key+"-before")
			if i%3 == 0 {
				if !errors.Is(err, refused) || kept != 0 {
					t.Errorf("caller %d: Tx = %v, %d rows kept; want its hook's error and none", i, err, kept)
				}
				continue
			}
			if err != nil || kept != 2 {
				t.Errorf("caller %d: Tx = %v, %d rows kept; want nil and both", i, err, kept)
			}
		}
	})

	t.Run("outside a transaction of Tx it registers nothing", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		tx, err := db.Write.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if db.BeforeCommit(tx, func(context.Context) error { return nil }) {
			t.Error("BeforeCommit took a transaction Tx did not begin")
		}
		if v, ok := db.TxValue(tx, "k", func() any { return 1 }); ok || v != nil {
			t.Errorf("TxValue = %v, %v outside Tx; want nil, false", v, ok)
		}
	})
}

func TestTxValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("keeps one value per key for the run, made at the first call", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		made := 0
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			for range 3 {
				v, ok := db.TxValue(tx, "k", func() any { made++; return new(int) })
				if !ok {
					t.Fatal("TxValue refused a transaction of Tx")
				}
				*v.(*int)++
			}
			v, _ := db.TxValue(tx, "k", func() any { return new(int) })
			if *v.(*int) != 3 || made != 1 {
				t.Errorf("value %d made %d times, want 3 and once", *v.(*int), made)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			db.TxValue(tx, "k", func() any { made++; return new(int) })
			return nil
		})
		if err != nil || made != 2 {
			t.Errorf("Tx = %v; made %d times, want a new value for the next transaction", err, made)
		}
	})

	t.Run("a PostgreSQL transaction run again starts without the old run's values and before-commit functions", func(t *testing.T) {
		t.Parallel()
		if !storetest.Postgres() {
			t.Skip("PostgreSQL only: SQLite's transactions are never run again")
		}
		db := storetest.New(t)
		var runs, made int
		var before []int
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			runs++
			run := runs
			db.TxValue(tx, "k", func() any { made++; return run })
			db.BeforeCommit(tx, func(context.Context) error {
				before = append(before, run)
				if v, _ := db.TxValue(tx, "k", nil); v != run {
					t.Errorf("run %d's before-commit function found run %v's value", run, v)
				}
				if run == 1 {
					return &pgconn.PgError{Code: "40P01", Message: "deadlock detected (the test's)"}
				}
				return nil
			})
			return nil
		})
		if err != nil || runs != 2 {
			t.Fatalf("Tx = %v after %d runs, want success on the second", err, runs)
		}
		if made != 2 || !slices.Equal(before, []int{1, 2}) {
			t.Errorf("values made %d times, before-commit functions of runs %v; want 2 and [1 2]", made, before)
		}
		if r := db.TxRetries(); r.Deadlock != 1 || r.Serialization != 0 {
			t.Errorf("TxRetries = %+v, want the one deadlock of the before-commit function", r)
		}
	})
}
