package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// BenchmarkFleet measures what several instances on one database cost in
// contention: the same load through 1 and through 3 handles of one database
// (each *store.DB is what one instance has: its own pools, its own group
// commit, its own in-process wake-ups; across handles they meet only in the
// database, as instances do). Senders are spread over the instances
// round-robin, and every instance runs a worker (queue) or a member of the
// consumer group (topic), so work sent through one instance is often done by
// another. On this 2-core machine more instances cannot add cores: the ratio
// of 3 to 1 is what their contention costs (the goal is ≥ 0.9×).
//
//	SWITCHYARD_TEST_DB=$PG go test -run '^$' -bench Fleet -benchtime 5000x ./queue/
func BenchmarkFleet(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("queue/instances=%d", n), func(b *testing.B) { benchFleetQueue(b, n) })
		b.Run(fmt.Sprintf("topic/instances=%d", n), func(b *testing.B) { benchFleetTopic(b, n) })
	}
}

// fleet opens n handles of one new, migrated database.
func fleet(b *testing.B, n int) []*store.DB {
	first := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
	dbs := []*store.DB{first}
	for range n - 1 {
		dbs = append(dbs, storetest.NewWith(b, store.Options{Path: first.Path(), Synchronous: store.SyncFull}))
	}
	return dbs
}

// sendersPerInstance keeps the offered concurrency the same whatever the
// instance count: 48 senders in all.
func sendersPerInstance(n int) int { return 48 / n }

func benchFleetQueue(b *testing.B, n int) {
	dbs := fleet(b, n)
	var handled atomic.Int64
	all := make(chan struct{})
	total := int64(b.N)
	var workers []*queue.Worker
	queues := make([]*queue.Queue, n)
	for i, db := range dbs {
		queues[i] = queue.New(queue.NewOpts{DB: db, Name: "fleet"})
		workers = append(workers, queues[i].Start(context.Background(), queue.WorkerOpts{
			Concurrency: 64 / n,
			Handler: func(ctx context.Context, m queue.Message) error {
				if handled.Add(1) == total {
					close(all)
				}
				return nil
			},
		}))
	}
	b.ResetTimer()
	runSenders(b, n, func(i int) error {
		_, err := queues[i%n].Send(context.Background(), queue.Message{Body: []byte("yo")})
		return err
	})
	waitAll(b, all, &handled)
	b.StopTimer()
	for _, w := range workers {
		if err := w.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	reportReruns(b, dbs)
}

func benchFleetTopic(b *testing.B, n int) {
	dbs := fleet(b, n)
	var consumed atomic.Int64
	all := make(chan struct{})
	total := int64(b.N)
	topics := make([]*queue.Topic, n)
	var subs []*queue.Subscription
	for i, db := range dbs {
		t, err := queue.NewTopic(context.Background(), queue.TopicOpts{DB: db, Name: "fleet", Partitions: 6})
		if err != nil {
			b.Fatal(err)
		}
		topics[i] = t
		sub, err := t.Subscribe(context.Background(), queue.SubscribeOpts{Group: "fleet", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			db.AfterCommit(tx, func() { // counted once committed
				if consumed.Add(1) == total {
					close(all)
				}
			})
			return nil
		}})
		if err != nil {
			b.Fatal(err)
		}
		subs = append(subs, sub)
	}
	var seq atomic.Int64
	b.ResetTimer()
	runSenders(b, n, func(i int) error {
		_, err := topics[i%n].Publish(context.Background(), fmt.Sprintf("user-%d", seq.Add(1)%1000), []byte(`{"Version":1}`))
		return err
	})
	waitAll(b, all, &consumed)
	b.StopTimer()
	for _, s := range subs {
		if err := s.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	reportReruns(b, dbs)
}

// reportReruns reports the transactions the instances ran again after a
// serialization failure or a deadlock (PostgreSQL): a storm of them would be
// contention turning into wasted work.
func reportReruns(b *testing.B, dbs []*store.DB) {
	var n int64
	for _, db := range dbs {
		r := db.TxRetries()
		n += r.Serialization + r.Deadlock
	}
	b.ReportMetric(float64(n), "reruns")
}

// runSenders makes b.N calls of send from 48 goroutines; goroutine i sends
// through instance i mod n.
func runSenders(b *testing.B, n int, send func(instance int) error) {
	var left atomic.Int64
	left.Store(int64(b.N))
	errs := make(chan error, 48)
	for g := range sendersPerInstance(n) * n {
		go func() {
			for left.Add(-1) >= 0 {
				if err := send(g); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range sendersPerInstance(n) * n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
}

func waitAll(b *testing.B, all <-chan struct{}, count *atomic.Int64) {
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d", count.Load(), b.N)
	}
}
