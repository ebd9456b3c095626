package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// An owner whose lease ran out while its handler was stalled mid-chunk
// (a paused process, a slow downstream) must commit nothing: by then another
// subscriber may own the partition, and what the stale owner wrote would be
// applied beside the new owner's work. The lease clock is the store's manual
// clock here, on both backends, so the test moves it past the lease.
func TestLeaseFence(t *testing.T) {
	t.Parallel()

	for _, c := range []struct {
		name string
		// fail makes the stalled handler fail once it goes on, as a handler
		// whose downstream timed out: without the fence its retry row would
		// be committed, and the next owner would apply the record a second
		// time when it picks the retry up.
		fail bool
	}{
		{name: "an owner whose lease ran out mid-chunk commits nothing, and the next owner applies the record once"},
		{name: "a failure an owner meets after its lease ran out leaves no retry behind for the next owner to apply again", fail: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const ttl = 30 * time.Second
			db, clock := storetest.NewWithClock(t)
			ctx := t.Context()
			mustExecTx(t, db, `create table effects (log_offset bigint not null, owner text not null)`)
			topic, err := NewTopic(ctx, TopicOpts{DB: db, Name: "fence", Partitions: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := topic.createGroup(ctx, "g", StartEarliest); err != nil {
				t.Fatal(err)
			}
			if _, err := topic.Publish(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			recs, err := topic.Read(ctx, ReadFilter{})
			if err != nil || len(recs) != 1 {
				t.Fatalf("Read = %v, %v", recs, err)
			}
			effect := func(ctx context.Context, tx *sql.Tx, r Record, who string) error {
				_, err := tx.ExecContext(ctx, `insert into effects (log_offset, owner) values (?, ?)`, r.Offset, who)
				return err
			}

			// The old owner takes the lease and starts a chunk; its handler
			// writes its effect and stalls.
			stalled, goOn := make(chan struct{}), make(chan struct{})
			old := owner(topic, "g", func(ctx context.Context, tx *sql.Tx, r Record) error {
				if err := effect(ctx, tx, r, "old"); err != nil {
					return err
				}
				close(stalled)
				<-goOn
				if c.fail {
					return errors.New("downstream timed out")
				}
				return nil
			})
			if held, err := db.AcquireLease(ctx, leaseName("fence", "g", 0), old.owner, ttl); err != nil || !held {
				t.Fatalf("AcquireLease = %v, %v", held, err)
			}
			oldErr := make(chan error, 1)
			go func() {
				oldErr <- db.Tx(ctx, func(tx *sql.Tx) error {
					_, err := old.applyChunk(ctx, tx, 0, []*entry{{rec: recs[0]}}, make([]recOutcome, 1))
					return err
				})
			}()
			<-stalled

			// Its lease runs out, and a subscriber takes the partition over.
			// On PostgreSQL the new owner gets the lease and waits, in its
			// own chunk, for the old owner's lock of the group's offset row;
			// on SQLite it waits for the writer, which the old owner holds.
			clock.Advance(ttl + time.Second)
			sub := make(chan *Subscription, 1)
			go func() {
				s, err := topic.Subscribe(context.Background(), SubscribeOpts{
					Group: "g", LeaseTTL: ttl, PollInterval: 20 * time.Millisecond,
					Handler: func(ctx context.Context, tx *sql.Tx, r Record) error { return effect(ctx, tx, r, "new") },
				})
				if err != nil {
					t.Error(err)
				}
				sub <- s
			}()
			if db.Postgres() {
				testwait.Until(t, 10*time.Second, "the new owner holds the lease and waits for the old owner's chunk", func() bool {
					return count(t, db, `select count(*) from store_leases where name = 'queue.group/fence/g/0' and owner like 'sub/%'`) == 1 &&
						count(t, db, `select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`) > 0
				})
			}
			close(goOn)
			if err := <-oldErr; !errors.Is(err, errLeaseLost) {
				t.Errorf("the old owner's chunk: %v, want errLeaseLost", err)
			}
			// Nothing of the old owner's chunk was committed.
			for what, q := range map[string]string{
				"effects of the old owner": `select count(*) from effects where owner = 'old'`,
				"retry rows":               `select count(*) from queue_group_retries where topic = 'fence'`,
				"failures":                 `select count(*) from queue_failures where queue = 'fence'`,
			} {
				if n := count(t, db, q); n != 0 {
					t.Errorf("%d %s after the old owner's chunk, want 0", n, what)
				}
			}

			s := <-sub
			if s == nil {
				t.FailNow()
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = s.Stop(ctx)
			})
			// Without the fence, the old owner's retry row outlives the new
			// owner's commit and is applied once more (loadRedriven).
			testwait.Until(t, 10*time.Second, "the new owner applied the record and committed it, with no retry left", func() bool {
				return count(t, db, `select committed from queue_group_offsets where topic = 'fence' and grp = 'g'`) == 1 &&
					count(t, db, `select count(*) from queue_group_retries where topic = 'fence'`) == 0
			}, func() string { return effectsOf(t, db) })
			if n, by := count(t, db, `select count(*) from effects`), count(t, db, `select count(*) from effects where owner = 'new'`); n != 1 || by != 1 {
				t.Errorf("the record took effect %d times (%d by the new owner), want once, by the new owner; effects: %s", n, by, effectsOf(t, db))
			}
		})
	}
}

func effectsOf(t *testing.T, db *store.DB) string {
	t.Helper()
	rows, err := db.Read.Query(`select log_offset, owner from effects`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			off int64
			who string
		)
		if err := rows.Scan(&off, &who); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d by %s", off, who))
	}
	return fmt.Sprint(out)
}
