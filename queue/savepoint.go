package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/store"
	"switchyard/telemetry"
)

// ErrSavepoint is SavepointTx's error when the savepoint itself failed.
const ErrSavepoint = Error("queue: savepoint failed; the transaction cannot go on")

// SavepointTx runs fn inside a savepoint of tx, a transaction of db.Tx, so
// that a batch of independent pieces of work (a batch handler's messages)
// shares one transaction and one commit while each can fail alone. When fn
// returns nil its writes stay in tx; when it fails they are rolled back, and
// so is what its sends and publishes would have done after the commit (wake
// a worker, count a send; write a publish's records), and SavepointTx
// returns fn's error while tx goes on. When the savepoint itself fails (on
// SQLite, a full disk or an I/O error rolls the whole transaction back), the
// error is ErrSavepoint, joined with fn's: tx can then only fail. Calls do
// not nest, and fn must not run in a record handler of a subscription (its
// savepoint already keeps such work apart). Functions fn gives
// db.AfterCommit or db.BeforeCommit directly are not taken back: give them
// as fn's last step.
//
// With tracing on, the savepoint is a span, "store.savepoint", a child of
// ctx's span: in a batch transaction, whose store.tx span belongs to no
// message's trace, it is a message's storage work in that message's trace.
func SavepointTx(ctx context.Context, db *store.DB, tx *sql.Tx, fn func() error) error {
	if !telemetry.Enabled() {
		return savepointTx(ctx, db, tx, fn)
	}
	system := "sqlite"
	if db.Postgres() {
		system = "postgresql"
	}
	ctx, span := telemetry.Start(ctx, "store.savepoint", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", system)))
	err := savepointTx(ctx, db, tx, fn)
	telemetry.End(span, err)
	return err
}

func savepointTx(ctx context.Context, db *store.DB, tx *sql.Tx, fn func() error) error {
	w := newWriter(ctx, tx, db)
	if _, err := w.exec(savepointQuery); err != nil {
		return fmt.Errorf("%w: savepoint: %w", ErrSavepoint, err)
	}
	h := hubFor(db)
	scope := h.openScope(tx)
	ferr := fn()
	if ferr == nil {
		if _, err := w.exec(releaseSavepointQuery); err != nil {
			h.closeScope(tx, scope)
			return fmt.Errorf("%w: release: %w", ErrSavepoint, err)
		}
		if err := h.keepScope(ctx, db, tx, scope); err != nil {
			return fmt.Errorf("%w: %w", ErrSavepoint, err)
		}
		return nil
	}
	h.closeScope(tx, scope)
	if _, err := w.exec(rollbackSavepointQuery); err != nil {
		return errors.Join(ferr, fmt.Errorf("%w: roll back: %w", ErrSavepoint, err))
	}
	if _, err := w.exec(releaseSavepointQuery); err != nil {
		return errors.Join(ferr, fmt.Errorf("%w: release: %w", ErrSavepoint, err))
	}
	return ferr
}
