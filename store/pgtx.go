package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"time"
)

// maxTxAttempts bounds how often Tx runs a PostgreSQL transaction that was
// rolled back for a serialization failure or a deadlock.
const maxTxAttempts = 8

// pgTx is Tx on PostgreSQL: one READ COMMITTED transaction per call, run
// again after a serialization failure or deadlock with a short, growing,
// jittered pause so that the transactions that collided do not collide again.
func (db *DB) pgTx(ctx context.Context, fn TxFunc) error {
	for attempt := 1; ; attempt++ {
		err := db.pgTxOnce(ctx, fn)
		if err == nil || !IsRetryable(err) || attempt == maxTxAttempts || ctx.Err() != nil {
			return err
		}
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
	var after []func()
	db.hooks.begin(tx, &after)
	err = runFunc(ctx, fn, tx)
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
	runAfter(after)
	return nil
}
