package omni

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"switchyard/queue"
	"switchyard/store"
)

// The ADR's queues, by name.
const (
	QueueReceiverFlow  = "receiver.flow"
	QueueReceiverRetry = "receiver.retry"
	QueueSenderFlow    = "sender.flow"
	QueueSenderRetry   = "sender.retry"
)

// lane is a family of queues: messages start in flow; one that fails moves to
// retry, where it is retried with backoff in place, and from there, when its
// attempts run out or its failure is permanent, into the dead letters that
// queue/ keeps (the ADR's *.dlq), from which an operator redrives it.
//
// Order per key (a thread, a chat) holds across the two queues: a message
// that moves to retry parks its key in omni_parked, and every later message
// of a parked key follows it into retry (behind it, as the retry queue keeps
// order per key too) instead of overtaking it in flow. The key is released
// when the retry queue has finished all of them. Keys that never fail never
// touch the retry queue.
type lane struct {
	name  string // "receiver" or "sender"
	db    *store.DB
	flow  *queue.Queue
	retry *queue.Queue
	// policy is the retry queue's policy, defaults filled in.
	policy queue.RetryPolicy
}

// newLane builds the lane name over the queues flow and retry on db.
func newLane(db *store.DB, name, flow, retry string, policy queue.RetryPolicy, log *slog.Logger) *lane {
	if policy.MaxAttempts <= 0 {
		policy.MaxAttempts = queue.DefaultMaxAttempts
	}
	metricLaneMoves.WithLabelValues(name) // at 0 until the first move
	return &lane{
		name:   name,
		db:     db,
		flow:   queue.New(queue.NewOpts{DB: db, Name: flow, Logger: log, Retry: queue.RetryPolicy{MaxAttempts: flowAttempts}}),
		retry:  queue.New(queue.NewOpts{DB: db, Name: retry, Logger: log, Retry: policy}),
		policy: policy,
	}
}

// flowAttempts is the attempt limit of the flow queues: a failure there moves
// the message to its retry queue, so only an unreachable database or a
// crash loop exhausts it.
const flowAttempts = 100

const (
	parkedQuery = `select count(*) from omni_parked where lane = ? and order_key = ?`
	parkQuery   = `
		insert into omni_parked (lane, message_key, order_key, parked_at) values (?, ?, ?, ?)
		on conflict (lane, message_key) do nothing`
	unparkQuery = `delete from omni_parked where lane = ? and message_key = ?`
)

// parked reports whether orderKey has messages in the retry lane. It reads
// the read pool: a key only becomes parked through a flow message of the same
// key, which the flow queue hands out one at a time, so a reader never sees
// "not parked" for a key parked before its message was delivered.
func (l *lane) parked(ctx context.Context, orderKey string) (bool, error) {
	if orderKey == "" {
		return false, nil
	}
	var n int
	if err := l.db.Read.QueryRowContext(ctx, parkedQuery, l.name, orderKey).Scan(&n); err != nil {
		return false, fmt.Errorf("%s lane: read parked keys: %w", l.name, err)
	}
	return n > 0, nil
}

// parkedKeys returns which of orderKeys have messages in the retry lane, in
// one read of the read pool, under the rule of parked: a batch of flow
// messages, each the only one of its key in hand.
func (l *lane) parkedKeys(ctx context.Context, orderKeys []string) (map[string]bool, error) {
	parked := map[string]bool{}
	args := []any{l.name}
	for _, k := range orderKeys {
		if k != "" {
			args = append(args, k)
		}
	}
	if len(args) == 1 {
		return parked, nil
	}
	rows, err := l.db.Read.QueryContext(ctx, parkedManyQuery+"("+placeholders(len(args)-1)+")", args...)
	if err != nil {
		return nil, fmt.Errorf("%s lane: read parked keys: %w", l.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("%s lane: read parked keys: %w", l.name, err)
		}
		parked[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s lane: read parked keys: %w", l.name, err)
	}
	return parked, nil
}

const parkedManyQuery = `select distinct order_key from omni_parked where lane = ? and order_key in `

// escalateTx moves a message into the retry lane, to be handled after delay,
// and parks its key. Repeating it is harmless: the retry queue drops a second
// send with the same message key, and the park row is written once. The move
// is counted once tx has committed.
func (l *lane) escalateTx(ctx context.Context, tx *sql.Tx, body []byte, messageKey, orderKey string, delay time.Duration) error {
	if err := l.parkTx(ctx, tx, messageKey, orderKey); err != nil {
		return err
	}
	if _, err := l.retry.SendTx(ctx, tx, queue.Message{Body: body, Key: messageKey, OrderKey: orderKey, Delay: delay}); err != nil {
		return fmt.Errorf("%s lane: move %s to %s: %w", l.name, messageKey, l.retry.Name(), err)
	}
	l.db.AfterCommit(tx, func() { metricLaneMoves.WithLabelValues(l.name).Inc() })
	return nil
}

// parkTx marks messageKey as holding orderKey in the retry lane.
func (l *lane) parkTx(ctx context.Context, tx *sql.Tx, messageKey, orderKey string) error {
	if orderKey == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, parkQuery, l.name, messageKey, orderKey, store.TS(l.db.Now())); err != nil {
		return fmt.Errorf("%s lane: park %s: %w", l.name, orderKey, err)
	}
	return nil
}

// unparkTx releases messageKey's hold on its key: it was handled, or it is
// given up on (dead-lettered).
func (l *lane) unparkTx(ctx context.Context, tx *sql.Tx, messageKey string) error {
	if _, err := tx.ExecContext(ctx, unparkQuery, l.name, messageKey); err != nil {
		return fmt.Errorf("%s lane: unpark %s: %w", l.name, messageKey, err)
	}
	return nil
}

// run runs handlers on both queues of the lane until ctx is cancelled,
// then stops them gracefully: running handlers finish and their results are
// committed.
func (l *lane) run(ctx context.Context, flow, retry queue.WorkerOpts) error {
	// The workers get a context that outlives ctx: cancelling theirs is a
	// hard stop, and Run promises to finish the work in hand.
	base := context.WithoutCancel(ctx)
	fw := l.flow.Start(base, flow)
	rw := l.retry.Start(base, retry)
	<-ctx.Done()
	return errors.Join(fw.Stop(context.Background()), rw.Stop(context.Background()))
}
