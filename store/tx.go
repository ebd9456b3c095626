package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/telemetry"
)

// ErrClosed is returned by Tx after Close.
var ErrClosed = errors.New("store: database closed")

// TxFunc is the body of a write transaction.
type TxFunc func(tx *sql.Tx) error

// Tx runs fn in a write transaction and returns once its writes are committed
// (nil) or rolled back (the error). Concurrent callers share one transaction
// and one commit (group commit): each fn runs in its own savepoint, so an
// error in one rolls back that caller's writes only. fn must not block on
// anything but the database, and must not call Tx itself.
//
// ctx ending never disturbs the other callers of a batch. A caller whose ctx
// ends before its turn is skipped and gets ctx's error at once; one whose ctx
// ends while fn runs has its own writes rolled back and gets ctx's error (its
// statements run to completion: they are never interrupted, since an
// interrupt would abort the shared transaction). Once fn has returned with
// ctx still live, Tx waits for the commit whatever ctx does, so nil always
// means committed.
//
// When the shared commit fails, every caller in the batch gets the error and
// none of their writes are kept.
//
// What fn gives BeforeCommit runs after fn returned nil, as the tail of fn:
// inside the caller's savepoint, under the same rules (above, "fn" includes
// those functions).
//
// On PostgreSQL there is no batch: each call is an ordinary READ COMMITTED
// transaction from the writer pool, run again (up to maxTxAttempts, counted
// by TxRetries and the metric switchyard_store_tx_retries_total) when
// PostgreSQL rolled it back for a serialization failure or deadlock. fn must
// therefore be safe to run more than once: it may set the caller's variables,
// but anything it does outside the database belongs in AfterCommit. The
// context rules are the same.
//
// With tracing on, a transaction is a store.tx span under ctx's span. One
// whose ctx has no span (a worker's poll, a lease's renewal, a janitor's
// sweep) starts none: as the root of a trace of its own it would send a
// one-span trace at every idle poll, and say nothing about any work.
func (db *DB) Tx(ctx context.Context, fn TxFunc) error {
	if !telemetry.Enabled() || !trace.SpanContextFromContext(ctx).IsValid() {
		return db.tx(ctx, fn)
	}
	ctx, span := telemetry.Start(ctx, "store.tx", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", db.system())))
	err := db.tx(ctx, fn)
	telemetry.End(span, err)
	return err
}

// system is the database's db.system.name, as a span names it.
func (db *DB) system() string {
	if db.Postgres() {
		return "postgresql"
	}
	return "sqlite"
}

func (db *DB) tx(ctx context.Context, fn TxFunc) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if db.batcher == nil {
		if db.closed.Load() {
			return ErrClosed
		}
		return db.pgTx(ctx, fn)
	}
	req := &txRequest{ctx: ctx, fn: fn, done: make(chan error, 1)}
	if err := db.batcher.submit(req); err != nil {
		return err
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		if req.state.CompareAndSwap(txQueued, txAbandoned) {
			return ctx.Err() // the batcher will skip it
		}
		return <-req.done // fn is running or ran: its outcome decides
	}
}

// States of a txRequest: queued until the batcher takes it (running), or
// until its caller gives up waiting (abandoned). Whoever moves it first wins.
const (
	txQueued int32 = iota
	txRunning
	txAbandoned
)

type txRequest struct {
	ctx   context.Context
	fn    TxFunc
	done  chan error
	state atomic.Int32
	// run holds what fn gave BeforeCommit (run inside the caller's
	// savepoint) and AfterCommit (run once the batch committed with this
	// caller's writes in it).
	run txRun
}

// take claims req for running; false means its caller has left (or its ctx
// has ended) and it must be skipped.
func (req *txRequest) take() bool {
	if req.ctx.Err() != nil {
		req.state.CompareAndSwap(txQueued, txAbandoned)
		return false
	}
	return req.state.CompareAndSwap(txQueued, txRunning)
}

// batcher owns the writer connection's transactions. One goroutine takes every
// request that is waiting, runs them one after another inside one BEGIN
// IMMEDIATE … COMMIT, and answers each.
type batcher struct {
	db       *sql.DB
	hooks    *hooks
	commits  *commitLog
	maxBatch int
	// committed is called after each commit that succeeded.
	committed func()
	// Savepoint statements are prepared once: a batch runs three per caller.
	savepoint, rollbackTo, release *sql.Stmt

	mu      sync.Mutex
	closed  bool
	pending chan *txRequest
	stopped chan struct{}
}

// commitLog keeps the wall-clock times (UnixNano) of the last commit that
// succeeded and the last that failed: readiness takes a recent successful
// commit as proof that the database takes writes.
type commitLog struct {
	lastOK, lastFailed atomic.Int64
}

func (l *commitLog) committed(err error) {
	if err != nil {
		l.lastFailed.Store(time.Now().UnixNano())
		return
	}
	l.lastOK.Store(time.Now().UnixNano())
}

