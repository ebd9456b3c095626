package queue

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// Two subscribers never own a partition at once while their leases hold,
// but one whose lease ran out may still be committing a transaction when the
// next owner starts its own. On SQLite the two transactions run one after
// the other; on PostgreSQL they run side by side, and each must still see
// what the other did, or a record takes effect twice; and the one whose
// lease ran out commits nothing (the lease fence; see fence_test.go).
func TestOverlappingOwners(t *testing.T) {
	t.Parallel()

	t.Run("a record finished by the new owner while the old one still runs takes effect once", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		ctx := t.Context()
		mustExecTx(t, db, `create table effects (partition_id bigint not null, log_offset bigint not null)`)
		topic, err := NewTopic(ctx, TopicOpts{DB: db, Name: "owners", Partitions: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := topic.createGroup(ctx, "g", StartEarliest); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"a", "b"} {
			if _, err := topic.Publish(ctx, key, []byte(key)); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := topic.Read(ctx, ReadFilter{})
		if err != nil || len(recs) != 2 {
			t.Fatalf("Read = %v, %v", recs, err)
		}
		effect := func(ctx context.Context, tx *sql.Tx, r Record) error {
			_, err := tx.ExecContext(ctx, `insert into effects (partition_id, log_offset) values (?, ?)`, r.Partition, r.Offset)
			return err
		}

		// The new owner handles records 0 and 1 in one transaction. Between
		// them, with its commit of offset 0 written but not committed, it
		// waits for the old owner, which handles record 1 alone (as if it held
		// record 0 back for a retry of key a), to commit or to wait for it.
		oldDone := make(chan struct{})
		newHolds := make(chan struct{})
		newOwner := owner(topic, "g", func(ctx context.Context, tx *sql.Tx, r Record) error {
			if r.Offset == 1 {
				close(newHolds)
				if db.Postgres() {
					testwait.Until(t, 10*time.Second, "the old owner committed or waits for the new one", func() bool {
						select {
						case <-oldDone:
							return true
						default:
						}
						return count(t, db, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`) > 0
					})
				}
			}
			return effect(ctx, tx, r)
		})
		oldOwner := owner(topic, "g", effect)
		// The new owner holds the partition's lease; the old one's ran out.
		if held, err := db.AcquireLease(ctx, leaseName("owners", "g", 0), newOwner.owner, time.Minute); err != nil || !held {
			t.Fatalf("AcquireLease = %v, %v", held, err)
		}

		newErr := make(chan error, 1)
		go func() {
			newErr <- db.Tx(ctx, func(tx *sql.Tx) error {
				_, err := newOwner.applyChunk(ctx, tx, 0, []*entry{{rec: recs[0]}, {rec: recs[1]}}, make([]recOutcome, 2))
				return err
			})
		}()
		<-newHolds
		var oldOut [1]recOutcome
		oldErr := db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := oldOwner.applyChunk(ctx, tx, 0, []*entry{{rec: recs[1]}}, oldOut[:])
			return err
		})
		close(oldDone)
		if err := <-newErr; err != nil {
			t.Fatalf("the new owner's transaction: %v", err)
		}
		if !errors.Is(oldErr, errLeaseLost) {
			t.Fatalf("the old owner's transaction: %v, want errLeaseLost", oldErr)
		}
		for off := range int64(2) {
			if n := count(t, db, `select count(*) from effects where log_offset = ?`, off); n != 1 {
				t.Errorf("record %d took effect %d times, want once", off, n)
			}
		}
		if oldOut[0].kind != outcomeStale {
			t.Errorf("the old owner's outcome for record 1 is %d, want stale (%d)", oldOut[0].kind, outcomeStale)
		}
		if n := count(t, db, `select committed from queue_group_offsets where topic = 'owners' and grp = 'g'`); n != 2 {
			t.Errorf("committed offset %d, want 2", n)
		}
	})
}

// owner is a subscriber of group that owns the topic's partitions without
// taking their leases: what an owner whose lease ran out still does (a test
// that wants it to hold one takes it with its owner id).
func owner(topic *Topic, group string, handler RecordHandlerFunc) *Subscription {
	return &Subscription{
		t: topic, db: topic.db, group: group,
		opts:  SubscribeOpts{Group: group, Handler: handler, BatchSize: 64},
		retry: RetryPolicy{}.withDefaults(),
		owner: "test/" + string(newID()),
		log:   slog.New(slog.DiscardHandler),
		hctx:  context.Background(),
	}
}

func mustExecTx(t *testing.T, db *store.DB, query string) {
	t.Helper()
	if err := db.Tx(t.Context(), func(tx *sql.Tx) error {
		_, err := tx.Exec(query)
		return err
	}); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func count(t *testing.T, db *store.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
