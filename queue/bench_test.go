package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"maragu.dev/goqite"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// BenchmarkThroughput measures, in one run and all at synchronous=FULL:
//
//	goqite:         goqite's own send→receive→delete loop, as in its benchmark
//	                (b.RunParallel, one transaction per call) — the baseline;
//	queue:          queue/ send→handle→ack end to end: parallel senders, one
//	                worker, batch receives and acknowledgements;
//	topic:          publish→consume: parallel publishers, one consumer group.
//
// Each reports msg/s; queue also reports its ratio to the goqite loop
// measured just before it (x-goqite). With SWITCHYARD_TEST_DB set, queue and
// topic run on PostgreSQL and the goqite loop is skipped: goqite runs its
// calls in SERIALIZABLE transactions it never retries, so there its parallel
// loop fails with serialization errors (and, now and then, receives nothing
// while a message is visible); River is the PostgreSQL baseline.
//
//	go test -run '^$' -bench BenchmarkThroughput -benchtime 3s ./queue/
func BenchmarkThroughput(b *testing.B) {
	var baseline float64

	b.Run("goqite", func(b *testing.B) {
		if storetest.Postgres() {
			b.Skip("goqite's loop is the SQLite baseline: on PostgreSQL its SERIALIZABLE transactions, never retried, fail under RunParallel")
		}
		db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
		q := goqite.New(goqite.NewOpts{DB: db.Write, Name: "bench"})
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if err := q.Send(ctx, goqite.Message{Body: []byte("yo")}); err != nil {
					b.Error(err)
					return
				}
				m, err := q.Receive(ctx)
				if err != nil || m == nil {
					b.Errorf("receive: %v, %v", m, err)
					return
				}
				if err := q.Delete(ctx, m.ID); err != nil {
					b.Error(err)
					return
				}
			}
		})
		baseline = float64(b.N) / b.Elapsed().Seconds()
		b.ReportMetric(baseline, "msg/s")
	})

	b.Run("queue", func(b *testing.B) {
		rate := sendHandleAck(b) // tracing off: its spans are no-ops
		if baseline > 0 {
			b.ReportMetric(rate/baseline, "x-goqite")
		}
	})

	b.Run("topic", func(b *testing.B) {
		db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
		topic, err := queue.NewTopic(context.Background(), queue.TopicOpts{DB: db, Name: "bench", Partitions: 6})
		if err != nil {
			b.Fatal(err)
		}
		var consumed atomic.Int64
		all := make(chan struct{})
		n := int64(b.N)
		sub, err := topic.Subscribe(context.Background(), queue.SubscribeOpts{Group: "bench", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			// Counted once committed: on PostgreSQL a transaction may run again.
			db.AfterCommit(tx, func() {
				if consumed.Add(1) == n {
					close(all)
				}
			})
			return nil
		}})
		if err != nil {
			b.Fatal(err)
		}
		var seq atomic.Int64
		b.ResetTimer()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := fmt.Sprintf("user-%d", seq.Add(1)%1000)
				if _, err := topic.Publish(context.Background(), key, []byte(`{"Version":1}`)); err != nil {
					b.Error(err)
					return
				}
			}
		})
		select {
		case <-all:
		case <-time.After(time.Minute):
			b.Fatalf("consumed %d of %d", consumed.Load(), n)
		}
		b.StopTimer()
		if err := sub.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	})
}

