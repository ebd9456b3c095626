package queue

import (
	"context"
	"fmt"
	"time"

	"switchyard/store"
)

// DeadLettered is how many messages of one queue, or records of one
// consumer group, went to the dead-letter queue in a span of time.
type DeadLettered struct {
	// Queue is the queue's or the topic's name; Group the consumer group,
	// empty for a queue (the labels of switchyard_queue_messages_dead_lettered_total).
	Queue, Group string
	Count        int64
}

// deadLetteredSinceQuery counts the dead-letterings the failure log
// recorded, which stay after a redrive or a purge (until retention removes
// them, --retention-queue-failures), so the count is of what happened, like
// the dead-lettered counter, not of what is left.
const deadLetteredSinceQuery = `
	select queue, grp, count(*) from queue_failures
	where outcome = 'dead' and failed_at >= ?
	group by queue, grp
	order by queue, grp`

// DeadLetteredSince counts, per queue and consumer group, the messages and
// records dead-lettered at or after since, on any process of the database.
// A queue or group with none is left out.
func (a *Admin) DeadLetteredSince(ctx context.Context, since time.Time) ([]DeadLettered, error) {
	rows, err := a.db.Read.QueryContext(ctx, deadLetteredSinceQuery, store.TS(since))
	if err != nil {
		return nil, fmt.Errorf("queue: count dead letters since %s: %w", since.Format(time.RFC3339), err)
	}
	defer rows.Close()
	var out []DeadLettered
	for rows.Next() {
		var d DeadLettered
		if err := rows.Scan(&d.Queue, &d.Group, &d.Count); err != nil {
			return nil, fmt.Errorf("queue: count dead letters: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}
