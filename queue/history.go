package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	"switchyard/history"
	"switchyard/mask"
	"switchyard/store"
)

// The console's search ("what happened to X") asks the queues what they
// know about a term: a message by its id (goqite's, or a dead letter's),
// or by the idempotency key it was sent with (the chat platform's
// telegram:{botId}:{update_id}, a DM's key) — whether it still waits, was
// dead-lettered, or is gone (handled, or purged).

const (
	// historyKeysSQL finds a key in every queue through queue_keys' primary
	// key (queue, key): the recursive part walks the few distinct queue
	// names down that key's first column, one seek each, as a skip-scan
	// would, so no index on key alone costs every keyed send a write.
	historyKeysSQL = `
		with recursive queues(name) as (
			select min(queue) from queue_keys
			union all
			select (select min(queue) from queue_keys where queue > queues.name) from queues where queues.name is not null
		)
		select k.queue, k.key, k.message_id, k.created_at
		from queues join queue_keys k on k.queue = queues.name and k.key = ?
		order by k.created_at desc limit ?`
	historyLiveSQL = `select id, queue, created, received, traceparent from goqite where id = ?`
	historyDeadSQL = `select id, queue, grp, key, attempts, last_error, created_at, dead_at, traceparent
		from queue_dead where id = ?`
)

// History returns what the queues know about term, at most limit rows per
// query.
func (a *Admin) History(ctx context.Context, term string, limit int) (history.Found, error) {
	var found history.Found
	if term == "" {
		return found, nil
	}
	rows, err := a.db.Read.QueryContext(ctx, historyKeysSQL, term, limit)
	if err != nil {
		return found, fmt.Errorf("queue history of %s: %w", term, err)
	}
	type sent struct {
		queue, msg string
		at         store.Timestamp
	}
	var keyed []sent
	var items []history.Item
	for rows.Next() {
		var (
			q, key, msg string
			at          store.Timestamp
		)
		if err := rows.Scan(&q, &key, &msg, &at); err != nil {
			_ = rows.Close()
			return found, fmt.Errorf("queue history of %s: %w", term, err)
		}
		keyed = append(keyed, sent{q, msg, at})
		items = append(items, history.Item{At: at.Time, Flow: history.FlowQueues, Kind: "message sent",
			Summary: "to " + q + " with this idempotency key",
			IDs:     []history.ID{{Name: "queue message", Value: msg}, {Name: "key", Value: key}}, Link: queueLink(q)})
	}
	if err := rows.Err(); err != nil {
		return found, fmt.Errorf("queue history of %s: %w", term, err)
	}
	_ = rows.Close()
	found.Add(limit, len(items), items...)
	ids := []string{term}
	for _, s := range keyed {
		ids = append(ids, s.msg)
	}
	for i, id := range ids {
		n, err := a.messageHistory(ctx, &found, id)
		if err != nil {
			return found, fmt.Errorf("queue history of %s: %w", term, err)
		}
		if n == 0 && i > 0 {
			s := keyed[i-1]
			found.Add(limit, 0, history.Item{At: s.at.Time, Flow: history.FlowQueues, Kind: "message gone",
				Summary: "no longer in " + s.queue + ": handled, or purged",
				IDs:     []history.ID{{Name: "queue message", Value: s.msg}}, Link: queueLink(s.queue)})
		}
	}
	return found, nil
}

func queueLink(q string) string { return "/admin/queues/" + url.PathEscape(q) }

// messageHistory adds message id, waiting or dead-lettered, and says how
// many rows it found.
func (a *Admin) messageHistory(ctx context.Context, found *history.Found, id string) (int, error) {
	var (
		q, traceparent string
		created        store.Timestamp
		received       int
	)
	err := a.db.Read.QueryRowContext(ctx, historyLiveSQL, id).Scan(&id, &q, &created, &received, &traceparent)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return 0, fmt.Errorf("message %s: %w", id, err)
	default:
		found.Add(2, 1, history.Item{At: created.Time, Flow: history.FlowQueues, Kind: "queued message",
			Summary: fmt.Sprintf("waits in %s, received %d times", q, received),
			IDs:     []history.ID{{Name: "queue message", Value: id}}, Link: queueLink(q), TraceID: history.TraceID(traceparent)})
		return 1, nil
	}
	var (
		grp, key, lastErr string
		attempts          int
		dead              store.Timestamp
	)
	err = a.db.Read.QueryRowContext(ctx, historyDeadSQL, id).Scan(&id, &q, &grp, &key, &attempts, &lastErr, &created, &dead, &traceparent)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("dead letter %s: %w", id, err)
	}
	where := q
	if grp != "" {
		where += " (group " + grp + ")"
	}
	ids := []history.ID{{Name: "dead letter", Value: id}}
	if key != "" {
		ids = append(ids, history.ID{Name: "key", Value: key})
	}
	found.Add(2, 1, history.Item{At: dead.Time, Flow: history.FlowQueues, Kind: "dead letter",
		Summary: fmt.Sprintf("dead-lettered in %s after %d attempts: %s", where, attempts, mask.Phones(lastErr)),
		IDs:     ids, Link: queueLink(q), TraceID: history.TraceID(traceparent)})
	return 1, nil
}