// BenchmarkPublish measures publishing alone: b.N records to a 6-partition
// topic that nobody consumes, from benchSenders goroutines, at
// synchronous=FULL, keyed user-0 … user-999 in turn (so a transaction's
// records spread over every partition):
//
//	one:                 Publish, a transaction per record;
//	tx=100/order=call:   PublishTx 100 times in one db.Tx, in the order the
//	                     records come;
//	tx=100/order=sorted: the same, sorted by partition by the caller first
//	                     (what callers had to do while a publish locked its
//	                     partition at the call: in call order, concurrent
//	                     transactions deadlocked on PostgreSQL);
//	batch=100, batch=500: PublishBatch (`switchyard publish` sends 500).
//
// It reports records/s and the transactions run again after a deadlock
// (deadlocks) or a serialization failure (serialization), both 0 when
// transactions take their partitions in one order.
//
//	SWITCHYARD_TEST_DB='postgres://…' go test -run '^$' -bench BenchmarkPublish -benchtime 20000x ./queue/
func BenchmarkPublish(b *testing.B) {
	key := func(n int) string { return "user-" + strconv.Itoa(n%1000) }
	cases := []struct {
		name  string
		batch int
		send  func(ctx context.Context, db *store.DB, topic *queue.Topic, first, count int) error
	}{
		{"one", 1, func(ctx context.Context, _ *store.DB, topic *queue.Topic, first, _ int) error {
			_, err := topic.Publish(ctx, key(first), benchBody(first))
			return err
		}},
		{"tx=100/order=call", 100, func(ctx context.Context, db *store.DB, topic *queue.Topic, first, count int) error {
			return publishTx(ctx, db, topic, key, first, count, false)
		}},
		{"tx=100/order=sorted", 100, func(ctx context.Context, db *store.DB, topic *queue.Topic, first, count int) error {
			return publishTx(ctx, db, topic, key, first, count, true)
		}},
		{"batch=100", 100, publishBatch(key)},
		{"batch=500", 500, publishBatch(key)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
			topic, err := queue.NewTopic(ctx, queue.TopicOpts{DB: db, Name: "bench", Partitions: 6})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			sendAll(b, b.N, c.batch, func(ctx context.Context, first, count int) error {
				return c.send(ctx, db, topic, first, count)
			})
			b.StopTimer()
			var n int
			if err := db.Read.QueryRow(`select count(*) from queue_topic_log`).Scan(&n); err != nil || n != b.N {
				b.Fatalf("%d records in the log (%v), want %d", n, err, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			r := db.TxRetries()
			b.ReportMetric(float64(r.Deadlock), "deadlocks")
			b.ReportMetric(float64(r.Serialization), "serialization")
		})
	}
}

// publishTx publishes records first … first+count-1 with PublishTx in one
// transaction, in their order or sorted by partition.
func publishTx(ctx context.Context, db *store.DB, topic *queue.Topic, key func(int) string, first, count int, sorted bool) error {
	nums := make([]int, count)
	for i := range nums {
		nums[i] = first + i
	}
	if sorted {
		slices.SortStableFunc(nums, func(x, y int) int {
			return queue.PartitionFor(key(x), topic.Partitions()) - queue.PartitionFor(key(y), topic.Partitions())
		})
	}
	return db.Tx(ctx, func(tx *sql.Tx) error {
		for _, n := range nums {
			if err := topic.PublishTx(ctx, tx, key(n), benchBody(n)); err != nil {
				return err
			}
		}
		return nil
	})
}

func publishBatch(key func(int) string) func(ctx context.Context, db *store.DB, topic *queue.Topic, first, count int) error {
	return func(ctx context.Context, _ *store.DB, topic *queue.Topic, first, count int) error {
		recs := make([]queue.KeyValue, count)
		for i := range recs {
			recs[i] = queue.KeyValue{Key: key(first + i), Value: benchBody(first + i)}
		}
		_, err := topic.PublishBatch(ctx, recs)
		return err
	}
}

// BenchmarkBroadcast measures what waking the other instances costs the
// senders on PostgreSQL: parallel sends to one queue, with a second instance
// on the database listening (its hub hears every broadcast and wakes its
// queue's signal), with broadcasts off (store.Options.BroadcastInterval < 0:
// the other instance would find the messages by polling) and on, in one run,
// in the order off, on, on, off so that a machine whose load drifts during
// the run favours neither. Each reports msg/s and the notifications it sent
// per second; the last reports the ratio of the two ons' rates to the two
// offs' (x-off).
//
//	SWITCHYARD_TEST_DB=postgres://… go test -run '^$' -bench BenchmarkBroadcast -benchtime 5s ./queue/
func BenchmarkBroadcast(b *testing.B) {
	if !storetest.Postgres() {
		b.Skip("broadcasts cross instances on PostgreSQL only; on SQLite they do nothing")
	}
	var rates [2]float64 // off, on
	for i, on := range []bool{false, true, true, false} {
		name := "off"
		interval := time.Duration(-1)
		if on {
			name, interval = "on", 0
		}
		b.Run(fmt.Sprintf("%d-%s", i+1, name), func(b *testing.B) {
			db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull, BroadcastInterval: interval})
			other, err := store.Open(context.Background(), store.Options{Path: db.Path()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = other.Close() })
			queue.New(queue.NewOpts{DB: other, Name: "bench"})
			q := queue.New(queue.NewOpts{DB: db, Name: "bench"})
			for other.BroadcastStats().Listens == 0 {
				time.Sleep(time.Millisecond)
			}
			b.ResetTimer()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := q.Send(context.Background(), queue.Message{Body: []byte("yo")}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "msg/s")
			b.ReportMetric(float64(db.BroadcastStats().Sent)/b.Elapsed().Seconds(), "notify/s")
			if on {
				rates[1] += rate
			} else {
				rates[0] += rate
			}
			if i == 3 && rates[0] > 0 {
				b.ReportMetric(rates[1]/rates[0], "x-off")
			}
		})
	}
}
