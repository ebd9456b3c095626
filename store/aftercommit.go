package store

import (
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
	if !db.hooks.add(tx, fn) {
		fn()
	}
}

// hooks maps each transaction function running now to the list its
// AfterCommit calls add to.
type hooks struct {
	mu      sync.Mutex
	running map[*sql.Tx]*[]func()
}

func (h *hooks) begin(tx *sql.Tx, list *[]func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running == nil {
		h.running = map[*sql.Tx]*[]func(){}
	}
	*list = (*list)[:0]
	h.running[tx] = list
}

func (h *hooks) end(tx *sql.Tx) {
	h.mu.Lock()
	delete(h.running, tx)
	h.mu.Unlock()
}

func (h *hooks) add(tx *sql.Tx, fn func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	list, ok := h.running[tx]
	if ok {
		*list = append(*list, fn)
	}
	return ok
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
