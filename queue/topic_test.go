package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

func newTopic(t testing.TB, db *store.DB, name string, partitions int) *queue.Topic {
	t.Helper()
	topic, err := queue.NewTopic(context.Background(), queue.TopicOpts{DB: db, Name: name, Partitions: partitions})
	if err != nil {
		t.Fatalf("NewTopic: %v", err)
	}
	return topic
}

func subscribe(t testing.TB, topic *queue.Topic, opts queue.SubscribeOpts) *queue.Subscription {
	t.Helper()
	if opts.PollInterval == 0 {
		opts.PollInterval = 50 * time.Millisecond // sends wake subscribers; polls only see the clock move
	}
	s, err := topic.Subscribe(context.Background(), opts)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// effects is a table the handlers write in their transaction; its ids,
// which the database assigns (SQLite's rowid, PostgreSQL's identity), give
// the order of the inserts, and so the commit order of the transactions of
// one partition, which never run at once.
func createEffects(t testing.TB, db *store.DB) {
	t.Helper()
	id := `id integer primary key`
	if db.Postgres() {
		id = `id bigint generated always as identity primary key`
	}
	mustExec(t, db, `create table effects (`+id+`, grp text not null, key text not null, seq integer not null)`)
}

func effectSeqs(t testing.TB, db *store.DB, grp, key string) []int {
	t.Helper()
	rows, err := db.Read.Query(`select seq from effects where grp = ? and key = ? order by id`, grp, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seqs []int
	for rows.Next() {
		var s int
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	return seqs
}

func record(ctx context.Context, tx *sql.Tx, grp string, r queue.Record) error {
	var key string
	var seq int
	if _, err := fmt.Sscanf(string(r.Value), "%s %d", &key, &seq); err != nil {
		return queue.Permanent(err)
	}
	if key != r.Key {
		return queue.Permanent(fmt.Errorf("record key %q, value key %q", r.Key, key))
	}
	_, err := tx.ExecContext(ctx, `insert into effects (grp, key, seq) values (?, ?, ?)`, grp, key, seq)
	return err
}

// TestTopicOrder is the model test of per-key order on a topic: 20 keys ×
// 200 records, 4 partitions in flight, 30% random retryable failures, and
// one key stuck in retry that must not delay the others — not even those in
// its own partition.
func TestTopicOrder(t *testing.T) {
	t.Parallel()
	const (
		keys     = 20
		perKey   = 200
		stuckKey = "user-00"
	)
	db := storetest.New(t)
	createEffects(t, db)
	topic := newTopic(t, db, "pin.identity.users.v1", 6)
	var (
		stuck  atomic.Bool
		failed atomic.Int64
	)
	stuck.Store(true)
	subscribe(t, topic, queue.SubscribeOpts{
		Group:       "referral-identity-users",
		Concurrency: 4,
		Retry:       queue.RetryPolicy{MaxAttempts: 100000, MinBackoff: time.Millisecond, MaxBackoff: 3 * time.Millisecond},
		Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			if r.Key == stuckKey && stuck.Load() {
				return queue.RetryAfter(50*time.Millisecond, errors.New("owner replica missing"))
			}
			if rand.N(10) < 3 {
				failed.Add(1)
				return errors.New("transient")
			}
			return record(ctx, tx, "g", r)
		},
	})
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("user-%02d", k)
		wg.Go(func() {
			for i := range perKey {
				if _, err := topic.Publish(context.Background(), key, fmt.Appendf(nil, "%s %d", key, i)); err != nil {
					t.Errorf("publish %s %d: %v", key, i, err)
					return
				}
			}
		})
	}
	wg.Wait()

	testwait.Until(t, 60*time.Second, "every key but the stuck one handled", func() bool {
		return count(t, db, `select count(*) from effects where key <> ?`, stuckKey) == (keys-1)*perKey
	})
	if n := len(effectSeqs(t, db, "g", stuckKey)); n != 0 {
		t.Errorf("the stuck key had %d records take effect past its stuck head", n)
	}
	stuckPartition := queue.PartitionFor(stuckKey, 6)
	sharing := 0
	for k := 1; k < keys; k++ {
		if queue.PartitionFor(fmt.Sprintf("user-%02d", k), 6) == stuckPartition {
			sharing++
		}
	}
	if sharing == 0 {
		t.Fatal("no other key shares the stuck key's partition; the test would not show keys flowing past it")
	}

	stuck.Store(false)
	testwait.Until(t, 60*time.Second, "the stuck key handled once released", func() bool {
		return count(t, db, `select count(*) from effects`) >= keys*perKey
	})
	for k := range keys {
		key := fmt.Sprintf("user-%02d", k)
		seqs := effectSeqs(t, db, "g", key)
		if len(seqs) != perKey {
			t.Errorf("%s: %d records took effect, want %d (exactly once each)", key, len(seqs), perKey)
		}
		for i, s := range seqs {
			if s != i {
				t.Errorf("%s: position %d is record %d: out of publish order", key, i, s)
				break
			}
		}
	}
	if failed.Load() == 0 {
		t.Error("no random failures happened; the test proves nothing about retries")
	}
	testwait.Until(t, 5*time.Second, "the group caught up", func() bool {
		st, err := queue.NewAdmin(queue.AdminOpts{DB: db}).Stats(context.Background())
		return err == nil && len(st.Topics) == 1 && st.Topics[0].Groups[0].Lag == 0 && st.Topics[0].Groups[0].Retrying == 0
	})
}

func TestReplay(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	createEffects(t, db)
	topic := newTopic(t, db, "pin.identity.users.v1", 6)
	for i := range 300 {
		key := fmt.Sprintf("user-%02d", i%30)
		if _, err := topic.Publish(t.Context(), key, fmt.Appendf(nil, "%s %d", key, i/30)); err != nil {
			t.Fatal(err)
		}
	}
	// Group a consumes everything first.
	subscribe(t, topic, queue.SubscribeOpts{Group: "a", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
		return record(ctx, tx, "a", r)
	}})
	testwait.Until(t, 10*time.Second, "group a done", func() bool { return count(t, db, `select count(*) from effects where grp = 'a'`) == 300 })

	t.Run("a new group reading from the beginning sees every retained record in per-partition order", func(t *testing.T) {
		var (
			mu   sync.Mutex
			seen = map[int][]int64{}
		)
		subscribe(t, topic, queue.SubscribeOpts{Group: "b", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			mu.Lock()
			seen[r.Partition] = append(seen[r.Partition], r.Offset)
			mu.Unlock()
			return record(ctx, tx, "b", r)
		}})
		testwait.Until(t, 10*time.Second, "group b done", func() bool { return count(t, db, `select count(*) from effects where grp = 'b'`) == 300 })
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for p, offs := range seen {
			for i, off := range offs {
				if off != int64(i) {
					t.Errorf("partition %d: record %d has offset %d; want every offset in order", p, i, off)
					break
				}
			}
			total += len(offs)
		}
		if total != 300 {
			t.Errorf("group b saw %d records, want 300", total)
		}
	})

	t.Run("a group starting at the end sees only later records", func(t *testing.T) {
		got := make(chan string, 10)
		subscribe(t, topic, queue.SubscribeOpts{Group: "late", Start: queue.StartLatest, Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			got <- string(r.Value)
			return nil
		}})
		testwait.Until(t, 5*time.Second, "group late created", func() bool {
			return count(t, db, `select count(*) from queue_groups where grp = 'late'`) == 1
		})
		if _, err := topic.Publish(t.Context(), "user-99", []byte("new")); err != nil {
			t.Fatal(err)
		}
		select {
		case v := <-got:
			if v != "new" {
				t.Errorf("group late got %q first, want only the new record", v)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("group late did not get the new record")
		}
	})

	t.Run("reading the log sees every record without moving any group", func(t *testing.T) {
		p := queue.PartitionFor("user-07", 6)
		recs, err := topic.Read(t.Context(), queue.ReadFilter{Partition: &p, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for i, r := range recs {
			if r.Offset != int64(i) || r.Partition != p {
				t.Fatalf("record %d at %d:%d; want dense offsets of partition %d", i, r.Partition, r.Offset, p)
			}
			if r.Key == "user-07" {
				mine = append(mine, string(r.Value))
			}
		}
		if len(mine) != 10 || mine[0] != "user-07 0" || mine[9] != "user-07 9" {
			t.Errorf("user-07's records: %v; want its 10 in publish order", mine)
		}
	})

	t.Run("seeking a group replays from the offset", func(t *testing.T) {
		ctx := t.Context()
		if err := topic.SeekGroup(ctx, "a", map[int]int64{0: 0}); !errors.Is(err, queue.ErrGroupActive) {
			t.Fatalf("SeekGroup on a running group = %v, want ErrGroupActive", err)
		}
		if err := topic.SeekGroup(ctx, "nobody", map[int]int64{0: 0}); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("SeekGroup on an unknown group = %v, want ErrNotFound", err)
		}
		if _, err := topic.Subscribe(ctx, queue.SubscribeOpts{Group: "c", Start: queue.StartLatest, Handler: func(context.Context, *sql.Tx, queue.Record) error { return nil }}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSeekGroup(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	createEffects(t, db)
	topic := newTopic(t, db, "t", 1)
	for i := range 10 {
		if _, err := topic.Publish(t.Context(), "k", fmt.Appendf(nil, "k %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	handler := func(ctx context.Context, tx *sql.Tx, r queue.Record) error { return record(ctx, tx, "g", r) }
	s := subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: handler})
	testwait.Until(t, 5*time.Second, "all handled", func() bool { return count(t, db, `select count(*) from effects`) == 10 })
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := topic.SeekGroup(t.Context(), "g", map[int]int64{0: 7}); err != nil {
		t.Fatalf("SeekGroup: %v", err)
	}
	subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: handler})
	testwait.Until(t, 5*time.Second, "records 7..9 handled again", func() bool { return count(t, db, `select count(*) from effects`) == 13 })
	seqs := effectSeqs(t, db, "g", "k")
	if fmt.Sprint(seqs[10:]) != "[7 8 9]" {
		t.Errorf("after seeking to 7 the group handled %v, want [7 8 9]", seqs[10:])
	}
}

func TestTopicDeadLetters(t *testing.T) {
	t.Parallel()

	t.Run("a permanent error dead-letters on the first attempt and later records of the key flow", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		createEffects(t, db)
		topic := newTopic(t, db, "t", 3)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			if strings.HasSuffix(string(r.Value), " 0") {
				return queue.Permanent(errors.New("UserId is Guid.Empty"))
			}
			return record(ctx, tx, "g", r)
		}})
		for i := range 3 {
			if _, err := topic.Publish(t.Context(), "k", fmt.Appendf(nil, "k %d", i)); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 5*time.Second, "records 1 and 2 handled", func() bool { return len(effectSeqs(t, db, "g", "k")) == 2 })
		dead, err := admin.ListDead(t.Context(), queue.DeadFilter{Queue: "t", Group: "g"})
		if err != nil || len(dead) != 1 {
			t.Fatalf("dead letters %+v, %v; want 1", dead, err)
		}
		d := dead[0]
		if d.Attempts != 1 || *d.Offset != 0 || d.Key != "k" || string(d.Body) != "k 0" || !strings.Contains(d.LastError, "Guid.Empty") {
			t.Errorf("dead letter %+v: want record 0 after 1 attempt with its error", d)
		}
		st, _ := admin.Stats(t.Context())
		if g := st.Topics[0].Groups[0]; g.Lag != 0 || g.Dead != 1 {
			t.Errorf("group stats %+v: a dead letter is finished (lag 0) and counted (dead 1)", g)
		}
	})

	t.Run("a retryable error dead-letters after the maximum attempts", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 1)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var calls atomic.Int32
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Retry: queue.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
			Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
				calls.Add(1)
				return fmt.Errorf("REFERRAL_OWNER_REPLICA_MISSING on attempt %d", r.Attempt)
			}})
		if _, err := topic.Publish(t.Context(), "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		var dead []queue.DeadLetter
		testwait.Until(t, 5*time.Second, "a dead letter", func() bool {
			dead, _ = admin.ListDead(t.Context(), queue.DeadFilter{Queue: "t", Group: "g"})
			return len(dead) == 1
		})
		if dead[0].Attempts != 3 || !strings.Contains(dead[0].LastError, "attempt 3") || calls.Load() != 3 {
			t.Errorf("dead after %d attempts (%d calls): %q", dead[0].Attempts, calls.Load(), dead[0].LastError)
		}
		if n := count(t, db, `select count(*) from queue_failures where queue = 't' and grp = 'g' and message_id = '0:0'`); n != 3 {
			t.Errorf("%d failure records, want 3", n)
		}
	})

	t.Run("a redriven record goes before later records of its key that are still held back", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		createEffects(t, db)
		topic := newTopic(t, db, "t", 1)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var (
			mu   sync.Mutex
			bad  = map[string]bool{"k 0": true}
			slow = map[string]bool{"k 1": true}
		)
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", LeaseTTL: time.Hour, Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case bad[string(r.Value)]:
				return queue.Permanent(errors.New("bad"))
			case slow[string(r.Value)]:
				return queue.RetryAfter(time.Minute, errors.New("not yet"))
			}
			return record(ctx, tx, "g", r)
		}})
		for i := range 3 {
			if _, err := topic.Publish(t.Context(), "k", fmt.Appendf(nil, "k %d", i)); err != nil {
				t.Fatal(err)
			}
		}
		// k 0 dies; k 1 waits a minute (by the store's clock, which stands
		// still); k 2 is held back behind it.
		testwait.Until(t, 5*time.Second, "k 0 dead and k 1 waiting", func() bool {
			return count(t, db, `select count(*) from queue_dead`) == 1 &&
				count(t, db, `select count(*) from queue_group_retries where attempts = 1`) == 1
		})
		mu.Lock()
		bad, slow = map[string]bool{}, map[string]bool{}
		mu.Unlock()
		if n, err := admin.Redrive(t.Context(), queue.DeadFilter{Queue: "t", Group: "g"}); err != nil || n != 1 {
			t.Fatalf("Redrive = %d, %v", n, err)
		}
		testwait.Until(t, 5*time.Second, "the redriven k 0 handled while k 1 still waits", func() bool {
			return len(effectSeqs(t, db, "g", "k")) == 1
		})
		clock.Advance(time.Minute)
		testwait.Until(t, 5*time.Second, "k 1 and k 2 handled", func() bool { return len(effectSeqs(t, db, "g", "k")) == 3 })
		if got := fmt.Sprint(effectSeqs(t, db, "g", "k")); got != "[0 1 2]" {
			t.Errorf("handled %s, want [0 1 2]: the redriven record first", got)
		}
	})

	t.Run("a record redriven after later records of its key were handled is handled last", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		createEffects(t, db)
		topic := newTopic(t, db, "t", 2)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var fixed atomic.Bool
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			if string(r.Value) == "k 0" && !fixed.Load() {
				return queue.Permanent(errors.New("bad"))
			}
			return record(ctx, tx, "g", r)
		}})
		for i := range 3 {
			if _, err := topic.Publish(t.Context(), "k", fmt.Appendf(nil, "k %d", i)); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 5*time.Second, "k 1 and k 2 handled", func() bool { return len(effectSeqs(t, db, "g", "k")) == 2 })
		fixed.Store(true)
		dead, _ := admin.ListDead(t.Context(), queue.DeadFilter{Queue: "t", Group: "g"})
		if len(dead) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dead))
		}
		if _, err := admin.Redrive(t.Context(), queue.DeadFilter{Queue: "t", Group: "g", ID: dead[0].ID}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "k 0 handled after redrive", func() bool { return len(effectSeqs(t, db, "g", "k")) == 3 })
		if got := fmt.Sprint(effectSeqs(t, db, "g", "k")); got != "[1 2 0]" {
			t.Errorf("handled %s, want [1 2 0]: later records stay handled, the redriven one comes last", got)
		}
		st, _ := admin.Stats(t.Context())
		if g := st.Topics[0].Groups[0]; g.Lag != 0 || g.Dead != 0 || g.Retrying != 0 {
			t.Errorf("group stats after redrive %+v, want caught up", g)
		}
	})
}

