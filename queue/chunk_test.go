package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"switchyard/store/storetest"
	"switchyard/testwait"
)

// A chunk's records run in one transaction (applyChunk). These tests hold
// what a record's failure does there, however the chunk isolates its records:
// the failed record alone is rolled back and retried, and each of its
// neighbours takes effect once — its writes, its publishes, its after-commit
// functions.
func TestChunkFailureIsolation(t *testing.T) {
	t.Parallel()
	t.Run("a record that fails in a chunk is retried alone and its neighbours take effect once", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		if _, err := db.Write.ExecContext(t.Context(), `create table chunk_effects (log_offset bigint not null, attempt bigint not null)`); err != nil {
			t.Fatal(err)
		}
		in, err := NewTopic(t.Context(), TopicOpts{DB: db, Name: "chunk.in", Partitions: 1})
		if err != nil {
			t.Fatal(err)
		}
		out, err := NewTopic(t.Context(), TopicOpts{DB: db, Name: "chunk.out", Partitions: 1})
		if err != nil {
			t.Fatal(err)
		}
		// The records wait before the group starts, so one transaction
		// handles them: the bad one sits between good ones.
		const records, bad = 6, 3
		for i := range records {
			key := "good"
			if i == bad {
				key = "bad"
			}
			if _, err := in.Publish(t.Context(), key+string(rune('a'+i)), []byte(key)); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu       sync.Mutex
			after    = map[int64]int{} // by offset: after-commit functions run
			attempts = map[int64][]int{}
		)
		sub, err := in.Subscribe(t.Context(), SubscribeOpts{
			Group: "chunk",
			Retry: RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
			Handler: func(ctx context.Context, tx *sql.Tx, r Record) error {
				mu.Lock()
				attempts[r.Offset] = append(attempts[r.Offset], r.Attempt)
				mu.Unlock()
				if _, err := tx.ExecContext(ctx, `insert into chunk_effects (log_offset, attempt) values (?, ?)`, r.Offset, r.Attempt); err != nil {
					return err
				}
				if err := out.PublishTx(ctx, tx, r.Key, r.Value); err != nil {
					return err
				}
				if string(r.Value) == "bad" && r.Attempt == 1 {
					return errors.New("fails on its first attempt, after writing and publishing")
				}
				db.AfterCommit(tx, func() {
					mu.Lock()
					after[r.Offset]++
					mu.Unlock()
				})
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Stop(context.Background()) })
		// A commit is visible to readers a moment before its after-commit
		// functions run, so the wait is for both.
		testwait.Until(t, 20*time.Second, "every record committed and its after-commit function run", func() bool {
			var committed int
			_ = db.Read.QueryRow(`select committed from queue_group_offsets where topic = 'chunk.in' and grp = 'chunk'`).Scan(&committed)
			mu.Lock()
			defer mu.Unlock()
			return committed == records && len(after) == records
		}, func() string {
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("after-commit runs by offset: %v", after)
		})
		mu.Lock()
		defer mu.Unlock()
		rows, err := db.Read.QueryContext(t.Context(), `select log_offset, attempt from chunk_effects order by log_offset`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		kept := map[int64][]int{}
		for rows.Next() {
			var off int64
			var attempt int
			if err := rows.Scan(&off, &attempt); err != nil {
				t.Fatal(err)
			}
			kept[off] = append(kept[off], attempt)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		for off := range int64(records) {
			wantAttempt := 1
			if off == bad {
				wantAttempt = 2
			}
			if got := kept[off]; len(got) != 1 || got[0] != wantAttempt {
				t.Errorf("record %d's writes kept for attempts %v, want [%d] alone", off, got, wantAttempt)
			}
			if after[off] != 1 {
				t.Errorf("record %d's after-commit function ran %d times, want once", off, after[off])
			}
		}
		if got := attempts[bad]; len(got) == 0 || got[len(got)-1] != 2 {
			t.Errorf("the bad record was handled at attempts %v, want its retry, attempt 2, last", got)
		}
		var failures, retrying int
		if err := db.Read.QueryRow(`select count(*) from queue_failures where grp = 'chunk' and outcome <> 'done'`).Scan(&failures); err != nil {
			t.Fatal(err)
		}
		if failures != 1 {
			t.Errorf("%d failures recorded, want 1: the bad record's first attempt", failures)
		}
		if err := db.Read.QueryRow(`select count(*) from queue_group_retries where grp = 'chunk'`).Scan(&retrying); err != nil || retrying != 0 {
			t.Errorf("%d records still in retry (%v), want none", retrying, err)
		}
		recs, err := out.Read(t.Context(), ReadFilter{})
		if err != nil {
			t.Fatal(err)
		}
		published := map[string]int{}
		for _, r := range recs {
			published[r.Key]++
		}
		if len(recs) != records {
			t.Errorf("chunk.out holds %d records (%v), want %d: one per record, the failed attempt's thrown away", len(recs), published, records)
		}
		for k, n := range published {
			if n != 1 {
				t.Errorf("chunk.out holds %d records of key %s, want 1", n, k)
			}
		}
	})
}
