package queue

import (
	"context"
	"database/sql"
	"fmt"
	"unicode/utf8"
)

// wakeQuery makes due now the messages of a queue that wait for a retry —
// their failed attempt (queue_retries) is their latest delivery, so no
// handler holds them — among those whose order key starts with a prefix.
// queue_retries holds only the retrying messages, so the scan is small.
const wakeQuery = `
	update goqite set timeout = ?
	where queue = ? and timeout > ?
	  and id in (
		select r.message_id from queue_retries r join queue_order o on o.message_id = r.message_id
		where r.queue = ? and o.parked = 0 and substr(o.order_key, 1, ?) = ?)
	  and received = (select r.attempt from queue_retries r where r.message_id = goqite.id)`

// WakeTx makes due now, inside the caller's transaction, the messages of
// order keys starting with orderKeyPrefix that wait for a retry (a backoff
// or a RetryAfter), and wakes the queue's workers once tx commits. It is
// for a wait on something that has just happened: a message that waits for
// another to be applied first goes at once when it is, not at its next
// look. A message a handler holds is left alone. It returns how many it
// woke.
func (q *Queue) WakeTx(ctx context.Context, tx *sql.Tx, orderKeyPrefix string) (int64, error) {
	if orderKeyPrefix == "" {
		return 0, fmt.Errorf("queue %s: wake needs an order key prefix", q.name)
	}
	w := newWriter(ctx, tx, q.db)
	now := gqTime(q.db.Now())
	res, err := w.exec(wakeQuery, now, q.name, now, q.name, utf8.RuneCountInString(orderKeyPrefix), orderKeyPrefix)
	if err != nil {
		return 0, fmt.Errorf("queue %s: wake %q: %w", q.name, orderKeyPrefix, err)
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, err
	}
	afterCommit(q.db, tx, q.sig.notify)
	return n, nil
}
