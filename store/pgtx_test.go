package store_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

func TestAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)

	t.Run("runs once the transaction committed, never for one rolled back", func(t *testing.T) {
		var ran []string
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			db.AfterCommit(tx, func() { ran = append(ran, "committed") })
			if len(ran) != 0 {
				t.Error("an after-commit function ran before the commit")
			}
			return setTx(ctx, tx, "after", "commit")
		})
		if err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		err = db.Tx(ctx, func(tx *sql.Tx) error {
			db.AfterCommit(tx, func() { ran = append(ran, "rolled back") })
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		if len(ran) != 1 || ran[0] != "committed" {
			t.Fatalf("after-commit functions ran: %v", ran)
		}
	})

	t.Run("outside a transaction of Tx, runs at once", func(t *testing.T) {
		tx, err := db.Write.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		ran := false
		db.AfterCommit(tx, func() { ran = true })
		if !ran {
			t.Fatal("did not run")
		}
	})
}

// TestPostgresTx covers what Tx does on PostgreSQL alone: transactions that
// run side by side, are retried after a deadlock, and keep the context rules.
func TestPostgresTx(t *testing.T) {
	t.Parallel()
	if !storetest.Postgres() {
		t.Skip("PostgreSQL only: set " + storetest.EnvTestDB + " to a postgres:// URL")
	}
	ctx := context.Background()

	t.Run("two transactions that deadlock both commit: PostgreSQL aborts one and Tx runs it again, keeping one run's after-commit functions", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		for _, k := range []string{"a", "b"} {
			if err := db.SetSetting(ctx, k, "0"); err != nil {
				t.Fatal(err)
			}
		}
		var (
			runs, hooks atomic.Int32
			both        sync.WaitGroup // both hold their first row
			wg          sync.WaitGroup
			errs        [2]error
		)
		both.Add(2)
		lock := func(tx *sql.Tx, key string) error {
			_, err := tx.ExecContext(ctx, `update store_settings set value = value || '+' where key = ?`, key)
			return err
		}
		for i, order := range [][2]string{{"a", "b"}, {"b", "a"}} {
			wg.Go(func() {
				first := true
				errs[i] = db.Tx(ctx, func(tx *sql.Tx) error {
					runs.Add(1)
					db.AfterCommit(tx, func() { hooks.Add(1) })
					if err := lock(tx, order[0]); err != nil {
						return err
					}
					if first { // line the first runs up so that they deadlock
						first = false
						both.Done()
						both.Wait()
					}
					return lock(tx, order[1])
				})
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("transaction %d: %v", i, err)
			}
		}
		if n := runs.Load(); n < 3 {
			t.Fatalf("%d runs: no transaction was run again, so there was no deadlock to recover from", n)
		}
		if r := db.TxRetries(); r.Deadlock != int64(runs.Load()-2) || r.Serialization != 0 {
			t.Errorf("TxRetries = %+v after %d runs of 2 transactions, want every rerun counted as a deadlock", r, runs.Load())
		}
		if n := hooks.Load(); n != 2 {
			t.Fatalf("%d after-commit functions ran, want one per committed transaction", n)
		}
		for _, k := range []string{"a", "b"} {
			if v, _, err := db.Setting(ctx, k); err != nil || v != "0++" {
				t.Fatalf("%s = %q (%v), want both transactions' writes", k, v, err)
			}
		}
	})

	t.Run("a caller whose context ends while its function runs gets the context's error and keeps no write", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		cctx, cancel := context.WithCancel(ctx)
		err := db.Tx(cctx, func(tx *sql.Tx) error {
			if err := setTx(cctx, tx, "gone", "x"); err != nil {
				return err
			}
			cancel()
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if _, ok, err := db.Setting(ctx, "gone"); err != nil || ok {
			t.Fatalf("the write of a caller that hung up was kept (%v)", err)
		}
	})

	t.Run("a statement cancelled mid-way rolls back its caller only", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := db.Tx(cctx, func(tx *sql.Tx) error {
			if err := setTx(cctx, tx, "slow", "x"); err != nil {
				return err
			}
			_, err := tx.ExecContext(cctx, `select pg_sleep(30)`)
			return err
		})
		if err == nil {
			t.Fatal("a cancelled statement's transaction committed")
		}
		if err := db.SetSetting(ctx, "next", "y"); err != nil {
			t.Fatalf("the next transaction: %v", err)
		}
		if _, ok, _ := db.Setting(ctx, "slow"); ok {
			t.Fatal("the cancelled caller's write was kept")
		}
	})

	t.Run("a caller whose context ends while every connection is busy returns at once", func(t *testing.T) {
		t.Parallel()
		db := storetest.NewWith(t, store.Options{WriteConns: 1})
		held, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			done <- db.Tx(ctx, func(*sql.Tx) error {
				close(held)
				<-release
				return nil
			})
		}()
		<-held
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		returned := make(chan error, 1)
		go func() { returned <- db.Tx(cctx, func(*sql.Tx) error { return nil }) }()
		select {
		case err := <-returned:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want context.DeadlineExceeded", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("Tx waited for a connection long after its caller's context ended")
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("SQLSTATEs classify errors", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		insert := func() error {
			return db.Tx(ctx, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `insert into store_settings (key, value, updated_at) values ('dup', 'v', 'now')`)
				return err
			})
		}
		if err := insert(); err != nil {
			t.Fatal(err)
		}
		err := insert()
		if !store.IsUniqueViolation(err) || store.IsRetryable(err) || store.IsFull(err) || store.IsCorrupt(err) {
			t.Fatalf("duplicate key: %v (unique %v, retryable %v)", err, store.IsUniqueViolation(err), store.IsRetryable(err))
		}
	})
}

// setTx writes a setting inside tx.
func setTx(ctx context.Context, tx *sql.Tx, key, value string) error {
	_, err := tx.ExecContext(ctx, `insert into store_settings (key, value, updated_at) values (?, ?, 'now')`, key, value)
	return err
}
