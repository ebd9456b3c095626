package omni

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"switchyard/store"
)

// Tables the retention runner prunes here, for its console.
const (
	LedgerTable   = "omni_inbound_events"
	MessagesTable = "omni_messages"
)

// What the retention runner (retention/) prunes of the chat platform: the
// chat role's dedup ledger, and — when the operator asks for it — the chat
// history. Each call is one transaction of at most limit rows, taken
// oldest first by an indexed age column.

const pruneLedgerQuery = `
	delete from omni_inbound_events
	where idempotency_key in (
		select idempotency_key from omni_inbound_events where applied_at < ? order by applied_at limit ?)
	  and applied_at < ?`

// PruneInboundLedger deletes at most limit rows of the chat role's dedup
// ledger (omni_inbound_events) applied before cutoff, oldest first, and
// returns how many. A ledger row only stops an envelope from taking effect
// twice, so it is needed only while the same update can come again: while
// Telegram may redeliver it (it keeps an unconfirmed update for 24 hours)
// and while receiver.flow may hand the envelope over again (its idempotency
// keys, pruned after queue.AdminOpts.KeyRetention, already refuse a second
// webhook of the same update). Keep it at least a day.
func (a *Admin) PruneInboundLedger(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	ts := store.TS(cutoff)
	n, err := pruneExec(ctx, a.db, pruneLedgerQuery, ts, limit, ts)
	if err != nil {
		return 0, fmt.Errorf("omni: prune the inbound ledger: %w", err)
	}
	return n, nil
}

// pruneMessagesQuery keeps, of every thread, its newest inbound and its
// newest outbound message whatever their age: a thread's next message
// takes max(seq) + 1 (so its seq never repeats), and the first-message rules
// ask whether the thread ever had an inbound message.
const pruneMessagesQuery = `
	delete from omni_messages
	where id in (
		select m.id from omni_messages m
		where m.created_at < ? and m.status in ('received', 'sent', 'failed')
		  and exists (
			select 1 from omni_messages newer
			where newer.thread_id = m.thread_id and newer.direction = m.direction and newer.seq > m.seq)
		order by m.created_at limit ?)
	  and created_at < ? and status in ('received', 'sent', 'failed')`

// PruneMessages deletes at most limit chat messages created before cutoff,
// oldest first, and returns how many. It takes only finished messages
// (received, sent or failed; never one queued, sending or retrying, whose
// row is the record its delivery goes through), and never the newest
// inbound or the newest outbound message of a thread, so that threads keep
// their order and their first-message facts. An edit or a deletion that
// Telegram sends later for a pruned message finds no message, as for one
// never seen. Off by default: the history is the operators'.
func (a *Admin) PruneMessages(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	ts := store.TS(cutoff)
	n, err := pruneExec(ctx, a.db, pruneMessagesQuery, ts, limit, ts)
	if err != nil {
		return 0, fmt.Errorf("omni: prune chat messages: %w", err)
	}
	return n, nil
}

// pruneExec runs one delete in a transaction of its own and returns how
// many rows it deleted.
func pruneExec(ctx context.Context, db *store.DB, query string, args ...any) (int64, error) {
	var n int64
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
