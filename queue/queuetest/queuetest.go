// Package queuetest writes the queue layer's rows directly, for the
// benchmarks of other packages that need many of them (the console at
// size): what a queue whose handler kept failing would have written,
// without running it. The rows are real rows of the real schema; the SQL
// stays in the package tree that owns the tables.
package queuetest

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

	"switchyard/store"
)

// seedBatch is how many dead letters DeadLetters writes per statement.
const seedBatch = 500

// DeadLetters writes n dead letters of the queue name in one transaction,
// the newest dead at newest and each older one a second before, with ids
// prefix0, prefix1, …
func DeadLetters(tb testing.TB, db *store.DB, name, prefix string, n int, newest time.Time) {
	tb.Helper()
	ctx := context.Background()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for from := 0; from < n; from += seedBatch {
			k := min(seedBatch, n-from)
			var values strings.Builder
			args := make([]any, 0, k*8)
			for i := range k {
				at := newest.Add(-time.Duration(n-1-from-i) * time.Second)
				if i > 0 {
					values.WriteString(",")
				}
				values.WriteString("(?, ?, '', ?, '', ?, 0, ?, 10, ?, ?, ?, ?)")
				id := prefix + strconv.Itoa(from+i)
				args = append(args, id, name, "key-"+id, from+i,
					[]byte(`{"chat_id":5550001001,"text":"Your status NFT is active"}`),
					"permanent: telegram: Forbidden: bot was blocked by the user",
					store.TS(at.Add(-time.Hour)), store.TS(at.Add(-30*time.Minute)), store.TS(at))
			}
			if _, err := tx.ExecContext(ctx, `insert into queue_dead
				(id, queue, grp, key, order_key, seq, priority, body, attempts, last_error, created_at, first_failed_at, dead_at)
				values `+values.String(), args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("seed %d dead letters of %s: %v", n, name, err)
	}
}