func TestTopicOwnership(t *testing.T) {
	t.Parallel()

	t.Run("a restarted subscriber continues from the committed offsets, each record taking effect once", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		createEffects(t, db)
		topic := newTopic(t, db, "t", 3)
		handler := func(ctx context.Context, tx *sql.Tx, r queue.Record) error { return record(ctx, tx, "g", r) }
		publish := func(from, to int) {
			for i := from; i < to; i++ {
				key := fmt.Sprintf("k%d", i%7)
				if _, err := topic.Publish(t.Context(), key, fmt.Appendf(nil, "%s %d", key, i)); err != nil {
					t.Fatal(err)
				}
			}
		}
		publish(0, 100)
		s := subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: handler})
		testwait.Until(t, 5*time.Second, "the first 100", func() bool { return count(t, db, `select count(*) from effects`) == 100 })
		if err := s.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		publish(100, 200)
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: handler})
		testwait.Until(t, 5*time.Second, "all 200", func() bool { return count(t, db, `select count(*) from effects`) == 200 })
		if n := count(t, db, `select count(*) from (select distinct seq from effects) as handled`); n != 200 {
			t.Errorf("%d distinct records took effect, want 200", n)
		}
	})

	t.Run("a second subscriber of the group takes half of the partitions, and all of them when the first stops", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		createEffects(t, db)
		topic := newTopic(t, db, "t", 2)
		var first, second atomic.Int32
		h := func(n *atomic.Int32) queue.RecordHandlerFunc {
			return func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
				n.Add(1)
				return record(ctx, tx, "g", r)
			}
		}
		owners := func() map[string]int {
			rows, err := db.Read.Query(`select owner from store_leases where name like 'queue.group/t/g/%'`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			held := map[string]int{}
			for rows.Next() {
				var o string
				if err := rows.Scan(&o); err != nil {
					t.Fatal(err)
				}
				held[o]++
			}
			return held
		}
		a := subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: h(&first)})
		testwait.Until(t, 5*time.Second, "the first subscriber owns both partitions", func() bool {
			o := owners()
			return len(o) == 1 && count(t, db, `select count(*) from store_leases where name like 'queue.group/t/g/%'`) == 2
		}, func() string { return fmt.Sprint(owners()) })
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: h(&second)})
		testwait.Until(t, 5*time.Second, "each subscriber owns one partition", func() bool {
			o := owners()
			return len(o) == 2 && count(t, db, `select count(*) from store_leases where name like 'queue.group/t/g/%'`) == 2
		}, func() string { return fmt.Sprint(owners()) })
		for i := range 20 {
			if _, err := topic.Publish(t.Context(), fmt.Sprintf("k%d", i%4), fmt.Appendf(nil, "k%d %d", i%4, i)); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 5*time.Second, "20 handled", func() bool { return count(t, db, `select count(*) from effects`) == 20 })
		if first.Load() == 0 || second.Load() == 0 || first.Load()+second.Load() != 20 {
			t.Errorf("first handled %d, second %d; want both some of the 20", first.Load(), second.Load())
		}
		if err := a.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		before := second.Load()
		for i := 20; i < 40; i++ {
			if _, err := topic.Publish(t.Context(), fmt.Sprintf("k%d", i%4), fmt.Appendf(nil, "k%d %d", i%4, i)); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 5*time.Second, "the second handles the rest", func() bool { return count(t, db, `select count(*) from effects`) == 40 })
		if second.Load()-before != 20 {
			t.Errorf("after the first stopped, the second handled %d of 20", second.Load()-before)
		}
		if n := count(t, db, `select count(*) from (select distinct seq from effects) as handled`); n != 40 {
			t.Errorf("%d distinct records took effect, want 40", n)
		}
	})
}

