package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// maxTxAttempts bounds how often Tx runs a PostgreSQL transaction that was
// rolled back for a serialization failure or a deadlock.
const maxTxAttempts = 8

// metricTxRetries counts the reruns of every database of the process, both
// series at 0 from the start: a storm of them is what an alert looks for.
var metricTxRetries = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchyard_store_tx_retries_total",
	Help: "PostgreSQL transactions run again because the server rolled them back, by reason (serialization: 40001, deadlock: 40P01).",
}, []string{"reason"})

func init() {
	for _, r := range []string{retrySerialization, retryDeadlock} {
		metricTxRetries.WithLabelValues(r)
	}
}

// Reasons of switchyard_store_tx_retries_total.
const (
	retrySerialization = "serialization"
	retryDeadlock      = "deadlock"
)

// TxRetries counts the transactions Tx ran again on one database because
// PostgreSQL rolled them back; SQLite's are always 0.
type TxRetries struct {
	Serialization int64 // 40001 serialization_failure
	Deadlock      int64 // 40P01 deadlock_detected
}

// txRetries is DB's count behind TxRetries.
type txRetries struct {
	serialization, deadlock atomic.Int64
}

// TxRetries returns how many transactions Tx has run again on db so far (the
// metric switchyard_store_tx_retries_total sums every database the process
// opened).
func (db *DB) TxRetries() TxRetries {
	return TxRetries{Serialization: db.retries.serialization.Load(), Deadlock: db.retries.deadlock.Load()}
}

// countRetry counts a rerun after err.
func (db *DB) countRetry(err error) {
	if sqlstate(err) == sqlstateDeadlock {
		db.retries.deadlock.Add(1)
		metricTxRetries.WithLabelValues(retryDeadlock).Inc()
		return
	}
	db.retries.serialization.Add(1)
	metricTxRetries.WithLabelValues(retrySerialization).Inc()
}

// pgTx is Tx on PostgreSQL: one READ COMMITTED transaction per call, run
// again after a serialization failure or deadlock with a short, growing,
// jittered pause so that the transactions that collided do not collide again.
func (db *DB) pgTx(ctx context.Context, fn TxFunc) error {
	for attempt := 1; ; attempt++ {
		err := db.pgTxOnce(ctx, fn)
		if err == nil || !IsRetryable(err) || attempt == maxTxAttempts || ctx.Err() != nil {
			return err
		}
		db.countRetry(err)
		pause := time.Duration(attempt) * time.Millisecond
		if !Sleep(ctx, pause+rand.N(pause)) {
			return ctx.Err()
		}
	}
}

func (db *DB) pgTxOnce(ctx context.Context, fn TxFunc) error {
	// The wait for a connection ends with ctx, but the transaction itself is
	// not bound to ctx: database/sql would roll it back the moment ctx ends,
	// even during the commit, and then nobody could tell whether it
	// committed. fn's statements run on ctx (ending it cancels them, and fn's
	// error rolls the transaction back); once fn has returned with ctx live,
	// the commit runs to its end.
	conn, err := db.Write.Conn(ctx)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	var run txRun
	db.hooks.begin(tx, &run)
	err = runFunc(ctx, fn, tx, &db.hooks, &run)
	db.hooks.end(tx)
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		db.commits.committed(err)
		return fmt.Errorf("store: commit: %w", err)
	}
	db.commits.committed(nil)
	runAfter(run.after)
	return nil
}
