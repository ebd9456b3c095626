package store_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// slowInsert computes for a while inside an INSERT, so that a cancellation
// arrives while the statement runs: the moment the SQLite driver would
// interrupt the connection, which aborts the whole shared transaction.
const slowInsert = `
	insert into cancel_probe (caller, n)
	select ?, sum(x) from (
		with recursive c(x) as (select 1 union all select x + 1 from c limit 1500)
		select x from c)`

// cancelMoment is when a caller's context is cancelled.
type cancelMoment int

const (
	never          cancelMoment = iota
	beforeSubmit                // the context has ended when Tx is called
	whileWaiting                // while another batch holds the writer
	insideFunction              // while the caller's own statement runs
)

func (m cancelMoment) String() string {
	return [...]string{"never", "before submit", "while waiting", "inside its function"}[m]
}

func TestTxCancellation(t *testing.T) {
	t.Parallel()

	t.Run("a caller that hangs up never costs the rest of its batch their commit", func(t *testing.T) {
		t.Parallel()
		storetest.SQLiteOnly(t, "group commit is SQLite's; TestPostgresTx covers cancellation there")
		db := storetest.New(t)
		if err := db.Tx(context.Background(), func(tx *sql.Tx) error {
			_, err := tx.Exec(`create table cancel_probe (caller text not null, n integer not null)`)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		rounds := 25
		if testing.Short() {
			rounds = 10
		}
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 1))
		for round := range rounds {
			runCancellationRound(t, db, rng, round)
		}
	})

	t.Run("a lone live caller beside a caller that left commits", func(t *testing.T) {
		t.Parallel()
		storetest.SQLiteOnly(t, "group commit is SQLite's; TestPostgresTx covers cancellation there")
		db := storetest.New(t)
		release := holdWriter(t, db)
		gone, cancel := context.WithCancel(context.Background())
		goneErr := make(chan error, 1)
		go func() {
			goneErr <- db.Tx(gone, func(tx *sql.Tx) error {
				_, err := tx.Exec(`insert into store_settings (key, value, updated_at) values ('gone', 'v', 'now')`)
				return err
			})
		}()
		liveErr := make(chan error, 1)
		go func() {
			liveErr <- db.Tx(context.Background(), func(tx *sql.Tx) error {
				_, err := tx.Exec(`insert into store_settings (key, value, updated_at) values ('live', 'v', 'now')`)
				return err
			})
		}()
		waitQueued(t, db, 2)
		cancel()
		release()
		if err := <-goneErr; err == nil {
			t.Fatal("a caller cancelled while waiting got nil")
		}
		if err := <-liveErr; err != nil {
			t.Fatalf("live caller: %v", err)
		}
		if got := count(t, db, `select count(*) from store_settings where key = 'live'`); got != 1 {
			t.Fatalf("the live caller's row: %d rows, want 1 (nil from Tx must mean committed)", got)
		}
		if got := count(t, db, `select count(*) from store_settings where key = 'gone'`); got != 0 {
			t.Fatalf("the cancelled caller's row: %d rows, want 0", got)
		}
	})
}

// holdWriter keeps the writer busy in a transaction until release is called,
// so that the callers submitted meanwhile share the next batch.
func holdWriter(t *testing.T, db *store.DB) (release func()) {
	t.Helper()
	entered, leave, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- db.Tx(context.Background(), func(*sql.Tx) error {
			close(entered)
			<-leave
			return nil
		})
	}()
	<-entered
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(leave)
			if err := <-done; err != nil {
				t.Errorf("holding transaction: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

func runCancellationRound(t *testing.T, db *store.DB, rng *rand.Rand, round int) {
	t.Helper()
	const callers = 12
	moments := make([]cancelMoment, callers)
	queued := 0
	delays := make([]time.Duration, callers) // drawn here: rng is not for goroutines
	for i := range moments {
		delays[i] = time.Duration(rng.IntN(2000)) * time.Microsecond
		if rng.IntN(3) == 0 { // a random third hang up
			moments[i] = cancelMoment(1 + rng.IntN(3))
		}
		if moments[i] != beforeSubmit {
			queued++
		}
	}

	release := holdWriter(t, db)
	var (
		wg      sync.WaitGroup
		errs    = make([]error, callers)
		cancels = make([]context.CancelFunc, callers)
	)
	for i := range callers {
		ctx, cancel := context.WithCancel(context.Background())
		cancels[i] = cancel
		defer cancel()
		if moments[i] == beforeSubmit {
			cancel()
		}
		started := make(chan struct{})
		if moments[i] == insideFunction {
			go func() { <-started; time.Sleep(delays[i] / 4); cancel() }()
		}
		caller := fmt.Sprintf("r%d-c%d", round, i)
		wg.Go(func() {
			errs[i] = db.Tx(ctx, func(tx *sql.Tx) error {
				if moments[i] == insideFunction {
					close(started)
				}
				// Like every caller, it runs its statements on its own context.
				_, err := tx.ExecContext(ctx, slowInsert, caller)
				return err
			})
		})
	}
	// Every caller that was not cancelled beforehand waits in one queue.
	waitQueued(t, db, queued)
	// Those cancelled while waiting hang up at random moments around the
	// writer's release: before their batch starts, or while it runs.
	for i := range callers {
		if moments[i] == whileWaiting {
			go func() { time.Sleep(delays[i]); cancels[i]() }()
		}
	}
	time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
	release()
	wg.Wait()

	for i := range callers {
		caller := fmt.Sprintf("r%d-c%d", round, i)
		rows := count(t, db, `select count(*) from cancel_probe where caller = ?`, caller)
		switch {
		case moments[i] == never && errs[i] != nil:
			t.Fatalf("round %d: caller %d was never cancelled but got %v (moments %v)", round, i, errs[i], moments)
		case errs[i] == nil && rows != 1:
			t.Fatalf("round %d: caller %d (cancelled %s) got nil but has %d rows", round, i, moments[i], rows)
		case errs[i] != nil && rows != 0:
			t.Fatalf("round %d: caller %d (cancelled %s) got %v but its row was kept", round, i, moments[i], errs[i])
		case moments[i] == beforeSubmit && errs[i] == nil:
			t.Fatalf("round %d: caller %d cancelled before submitting got nil", round, i)
		}
	}
}

// waitQueued waits until n transaction functions wait for the writer.
func waitQueued(t *testing.T, db *store.DB, n int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("%d callers queued", n), func() bool { return store.QueuedTx(db) >= n },
		func() string { return fmt.Sprintf("%d queued", store.QueuedTx(db)) })
}
