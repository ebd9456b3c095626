package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// The tests of this file are about concurrent transactions. On SQLite every
// write transaction runs alone (one writer), so they pass by construction;
// on PostgreSQL transactions run side by side, and these tests fail unless
// each read-then-write is made safe (row locks, SKIP LOCKED, atomic updates).

func TestConcurrentReceivers(t *testing.T) {
	t.Parallel()

	t.Run("eight workers receiving from one queue deliver each message exactly once", func(t *testing.T) {
		t.Parallel()
		const messages = 600
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		// The messages are all there before any worker starts, so that the
		// eight receive transactions compete for the same rows.
		for sent := 0; sent < messages; sent += 300 {
			if err := db.Tx(t.Context(), func(tx *sql.Tx) error {
				for i := sent; i < sent+300; i++ {
					if _, err := q.SendTx(t.Context(), tx, queue.Message{Body: fmt.Appendf(nil, "%d", i)}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu         sync.Mutex
			deliveries = map[queue.ID]int{}
			total      int
		)
		for range 8 {
			start(t, q, queue.WorkerOpts{Concurrency: 8, PollInterval: time.Hour, Handler: func(ctx context.Context, m queue.Message) error {
				mu.Lock()
				defer mu.Unlock()
				deliveries[m.ID]++
				total++
				return nil
			}})
		}
		testwait.Until(t, 30*time.Second, "every message handled and acknowledged", func() bool {
			return liveMessages(t, db, "q") == 0
		}, func() string { return fmt.Sprintf("%d live", liveMessages(t, db, "q")) })
		mu.Lock()
		defer mu.Unlock()
		dups := 0
		for _, n := range deliveries {
			dups += n - 1
		}
		if len(deliveries) != messages || dups != 0 {
			t.Errorf("%d deliveries of %d distinct messages (%d duplicates), want each of %d delivered once",
				total, len(deliveries), dups, messages)
		}
	})
}

func TestConcurrentOrderKey(t *testing.T) {
	t.Parallel()

	t.Run("eight senders starting one order key at once leave exactly one of its messages visible", func(t *testing.T) {
		t.Parallel()
		const (
			senders = 8
			keys    = 50
		)
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		for k := range keys {
			// The senders of a key start together, so that their first reads
			// of the key's slots overlap.
			var wg sync.WaitGroup
			begin := make(chan struct{})
			for s := range senders {
				wg.Go(func() {
					<-begin
					if _, err := q.Send(context.Background(), queue.Message{Body: fmt.Appendf(nil, "%d", s), OrderKey: fmt.Sprint(k)}); err != nil {
						t.Errorf("send %d to key %d: %v", s, k, err)
					}
				})
			}
			close(begin)
			wg.Wait()
		}
		// The first message of a key is its head, visible; every later one
		// is held behind it.
		if n := count(t, db, `select count(*) from goqite where queue = 'q'`); n != keys {
			t.Errorf("%d messages visible, want %d: one head for each of the %d keys", n, keys, keys)
		}
		if n := count(t, db, `select count(*) from queue_order where parked = 0`); n != keys {
			t.Errorf("%d order slots unparked, want %d", n, keys)
		}
	})

	t.Run("a send racing the acknowledgement of its key's last message is never stranded behind it", func(t *testing.T) {
		t.Parallel()
		const (
			keys   = 10
			rounds = 12
		)
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		handled := make([]chan int, keys)
		for k := range handled {
			handled[k] = make(chan int, rounds)
		}
		for range 2 {
			start(t, q, queue.WorkerOpts{Concurrency: 8, PollInterval: time.Hour, Handler: func(ctx context.Context, m queue.Message) error {
				var k, r int
				if _, err := fmt.Sscanf(string(m.Body), "%d %d", &k, &r); err != nil {
					return queue.Permanent(err)
				}
				handled[k] <- r
				return nil
			}})
		}
		// Each key's sender sends its next message the moment the handler
		// has the previous one, so the send runs while that message, the
		// key's last, is being acknowledged. The workers poll once an hour:
		// a message held behind a head that was acknowledged without
		// releasing it stays held for good.
		var wg sync.WaitGroup
		for k := range keys {
			wg.Go(func() {
				for r := range rounds {
					if _, err := q.Send(context.Background(), queue.Message{Body: fmt.Appendf(nil, "%d %d", k, r), OrderKey: fmt.Sprint(k)}); err != nil {
						t.Errorf("send %d to key %d: %v", r, k, err)
						return
					}
					select {
					case got := <-handled[k]:
						if got != r {
							t.Errorf("key %d: handled message %d, want %d", k, got, r)
							return
						}
					case <-time.After(10 * time.Second * testwait.Slack):
						t.Errorf("key %d: message %d not handled (%d messages held)", k, r,
							count(t, db, `select count(*) from goqite where queue = 'q~held'`))
						return
					}
				}
			})
		}
		wg.Wait()
		testwait.Until(t, 10*time.Second, "every message acknowledged", func() bool {
			return liveMessages(t, db, "q") == 0
		})
	})
}

func TestConcurrentRedrive(t *testing.T) {
	t.Parallel()

	t.Run("concurrent redrives and a purge of one dead-letter queue move each dead letter once", func(t *testing.T) {
		t.Parallel()
		const messages = 120
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		for i := range messages {
			if _, err := q.Send(t.Context(), queue.Message{Body: fmt.Appendf(nil, "%d", i), OrderKey: fmt.Sprint(i % 30)}); err != nil {
				t.Fatal(err)
			}
		}
		w := q.Start(t.Context(), queue.WorkerOpts{Handler: func(context.Context, queue.Message) error {
			return queue.Permanent(errors.New("bad"))
		}})
		testwait.Until(t, 30*time.Second, "every message dead", func() bool {
			return count(t, db, `select count(*) from queue_dead where queue = 'q'`) == messages
		})
		if err := w.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}

		var (
			wg      sync.WaitGroup
			moved   [4]int
			errs    [5]error
			purged  int
			begin   = make(chan struct{})
			options = queue.DeadFilter{Queue: "q"}
		)
		for i := range moved {
			wg.Go(func() {
				<-begin
				moved[i], errs[i] = admin.Redrive(t.Context(), options)
			})
		}
		wg.Go(func() {
			<-begin
			purged, errs[4] = admin.PurgeDead(t.Context(), options)
		})
		close(begin)
		wg.Wait()
		total := purged
		for i := range moved {
			total += moved[i]
		}
		for _, err := range errs {
			if err != nil {
				t.Errorf("redrive or purge failed: %v", err)
			}
		}
		live := liveMessages(t, db, "q")
		if total != messages || live != total-purged {
			t.Errorf("redriven %v and purged %d of %d dead letters, %d live: want each dead letter redriven or purged once, and the redriven ones live",
				moved, purged, messages, live)
		}
		if n := count(t, db, `select count(*) from queue_dead where queue = 'q'`); n != 0 {
			t.Errorf("%d dead letters left", n)
		}
	})
}

func TestConcurrentPublishers(t *testing.T) {
	t.Parallel()

	t.Run("concurrent publishers to one partition get distinct, gap-free offsets, and a group reading meanwhile skips none", func(t *testing.T) {
		t.Parallel()
		const (
			publishers = 8
			each       = 50
		)
		db := storetest.New(t)
		createEffects(t, db)
		topic := newTopic(t, db, "t", 1)
		// The group reads while the publishers write: a record committed
		// after a later offset was visible would be passed over.
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", PollInterval: time.Hour, Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			return record(ctx, tx, "g", r)
		}})
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			positions = map[int64]int{}
		)
		for p := range publishers {
			key := "k"
			wg.Go(func() {
				for i := range each {
					// Half of them inside a transaction of their own, which
					// holds the partition's next offset until it commits.
					value := fmt.Appendf(nil, "%s %d", key, p*each+i)
					if i%2 == 0 {
						pos, err := topic.Publish(context.Background(), key, value)
						if err != nil {
							t.Errorf("publish: %v", err)
							return
						}
						mu.Lock()
						positions[pos.Offset]++
						mu.Unlock()
						continue
					}
					if err := db.Tx(context.Background(), func(tx *sql.Tx) error {
						return topic.PublishTx(context.Background(), tx, key, value)
					}); err != nil {
						t.Errorf("publish in a transaction: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		for off, n := range positions {
			if n != 1 {
				t.Errorf("Publish returned offset %d %d times, want once", off, n)
			}
		}
		total := publishers * each
		if n := count(t, db, `select count(distinct log_offset) from queue_topic_log where topic = 't' and log_offset between 0 and ?`, total-1); n != total {
			t.Errorf("%d distinct offsets from 0 to %d, want all %d", n, total-1, total)
		}
		if n := count(t, db, `select count(*) from queue_topic_log where topic = 't'`); n != total {
			t.Errorf("%d records, want %d", n, total)
		}
		testwait.Until(t, 20*time.Second, "the group handled every record", func() bool {
			return count(t, db, `select count(*) from effects`) == publishers*each
		}, func() string { return fmt.Sprintf("%d handled", count(t, db, `select count(*) from effects`)) })
		if n := count(t, db, `select count(distinct seq) from effects`); n != publishers*each {
			t.Errorf("%d distinct records took effect, want %d, each once", n, publishers*each)
		}
	})
}

func TestConcurrentMultiPartitionPublishers(t *testing.T) {
	t.Parallel()

	t.Run("transactions publishing to many partitions in random order never deadlock, and leave dense offsets and every key in order", func(t *testing.T) {
		t.Parallel()
		const (
			publishers = 8
			txs        = 50
			keys       = 200
		)
		db := storetest.New(t)
		topics := []*queue.Topic{newTopic(t, db, "multi.a", 8), newTopic(t, db, "multi.b", 8)}
		seeds := make([]uint64, publishers) // drawn here: a rand.Rand is not for goroutines
		for i := range seeds {
			seeds[i] = rand.Uint64()
		}
		var wg sync.WaitGroup
		for p := range publishers {
			rng := rand.New(rand.NewPCG(seeds[p], 17))
			wg.Go(func() {
				for n := range txs {
					// 8 to 32 records over both topics' 16 partitions, in the
					// order the keys come: two such transactions lock their
					// partitions in different orders unless the topic sorts them.
					type rec struct {
						topic *queue.Topic
						key   string
					}
					recs := make([]rec, 8+rng.IntN(25))
					for i := range recs {
						recs[i] = rec{topics[rng.IntN(len(topics))], fmt.Sprint("k", rng.IntN(keys))}
					}
					err := db.Tx(context.Background(), func(tx *sql.Tx) error {
						for i, r := range recs {
							if err := r.topic.PublishTx(context.Background(), tx, r.key, fmt.Appendf(nil, "%s %d %d %d", r.key, p, n, i)); err != nil {
								return err
							}
						}
						return nil
					})
					if err != nil {
						t.Errorf("publisher %d, transaction %d: %v", p, n, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if r := db.TxRetries(); r.Deadlock != 0 {
			t.Errorf("%d transactions were run again after a deadlock (and %d after a serialization failure), want none", r.Deadlock, r.Serialization)
		}

		for _, topic := range topics {
			for part := range topic.Partitions() {
				end := count(t, db, `select next_offset from queue_topic_partitions where topic = ? and partition_id = ?`, topic.Name(), part)
				n := count(t, db, `select count(*) from queue_topic_log where topic = ? and partition_id = ? and log_offset between 0 and ?`, topic.Name(), part, end-1)
				all := count(t, db, `select count(*) from queue_topic_log where topic = ? and partition_id = ?`, topic.Name(), part)
				if n != end || all != end {
					t.Errorf("%s/%d: %d records below its end offset %d (%d in all), want one at each offset", topic.Name(), part, n, end, all)
				}
			}
			// Each key's records from one publisher are in the order it made
			// them: transaction after transaction, call after call.
			last := map[string][2]int{} // key and publisher → its last (transaction, call)
			for _, r := range readAll(t, topic) {
				var key string
				var p, n, i int
				if _, err := fmt.Sscanf(string(r.Value), "%s %d %d %d", &key, &p, &n, &i); err != nil || key != r.Key {
					t.Fatalf("record %d:%d holds %q (%v)", r.Partition, r.Offset, r.Value, err)
				}
				k := fmt.Sprint(key, "/", p)
				if prev, ok := last[k]; ok && (prev[0] > n || prev[0] == n && prev[1] >= i) {
					t.Errorf("%s: key %s of publisher %d: transaction %d call %d at %d:%d, after transaction %d call %d",
						topic.Name(), key, p, n, i, r.Partition, r.Offset, prev[0], prev[1])
				}
				last[k] = [2]int{n, i}
			}
		}
		if n := count(t, db, `select count(distinct value) from queue_topic_log`); n != count(t, db, `select count(*) from queue_topic_log`) {
			t.Errorf("%d distinct records of %d: a record was written twice", n, count(t, db, `select count(*) from queue_topic_log`))
		}
	})
}

// readAll reads topic's whole retained log, partition by partition, in
// offset order.
func readAll(t *testing.T, topic *queue.Topic) []queue.Record {
	t.Helper()
	var out []queue.Record
	for p := range topic.Partitions() {
		for from := int64(0); ; {
			recs, err := topic.Read(t.Context(), queue.ReadFilter{Partition: &p, FromOffset: from, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			out = append(out, recs...)
			from = recs[len(recs)-1].Offset + 1
		}
	}
	return out
}
