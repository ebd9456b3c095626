package store

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
)

// AfterCommit arranges for fn to run once tx, a transaction of Tx, has
// committed; fn never runs when tx rolls back, and a PostgreSQL transaction
// that is run again keeps only the functions of the run that committed.
// This is where a transaction function puts what it does outside the
// database: waking a worker, counting a metric. fn runs on the committing
// goroutine before Tx returns, so it must be quick and must not call Tx. For
// a transaction Tx did not begin, fn runs at once.
func (db *DB) AfterCommit(tx *sql.Tx, fn func()) {
	if !db.hooks.addAfter(tx, fn) {
		fn()
	}
}

// BeforeCommit arranges for fn to run in tx, a transaction of Tx, once the
// transaction function has returned nil and just before the commit: writes
// that should hold their locks only for the tail of the transaction (a
// topic's partition rows, taken in one order by every transaction) are
// gathered while the function runs and made here. The functions run in the
// order they were given, on the goroutine and with the context of Tx, after
// everything the transaction function did; one given by a running one runs
// after the rest. The first to fail (or panic) fails the caller as its
// transaction function would have: its writes are rolled back — on SQLite
// only its own, in the savepoint it shares the batch's commit from — and Tx
// returns the error (on PostgreSQL, a deadlock or serialization failure runs
// the whole transaction function again, with none of the old run's
// functions). A savepoint the transaction function rolls back to does not
// take back a function it gave BeforeCommit after the savepoint: code that
// rolls back savepoints keeps such work in a scope of its own (as queue's
// record handlers do).
//
// For a transaction Tx did not begin it registers nothing and returns false:
// the caller does the work at once.
func (db *DB) BeforeCommit(tx *sql.Tx, fn func(ctx context.Context) error) bool {
	return db.hooks.addBefore(tx, fn)
}

// TxValue returns the value kept under key for the run of tx's transaction
// function now in progress, made by newFunc at the run's first call (newFunc
// may call BeforeCommit and AfterCommit). It is state a package gathers
// across the calls of one transaction, such as the records to write before
// the commit. A value lives as long as the run: a PostgreSQL transaction run
// again starts with none, and the callers of one SQLite batch, who share a
// *sql.Tx, never see each other's. For a transaction Tx did not begin it
// returns nil and false, and does not call newFunc.
func (db *DB) TxValue(tx *sql.Tx, key any, newFunc func() any) (any, bool) {
	run := db.hooks.run(tx)
	if run == nil {
		return nil, false
	}
	// Only the goroutine running the transaction function reads and writes
	// run's values.
	if v, ok := run.values[key]; ok {
		return v, true
	}
	if run.values == nil {
		run.values = map[any]any{}
	}
	v := newFunc()
	run.values[key] = v
	return v, true
}

// txRun is what one run of one caller's transaction function gave
// BeforeCommit, AfterCommit and TxValue.
type txRun struct {
	before []func(context.Context) error
	after  []func()
	values map[any]any
}

// hooks maps each transaction function running now to its run.
type hooks struct {
	mu      sync.Mutex
	running map[*sql.Tx]*txRun
}

// begin starts a run of a transaction function in tx, forgetting anything
// an earlier run of the same caller left in run.
func (h *hooks) begin(tx *sql.Tx, run *txRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running == nil {
		h.running = map[*sql.Tx]*txRun{}
	}
	*run = txRun{}
	h.running[tx] = run
}

func (h *hooks) end(tx *sql.Tx) {
	h.mu.Lock()
	delete(h.running, tx)
	h.mu.Unlock()
}

func (h *hooks) run(tx *sql.Tx) *txRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.running[tx]
}

func (h *hooks) addAfter(tx *sql.Tx, fn func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	run, ok := h.running[tx]
	if ok {
		run.after = append(run.after, fn)
	}
	return ok
}

func (h *hooks) addBefore(tx *sql.Tx, fn func(context.Context) error) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	run, ok := h.running[tx]
	if ok {
		run.before = append(run.before, fn)
	}
	return ok
}

// beforeCommit runs the functions given to BeforeCommit, including those
// they give it themselves, and returns the first error.
func (h *hooks) beforeCommit(ctx context.Context, run *txRun) error {
	for i := 0; ; i++ {
		h.mu.Lock()
		if i == len(run.before) {
			h.mu.Unlock()
			return nil
		}
		fn := run.before[i]
		h.mu.Unlock()
		if err := fn(ctx); err != nil {
			return err
		}
	}
}

// runAfter runs the functions given to AfterCommit; one that panics is
// logged and does not stop the others: the writes are committed already.
func runAfter(fns []func()) {
	for _, fn := range fns {
		func() {
			defer func() {
				if p := recover(); p != nil {
					slog.Error("store: an after-commit function panicked", slog.Any("panic", p))
				}
			}()
			fn()
		}()
	}
}
