package onboarding

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"switchyard/store"
)

// Tables the retention runner prunes here, for its console.
const (
	UpdatesTable    = "bot_updates"
	DeliveriesTable = "bot_deliveries"
)

// What the retention runner (retention/) prunes of the onboarding bot's
// history, in any process (the bot role need not run there): each call is
// one transaction of at most limit rows, oldest first by an indexed column.
// The spec's dedup ledger keeps its own daily prune (Bot.prune).

const pruneUpdatesQuery = `
	delete from bot_updates
	where (bot_id, update_id) in (
		select bot_id, update_id from bot_updates where done_at < ? order by done_at limit ?)
	  and status in ('done', 'failed') and done_at < ?`

// PruneUpdates deletes at most limit Telegram updates of the bot's update
// log finished (done or failed) before cutoff and returns how many. A
// pending update is never pruned, whatever its age. Telegram does not send
// an update again once getUpdates moved past it (bot_update_offsets) or the
// webhook answered it, so an old row guards nothing.
func PruneUpdates(ctx context.Context, db *store.DB, cutoff time.Time, limit int) (int64, error) {
	n, err := pruneExec(ctx, db, pruneUpdatesQuery, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("onboarding: prune updates: %w", err)
	}
	return n, nil
}

const pruneDeliveriesQuery = `
	delete from bot_deliveries
	where dm_key in (select dm_key from bot_deliveries where delivered_at < ? order by delivered_at limit ?)
	  and delivered_at < ?`

// PruneDeliveries deletes at most limit records of DMs delivered before
// cutoff (bot_deliveries, the console's user timeline) and returns how
// many. A DM is sent once because its message in onboarding.dm carries its
// cause's key, remembered by the queue's idempotency keys, not by this
// record; a DM not yet delivered has no record here.
func PruneDeliveries(ctx context.Context, db *store.DB, cutoff time.Time, limit int) (int64, error) {
	n, err := pruneExec(ctx, db, pruneDeliveriesQuery, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("onboarding: prune deliveries: %w", err)
	}
	return n, nil
}

func pruneExec(ctx context.Context, db *store.DB, query string, cutoff time.Time, limit int) (int64, error) {
	ts := store.TS(cutoff)
	var n int64
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, ts, limit, ts)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
