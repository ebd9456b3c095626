package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"switchyard/telemetry/telemetrytest"
)

// BenchmarkTracingOverhead measures what traces cost webhook ingest, as
// issue 19 states its goal: the load of BenchmarkWebhookLoopback (b.N
// business messages with unique update ids from `switchyard loadtest` in a
// process of its own, 64 connections, SQLite at synchronous=FULL) against
// `switchyard serve --roles inbound` with tracing off — the default — and
// then with every span sampled and exported over OTLP/HTTP to a local
// collector (telemetrytest.Collector, which decodes and counts what it gets),
// and with one trace in ten sampled (parentbased_traceidratio 0.1), as a
// busy deployment would.
// Each round (SWITCHYARD_BENCH_ROUNDS, default 3) runs every side once, so
// each ratio is of one round.
//
// With SWITCHYARD_BENCH_BEFORE_TRACING naming a binary built from the commit
// before tracing came in (2c42374^), a third case serves with that binary, so
// that the ratio of tracing off to no tracing at all is measured too:
//
//	git worktree add /tmp/before-tracing 2c42374^ && (cd /tmp/before-tracing && go build -o /tmp/switchyard-before .)
//	SWITCHYARD_BENCH_BEFORE_TRACING=/tmp/switchyard-before \
//	  go test -run '^$' -bench TracingOverhead -benchtime 40000x .
func BenchmarkTracingOverhead(b *testing.B) {
	bin := binary(b)
	secret, admin := randomHex(b, 32), randomHex(b, 32)
	env := []string{"SWITCHYARD_ADMIN_TOKEN=" + admin, "OMNI_WEBHOOK_SECRET=" + secret, "OTEL_TRACES_EXPORTER=none"}
	serve := func(b *testing.B, serveBin string, env []string) (loopbackResult, *process) {
		p := startServe(b, serveBin, env, "serve", "--db", filepath.Join(b.TempDir(), "inbound.db"),
			"--addr", "127.0.0.1:0", "--roles", "inbound", "--log-level", "error")
		cpu0 := procCPU(b, p.cmd.Process.Pid)
		r := runLoadtest(b, bin, env, p.base)
		r.serverCPU = procCPU(b, p.cmd.Process.Pid) - cpu0
		r.report(b)
		return r, p
	}

	before := os.Getenv("SWITCHYARD_BENCH_BEFORE_TRACING")
	for round := 1; round <= benchRounds(); round++ {
		b.Run(fmt.Sprintf("round=%d", round), func(b *testing.B) {
			var none, off loopbackResult
			if before != "" {
				b.Run("before-tracing", func(b *testing.B) { none, _ = serve(b, before, env) })
			}
			b.Run("tracing=off", func(b *testing.B) {
				off, _ = serve(b, bin, env)
				if none.rate > 0 {
					b.ReportMetric(off.rate/none.rate, "x-before-tracing")
				}
			})
			// exported serves with the spans sampler keeps exported to a
			// local collector; a stopped serve flushes its exporter, so then
			// the collector holds every span the run exported.
			exported := func(b *testing.B, sampler ...string) (loopbackResult, *telemetrytest.Collector) {
				col := telemetrytest.NewCollector(b)
				r, p := serve(b, bin, append(append(env, "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_ENDPOINT="+col.URL), sampler...))
				if off.rate > 0 {
					b.ReportMetric(r.rate/off.rate, "x-tracing-off")
				}
				stopProcess(b, p)
				b.ReportMetric(float64(col.Spans())/float64(r.accepted), "spans/req")
				return r, col
			}
			b.Run("tracing=otlp-sampled-all", func(b *testing.B) {
				if _, col := exported(b, "OTEL_TRACES_SAMPLER=always_on"); col.Spans() == 0 {
					b.Fatal("the collector received no span: tracing was not on")
				}
			})
			b.Run("tracing=otlp-sampled-tenth", func(b *testing.B) {
				exported(b, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.1")
			})
		})
	}
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

// stopProcess asks p to stop and waits up to 30 s for it to be gone (its
// startServe cleanup reaps it).
func stopProcess(b *testing.B, p *process) {
	b.Helper()
	pid := p.cmd.Process.Pid
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			b.Fatalf("serve %d did not stop within 30 s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
