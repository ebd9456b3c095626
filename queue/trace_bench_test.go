package queue_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
)

// BenchmarkTracingOverhead measures what traces cost the queue's
// send→handle→ack loop (BenchmarkThroughput's queue case: 16 parallel
// senders, one worker of concurrency 64, synchronous=FULL), as issue 19
// states its goal: each send starts a span of its own, so the message
// carries a traceparent and the worker's handling continues that trace.
// tracing=off is the default (no provider: the spans are no-ops);
// tracing=otlp samples every span and exports it over OTLP/HTTP to a local
// collector (telemetrytest.Collector, which decodes and counts them);
// tracing=otlp-sampled-tenth samples one trace in ten. Each
// round (SWITCHYARD_BENCH_ROUNDS, default 3) runs both, so each ratio is of
// one round.
//
//	go test -run '^$' -bench TracingOverhead -benchtime 40000x ./queue/
func BenchmarkTracingOverhead(b *testing.B) {
	for round := 1; round <= benchRounds(); round++ {
		b.Run(fmt.Sprintf("round=%d", round), func(b *testing.B) {
			var off float64
			b.Run("tracing=off", func(b *testing.B) {
				off = sendHandleAck(b)
			})
			b.Run("tracing=otlp-sampled-all", func(b *testing.B) {
				col := telemetrytest.NewCollector(b)
				rate := sendHandleAckExported(b, col, "always_on", "")
				if off > 0 {
					b.ReportMetric(rate/off, "x-tracing-off")
				}
				if col.Spans() == 0 {
					b.Fatal("the collector received no span: tracing was not on")
				}
				b.ReportMetric(float64(col.Spans())/float64(b.N), "spans/msg")
			})
			b.Run("tracing=otlp-sampled-tenth", func(b *testing.B) {
				col := telemetrytest.NewCollector(b)
				rate := sendHandleAckExported(b, col, "parentbased_traceidratio", "0.1")
				if off > 0 {
					b.ReportMetric(rate/off, "x-tracing-off")
				}
				b.ReportMetric(float64(col.Spans())/float64(b.N), "spans/msg")
			})
		})
	}
}

// sendHandleAckExported runs sendHandleAck with a provider that exports the
// spans sampler keeps to col over OTLP/HTTP, flushed before it returns.
func sendHandleAckExported(b *testing.B, col *telemetrytest.Collector, sampler, arg string) float64 {
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.URL)
	b.Setenv("OTEL_TRACES_SAMPLER", sampler)
	b.Setenv("OTEL_TRACES_SAMPLER_ARG", arg)
	tracing, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(k string) string {
		if k == "OTEL_TRACES_EXPORTER" {
			return telemetry.ExporterOTLP
		}
		return ""
	}})
	if err != nil {
		b.Fatal(err)
	}
	rate := sendHandleAck(b)
	if err := tracing.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	return rate
}

// benchRounds is how many rounds a same-run comparison runs, each side once
// a round, so that each ratio is of neighbours in time (-count would run
// every round of one side before the next side): SWITCHYARD_BENCH_ROUNDS,
// default 3.
func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("SWITCHYARD_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// sendHandleAck runs b.N messages through a queue, each sent inside a span
// of its own, and returns the rate.
func sendHandleAck(b *testing.B) float64 {
	db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
	q := queue.New(queue.NewOpts{DB: db, Name: "bench"})
	var handled atomic.Int64
	all := make(chan struct{})
	n := int64(b.N)
	w := q.Start(context.Background(), queue.WorkerOpts{Concurrency: 64, Handler: func(ctx context.Context, m queue.Message) error {
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	}})
	b.ResetTimer()
	b.SetParallelism(16)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, span := telemetry.Start(context.Background(), "bench.send")
			_, err := q.Send(ctx, queue.Message{Body: []byte("yo")})
			telemetry.End(span, err)
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	select {
	case <-all:
	case <-time.After(time.Minute):
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