func newBatcher(db *sql.DB, h *hooks, commits *commitLog, maxBatch int, committed func()) (*batcher, error) {
	b := &batcher{
		db:        db,
		hooks:     h,
		commits:   commits,
		maxBatch:  maxBatch,
		committed: committed,
		pending:   make(chan *txRequest, 4*maxBatch),
		stopped:   make(chan struct{}),
	}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{{&b.savepoint, "savepoint sw"}, {&b.rollbackTo, "rollback to sw"}, {&b.release, "release sw"}} {
		st, err := db.Prepare(p.sql)
		if err != nil {
			return nil, fmt.Errorf("store: prepare %q: %w", p.sql, err)
		}
		*p.stmt = st
	}
	go b.run()
	return b, nil
}

func (b *batcher) submit(req *txRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	b.pending <- req
	return nil
}

func (b *batcher) close() {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.pending)
	}
	b.mu.Unlock()
	<-b.stopped
	for _, st := range []*sql.Stmt{b.savepoint, b.rollbackTo, b.release} {
		_ = st.Close()
	}
}

func (b *batcher) run() {
	defer close(b.stopped)
	batch := make([]*txRequest, 0, b.maxBatch)
	for first := range b.pending {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < b.maxBatch {
			select {
			case req, ok := <-b.pending:
				if !ok {
					break fill
				}
				batch = append(batch, req)
			default:
				break fill
			}
		}
		b.commit(batch)
	}
}

// commit runs one batch. A batch of one skips the savepoint.
func (b *batcher) commit(batch []*txRequest) {
	results := make([]error, len(batch))
	live := 0
	for i, req := range batch {
		if err := req.ctx.Err(); err != nil {
			results[i] = err
			req.state.CompareAndSwap(txQueued, txAbandoned)
			continue
		}
		live++
	}
	if live == 0 {
		answer(batch, results)
		return
	}

	tx, err := b.db.Begin() // BEGIN IMMEDIATE (the writer's _txlock)
	if err != nil {
		fail(batch, results, fmt.Errorf("store: begin: %w", err))
		return
	}
	single, lone := live == 1, -1
	for i, req := range batch {
		if results[i] != nil {
			continue
		}
		if !req.take() {
			results[i] = req.ctx.Err()
			continue
		}
		if single {
			results[i], lone = b.runReq(req, tx), i
			continue
		}
		if _, err := tx.Stmt(b.savepoint).Exec(); err != nil {
			_ = tx.Rollback()
			fail(batch, results, fmt.Errorf("store: savepoint: %w", err))
			return
		}
		if results[i] = b.runReq(req, tx); results[i] != nil {
			if _, err := tx.Stmt(b.rollbackTo).Exec(); err != nil {
				// SQLite rolled the whole transaction back (disk full, I/O error):
				// nothing of this batch is kept.
				_ = tx.Rollback()
				fail(batch, results, fmt.Errorf("store: transaction aborted: %w", results[i]))
				return
			}
		}
		if _, err := tx.Stmt(b.release).Exec(); err != nil {
			_ = tx.Rollback()
			fail(batch, results, fmt.Errorf("store: release savepoint: %w", err))
			return
		}
	}
	if lone >= 0 && results[lone] != nil {
		// The lone caller failed: roll back instead of a savepoint.
		_ = tx.Rollback()
		answer(batch, results)
		return
	}
	if err := tx.Commit(); err != nil {
		_ = tx.Rollback()
		b.commits.committed(err)
		fail(batch, results, fmt.Errorf("store: commit: %w", err))
		return
	}
	b.commits.committed(nil)
	b.committed()
	for i, req := range batch {
		if results[i] == nil {
			runAfter(req.run.after)
		}
	}
	answer(batch, results)
}

// runReq runs req's function and its before-commit functions, collecting
// what they give AfterCommit.
func (b *batcher) runReq(req *txRequest, tx *sql.Tx) error {
	b.hooks.begin(tx, &req.run)
	defer b.hooks.end(tx)
	return runFunc(req.ctx, req.fn, tx, b.hooks, &req.run)
}

// runFunc runs fn and then, if it succeeded, the functions it gave
// BeforeCommit. A caller whose context ended while they ran gets the
// context's error, so that its writes are rolled back (with its savepoint,
// its lone transaction, or its PostgreSQL transaction) while the rest of a
// batch commits.
func runFunc(ctx context.Context, fn TxFunc, tx *sql.Tx, h *hooks, run *txRun) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("store: transaction function panicked: %v", p)
		}
	}()
	err = fn(tx)
	if err == nil && ctx.Err() == nil {
		err = h.beforeCommit(ctx, run)
	}
	if cerr := ctx.Err(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// fail answers err to every caller that had not failed on its own already.
func fail(batch []*txRequest, results []error, err error) {
	for i := range results {
		if results[i] == nil {
			results[i] = err
		}
	}
	answer(batch, results)
}

func answer(batch []*txRequest, results []error) {
	for i, req := range batch {
		req.done <- results[i]
	}
}