func TestPublish(t *testing.T) {
	t.Parallel()

	t.Run("records go to the key's partition with dense offsets", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 6)
		next := map[int]int64{}
		for i := range 50 {
			key := fmt.Sprintf("u%d", i%9)
			pos, err := topic.Publish(t.Context(), key, []byte("v"))
			if err != nil {
				t.Fatal(err)
			}
			if pos.Partition != queue.PartitionFor(key, 6) || pos.Offset != next[pos.Partition] {
				t.Fatalf("%s went to %+v, want partition %d offset %d", key, pos, queue.PartitionFor(key, 6), next[pos.Partition])
			}
			next[pos.Partition]++
		}
		if _, err := topic.Publish(t.Context(), "", []byte("v")); err == nil {
			t.Error("publish without a key accepted")
		}
	})

	t.Run("PublishBatch commits its records at once and returns where each went, every key's in the order given", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 6)
		if _, err := topic.Publish(t.Context(), "u3", []byte("first")); err != nil {
			t.Fatal(err)
		}
		next := map[int]int64{queue.PartitionFor("u3", 6): 1}
		var recs []queue.KeyValue
		for i := range 500 {
			recs = append(recs, queue.KeyValue{Key: fmt.Sprintf("u%d", (i*7)%13), Value: fmt.Appendf(nil, "%d", i)})
		}
		positions, err := topic.PublishBatch(t.Context(), recs)
		if err != nil || len(positions) != len(recs) {
			t.Fatalf("PublishBatch = %d positions, %v; want %d", len(positions), err, len(recs))
		}
		for i, pos := range positions {
			p := queue.PartitionFor(recs[i].Key, 6)
			if pos.Partition != p || pos.Offset != next[p] {
				t.Fatalf("record %d (%s) went to %+v, want partition %d offset %d", i, recs[i].Key, pos, p, next[p])
			}
			next[p]++
			got, err := topic.Read(t.Context(), queue.ReadFilter{Partition: &pos.Partition, FromOffset: pos.Offset, Limit: 1})
			if err != nil || len(got) != 1 || got[0].Key != recs[i].Key || string(got[0].Value) != string(recs[i].Value) {
				t.Fatalf("record %d: the log holds %+v at %+v (%v)", i, got, pos, err)
			}
		}

		_, err = topic.PublishBatch(t.Context(), []queue.KeyValue{{Key: "u1", Value: []byte("x")}, {Key: "", Value: []byte("y")}})
		if err == nil || !strings.Contains(err.Error(), "record 1: empty key") {
			t.Errorf("a batch with an empty key: %v, want it refused, naming the record", err)
		}
		if n := count(t, db, `select count(*) from queue_topic_log where topic = 't'`); n != 501 {
			t.Errorf("%d records after the refused batch, want 501: none of it", n)
		}
	})

	t.Run("records of several topics published in one transaction commit with it and keep each key's order", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		a, b := newTopic(t, db, "a", 3), newTopic(t, db, "b", 3)
		err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			for i := range 30 {
				topic := []*queue.Topic{b, a}[i%2]
				if err := topic.PublishTx(t.Context(), tx, fmt.Sprint("k", i%5), fmt.Appendf(nil, "%d", i)); err != nil {
					return err
				}
			}
			// Nothing is written before the commit is near.
			if n := countTx(t, tx, `select count(*) from queue_topic_log`); n != 0 {
				t.Errorf("%d records written while the transaction function ran, want them staged", n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, topic := range []*queue.Topic{a, b} {
			last := map[string]int{}
			n := 0
			for _, r := range readAll(t, topic) {
				var i int
				fmt.Sscan(string(r.Value), &i)
				if prev, ok := last[r.Key]; ok && prev >= i {
					t.Errorf("%s: key %s has %d after %d", topic.Name(), r.Key, i, prev)
				}
				last[r.Key] = i
				n++
			}
			if n != 15 {
				t.Errorf("%s has %d records, want 15", topic.Name(), n)
			}
		}
	})

	t.Run("a publish by a before-commit function that runs after the records were written is written too", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 2)
		err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			if err := topic.PublishTx(t.Context(), tx, "a", []byte("in the function")); err != nil {
				return err
			}
			db.BeforeCommit(tx, func(ctx context.Context) error {
				return topic.PublishTx(ctx, tx, "b", []byte("before the commit"))
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `select count(*) from queue_topic_log where topic = 't'`); n != 2 {
			t.Errorf("%d records committed, want both", n)
		}
	})

	t.Run("a record holds the value as it was at the call, though the caller reuses its buffer before the commit", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 1)
		err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			buf := []byte("first")
			if err := topic.PublishTx(t.Context(), tx, "k", buf); err != nil {
				return err
			}
			copy(buf, "XXXXX")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		recs, err := topic.Read(t.Context(), queue.ReadFilter{})
		if err != nil || len(recs) != 1 || string(recs[0].Value) != "first" {
			t.Errorf("the log holds %+v (%v), want the value as published", recs, err)
		}
	})

	t.Run("a publish in a transaction that Tx did not begin is written at once", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 1)
		tx, err := db.Write.BeginTx(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if err := topic.PublishTx(t.Context(), tx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if n := countTx(t, tx, `select count(*) from queue_topic_log`); n != 1 {
			t.Errorf("%d records in the transaction, want the one published", n)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, `select count(*) from queue_topic_log`); n != 1 {
			t.Errorf("%d records committed, want 1", n)
		}
	})

	t.Run("a publish in a rolled-back transaction takes no record and no offset", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 1)
		boom := errors.New("boom")
		err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			if err := topic.PublishTx(t.Context(), tx, "k", []byte("lost")); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		pos, err := topic.Publish(t.Context(), "k", []byte("kept"))
		if err != nil || pos.Offset != 0 {
			t.Errorf("next publish at %+v, %v; want offset 0", pos, err)
		}
	})

	t.Run("a handler publishing inside its transaction wakes the next group", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		in := newTopic(t, db, "in", 2)
		out := newTopic(t, db, "out", 2)
		got := make(chan string, 1)
		subscribe(t, in, queue.SubscribeOpts{Group: "relay", PollInterval: time.Hour, Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			err := out.PublishTx(ctx, tx, r.Key, append([]byte("relayed "), r.Value...))
			return err
		}})
		subscribe(t, out, queue.SubscribeOpts{Group: "sink", PollInterval: time.Hour, Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			got <- string(r.Value)
			return nil
		}})
		testwait.Until(t, 5*time.Second, "both groups own their partitions", func() bool {
			return count(t, db, `select count(*) from store_leases where name like 'queue.group/%'`) == 4
		})
		if _, err := in.Publish(t.Context(), "k", []byte("hello")); err != nil {
			t.Fatal(err)
		}
		select {
		case v := <-got:
			if v != "relayed hello" {
				t.Errorf("sink got %q", v)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the record published inside the relay's transaction did not wake the sink (polls are an hour apart)")
		}
	})

	t.Run("two groups on one topic both get every record at once, without polling", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 3)
		got := map[string]chan string{"a": make(chan string, 10), "b": make(chan string, 10)}
		for g, ch := range got {
			subscribe(t, topic, queue.SubscribeOpts{Group: g, PollInterval: time.Hour, Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
				ch <- string(r.Value)
				return nil
			}})
		}
		testwait.Until(t, 5*time.Second, "both groups own their partitions", func() bool {
			return count(t, db, `select count(*) from store_leases where name like 'queue.group/%'`) == 6
		})
		for i := range 5 {
			if _, err := topic.Publish(t.Context(), fmt.Sprintf("k%d", i), fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		for g, ch := range got {
			seen := map[string]bool{}
			for range 5 {
				select {
				case v := <-ch:
					seen[v] = true
				case <-time.After(5 * time.Second):
					t.Fatalf("group %s got %d of 5 records (polls are an hour apart)", g, len(seen))
				}
			}
			if len(seen) != 5 {
				t.Errorf("group %s got %v, want all 5", g, seen)
			}
		}
	})

	t.Run("declaring a topic again with another partition count fails", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		newTopic(t, db, "t", 6)
		if _, err := queue.NewTopic(t.Context(), queue.TopicOpts{DB: db, Name: "t", Partitions: 3}); !errors.Is(err, queue.ErrTopicMismatch) {
			t.Errorf("NewTopic = %v, want ErrTopicMismatch", err)
		}
		if _, err := queue.NewTopic(t.Context(), queue.TopicOpts{DB: db, Name: "t", Partitions: 6}); err != nil {
			t.Errorf("declaring it again as it is: %v", err)
		}
	})
}

func TestLagGauge(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	name := fmt.Sprintf("lag.gauge.%d", time.Now().UnixNano()) // the registry is global
	topic := newTopic(t, db, name, 1)
	var release atomic.Bool
	subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
		if !release.Load() {
			return queue.RetryAfter(time.Millisecond, errors.New("not yet"))
		}
		return nil
	}, Retry: queue.RetryPolicy{MaxAttempts: 1000000}})
	for i := range 5 {
		if _, err := topic.Publish(t.Context(), "k", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 5*time.Second, "lag gauge at 5", func() bool {
		return metricValue(t, "switchyard_queue_topic_lag_messages", map[string]string{"topic": name, "group": "g", "partition": "0"}) == 5
	})
	release.Store(true)
	testwait.Until(t, 5*time.Second, "lag gauge back to 0", func() bool {
		return metricValue(t, "switchyard_queue_topic_lag_messages", map[string]string{"topic": name, "group": "g", "partition": "0"}) == 0
	})
}

// countTx is count inside tx.
func countTx(t testing.TB, tx *sql.Tx, query string, args ...any) int {
	t.Helper()
	var n int
	if err := tx.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
