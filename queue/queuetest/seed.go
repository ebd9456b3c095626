// Package queuetest is the queue package's test kit: fixtures a test of
// another package needs at a size sending through the queue would make slow.
package queuetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"switchyard/store"
)

// DeadOpts describe the dead letters SeedDead writes.
type DeadOpts struct {
	Queue string
	// Group, when set, makes them dead letters of that consumer group of
	// topic Queue (partition 0, offsets from 0).
	Group string
	// N is how many.
	N int
	// Body is the payload of the i-th (0 is the oldest); nil gives
	// {"n":i}.
	Body func(i int) []byte
	// Start is when the first one died (default: an hour before the
	// database clock); each later one died a millisecond after the last.
	Start time.Time
}

// seedBatch is how many rows one insert statement writes.
const seedBatch = 200

// SeedDead writes opts.N dead letters, as the queue package would have
// after their last failed attempt, in one transaction, and returns their
// ids, oldest first. A message's order key is empty; a record's key is
// "k<i>".
func SeedDead(ctx context.Context, db *store.DB, opts DeadOpts) ([]string, error) {
	if opts.Body == nil {
		opts.Body = func(i int) []byte { return fmt.Appendf(nil, `{"n":%d}`, i) }
	}
	if opts.Start.IsZero() {
		opts.Start = db.Now().Add(-time.Hour)
	}
	ids := make([]string, opts.N)
	for i := range ids {
		var b [16]byte
		_, _ = rand.Read(b[:])
		prefix := "m_"
		if opts.Group != "" {
			prefix = "r_"
		}
		ids[i] = prefix + hex.EncodeToString(b[:])
	}
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for from := 0; from < opts.N; from += seedBatch {
			to := min(from+seedBatch, opts.N)
			var (
				q    strings.Builder
				args []any
			)
			q.WriteString(`insert into queue_dead (id, queue, grp, partition_id, log_offset, key, order_key, seq, priority, body,
				attempts, last_error, created_at, first_failed_at, dead_at, traceparent) values `)
			for i := from; i < to; i++ {
				if i > from {
					q.WriteString(", ")
				}
				q.WriteString("(?, ?, ?, ?, ?, ?, '', 0, 0, ?, 1, ?, ?, ?, ?, '')")
				at := opts.Start.Add(time.Duration(i) * time.Millisecond)
				var part, off, key any
				key = ""
				if opts.Group != "" {
					part, off, key = 0, int64(i), fmt.Sprintf("k%d", i)
				}
				args = append(args, ids[i], opts.Queue, opts.Group, part, off, key, opts.Body(i), "permanent: seeded",
					store.TS(at.Add(-time.Second)), store.TS(at), store.TS(at))
			}
			if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queuetest: seed %d dead letters of %s: %w", opts.N, opts.Queue, err)
	}
	return ids, nil
}
