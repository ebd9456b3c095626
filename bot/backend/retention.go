package backend

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"switchyard/store"
)

// OutboxTable is the table PruneProcessed prunes, for the retention console.
const OutboxTable = "bot_event_outbox"

const pruneProcessedQuery = `
	delete from bot_event_outbox
	where id in (select id from bot_event_outbox where processed_at < ? order by processed_at, id limit ?)
	  and processed_at < ?`

const pruneAttemptsQuery = `
	delete from bot_event_attempts
	where event_id in (select id from bot_event_outbox where processed_at < ? order by processed_at, id limit ?)`

// PruneProcessed deletes at most limit outbox events acknowledged before
// cutoff, oldest first, in one transaction, and returns how many; the
// retention runner (retention/) calls it. The backend never hands an
// acknowledged event out again (the pending query takes processed_at IS
// NULL only), and ids are never reused (autoincrement, an identity on
// PostgreSQL), so the bot's dedup ledger, keyed by them, stays true.
// Unacknowledged events stay, and so do dead-lettered registered events,
// which the spec keeps with processed_at NULL for good, for an operator.
func (o *Outbox) PruneProcessed(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	ts := store.TS(cutoff)
	var n int64
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		// The events' attempt histories go with them: the same events, as
		// the transaction reads the same rows twice.
		if _, err := tx.ExecContext(ctx, pruneAttemptsQuery, ts, limit); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, pruneProcessedQuery, ts, limit, ts)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: prune processed events: %w", err)
	}
	return n, nil
}
