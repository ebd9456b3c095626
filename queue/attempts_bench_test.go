package queue_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// BenchmarkAttemptHistory measures what the attempt history costs the
// queue's send→handle→ack loop (BenchmarkThroughput's queue case: 16
// parallel senders, one worker of concurrency 64, synchronous=FULL), each
// round (SWITCHYARD_BENCH_ROUNDS, default 3) running every side once so
// that each ratio is of neighbours in time:
//
//	history=default:        what ships — a first-try success writes no row,
//	                        only probes whether the message has a history
//	                        (a redrive);
//	history=every-success:  NewOpts.RecordSuccesses, a row per message;
//	fail-once=default:      every message fails once and then succeeds: a
//	                        retry row and a done row per message.
//
// The cost against the code before the history is measured by running
// BenchmarkThroughput/queue on both commits in turn (docs/benchmarks.md).
//
//	go test -run '^$' -bench AttemptHistory -benchtime 40000x ./queue/
func BenchmarkAttemptHistory(b *testing.B) {
	for round := 1; round <= benchRounds(); round++ {
		b.Run(fmt.Sprintf("round=%d", round), func(b *testing.B) {
			var base float64
			b.Run("history=default", func(b *testing.B) {
				base = sendHandleAckWith(b, queue.NewOpts{}, false)
			})
			b.Run("history=every-success", func(b *testing.B) {
				rate := sendHandleAckWith(b, queue.NewOpts{RecordSuccesses: true}, false)
				if base > 0 {
					b.ReportMetric(rate/base, "x-default")
				}
			})
			b.Run("fail-once=default", func(b *testing.B) {
				rate := sendHandleAckWith(b, queue.NewOpts{}, true)
				if base > 0 {
					b.ReportMetric(rate/base, "x-default")
				}
			})
		})
	}
}

// sendHandleAckWith runs b.N messages through a queue made with opts (DB
// and Name set here), each failing its first attempt when failOnce, and
// returns the rate.
func sendHandleAckWith(b *testing.B, opts queue.NewOpts, failOnce bool) float64 {
	db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
	opts.DB, opts.Name = db, "bench"
	opts.Retry = queue.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}
	q := queue.New(opts)
	var handled atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	w := q.Start(context.Background(), queue.WorkerOpts{Concurrency: 64, Handler: func(ctx context.Context, m queue.Message) error {
		if failOnce && m.Attempt == 1 {
			return errBench
		}
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	}})
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
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	b.StopTimer()
	if err := w.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "msg/s")
	return rate
}

var errBench = benchError("the first attempt fails")

type benchError string

func (e benchError) Error() string { return string(e) }
