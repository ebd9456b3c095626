package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"switchyard/store"
)

// Tables the retention runner prunes here, for its console.
const (
	DeadLettersTable = "queue_dead"
	TopicLogTable    = "queue_topic_log"
	KeysTable        = "queue_keys"
	FailuresTable    = "queue_failures"
)

// What the retention runner (retention/) prunes of the queues and topics:
// dead letters, and topic records every group has finished. Each call is
// one transaction of at most limit rows, oldest first.

const pruneDeadQuery = `
	delete from queue_dead
	where id in (select id from queue_dead where dead_at < ? order by dead_at limit ?)
	  and dead_at < ?`

// PruneDeadLetters deletes at most limit dead letters — of queues and of
// consumer groups — that died before cutoff, oldest first, and returns how
// many; as PurgeDead does, for good. Dead letters are the only copy of a
// message (its goqite row was deleted when it died, queue.go
// deadLetterMessage) and of a record the log no longer holds, so this is
// the operator's time to look at them and redrive. A redrive running at
// the same time either moves a dead letter first, or finds it gone.
func (a *Admin) PruneDeadLetters(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	return a.pruneBatch(ctx, "dead letters", pruneDeadQuery, cutoff, limit)
}

// pruneRecordsQuery deletes a partition's records below an offset that
// were published before the cutoff and that every group of the topic has
// finished: below the smallest committed offset of the partition's groups,
// or, with no group, below the partition's end.
const pruneRecordsQuery = `
	delete from queue_topic_log
	where topic = ? and partition_id = ? and log_offset < ? and published_at < ?
	  and log_offset < coalesce((select min(committed) from queue_group_offsets where topic = ? and partition_id = ?), ?)`

// lockTopicQuery keeps a new group of the topic out while records are
// pruned, on PostgreSQL, where a group's creation runs beside the prune:
// creating a group checks its topic's row (a key-share lock, its foreign
// key), which waits for this one. So a group created meanwhile has its
// offsets either before the prune's delete, which then keeps what the
// group has not finished, or after it, at the first record the prune kept
// (createGroup's logBoundsQuery). SQLite's one writer keeps them apart.
const lockTopicQuery = `select name from queue_topics where name = ? for update`

// PruneTopicRecords deletes at most limit topic records, of every topic,
// published before cutoff that every consumer group of their topic has
// finished, oldest offsets first, and returns how many. A group that has
// not finished a record keeps it, however old (until the group is
// deleted); a group created later starts at the earliest record kept
// (StartEarliest). Records in retry or redriven are above their group's
// committed offset or carry their value, so none is lost.
func (a *Admin) PruneTopicRecords(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	type part struct {
		topic string
		id    int
	}
	var parts []part
	rows, err := a.db.Read.QueryContext(ctx, `select topic, partition_id from queue_topic_partitions order by topic, partition_id`)
	if err != nil {
		return 0, fmt.Errorf("queue: prune topic records: %w", err)
	}
	for rows.Next() {
		var p part
		if err := rows.Scan(&p.topic, &p.id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("queue: prune topic records: %w", err)
		}
		parts = append(parts, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("queue: prune topic records: %w", err)
	}
	ts := store.TS(cutoff)
	var n int64
	err = a.db.Tx(ctx, func(tx *sql.Tx) error {
		n = 0
		locked := ""
		for _, p := range parts {
			if n >= int64(limit) {
				return nil
			}
			if a.db.Postgres() && locked != p.topic {
				var name string
				if err := tx.QueryRowContext(ctx, lockTopicQuery, p.topic).Scan(&name); errors.Is(err, sql.ErrNoRows) {
					continue // the topic went meanwhile
				} else if err != nil {
					return err
				}
				locked = p.topic
			}
			var first, end int64
			if err := tx.QueryRowContext(ctx, logBoundsQuery, p.topic, p.id, p.topic, p.id).Scan(&first, &end); errors.Is(err, sql.ErrNoRows) {
				continue
			} else if err != nil {
				return err
			}
			d, err := affected(tx.ExecContext(ctx, pruneRecordsQuery,
				p.topic, p.id, first+int64(limit)-n, ts, p.topic, p.id, end))
			if err != nil {
				return err
			}
			n += d
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("queue: prune topic records: %w", err)
	}
	return n, nil
}

const pruneKeysQuery = `
	delete from queue_keys
	where (queue, key) in (select queue, key from queue_keys where created_at < ? order by created_at limit ?)
	  and created_at < ?`

// PruneKeys deletes at most limit idempotency keys of sends made before
// cutoff, oldest first, and returns how many. A send with a key pruned
// here is no longer recognised as a repeat: keep keys at least as long as
// a sender may send the same message again (Telegram redelivers a webhook
// for up to 24 hours).
func (a *Admin) PruneKeys(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	return a.pruneBatch(ctx, "keys", pruneKeysQuery, cutoff, limit)
}

const pruneFailuresQuery = `
	delete from queue_failures
	where id in (select id from queue_failures where failed_at < ? order by failed_at limit ?)
	  and failed_at < ?`

// PruneFailures deletes at most limit failure records (a message's or a
// record's attempt history) made before cutoff, oldest first, and returns
// how many.
func (a *Admin) PruneFailures(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	return a.pruneBatch(ctx, "failures", pruneFailuresQuery, cutoff, limit)
}

// pruneBatch runs one of the batch deletes above, whose arguments are the
// cutoff, the limit and the cutoff again, in a transaction of its own.
func (a *Admin) pruneBatch(ctx context.Context, what, query string, cutoff time.Time, limit int) (int64, error) {
	ts := store.TS(cutoff)
	var n int64
	err := a.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = affected(tx.ExecContext(ctx, query, ts, limit, ts))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("queue: prune %s: %w", what, err)
	}
	return n, nil
}
