package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

// BenchmarkWebhookLoopback measures webhook ingest as issue 18 states its
// goal: `switchyard loadtest --paths webhook` in a process of its own posts
// b.N Telegram Business messages with unique update ids over 64 loopback
// connections, first to the baseline — a minimal receiver that decodes each
// body and inserts one row through the store's group commit (store.DB.Tx),
// served by this test process — then to a real `switchyard serve --roles
// inbound`, both on a fresh SQLite file at synchronous=FULL. It reports each
// side's accepted rate and p99, the server's and the load generator's CPU
// per request, the load average when the side started, and the real path's
// ratio to the baseline of the same run.
//
//	go test -run '^$' -bench WebhookLoopback -benchtime 100000x -count 3 .
func BenchmarkWebhookLoopback(b *testing.B) {
	bin := binary(b)
	secret, admin := randomHex(b, 32), randomHex(b, 32)
	env := []string{"SWITCHYARD_ADMIN_TOKEN=" + admin, "OMNI_WEBHOOK_SECRET=" + secret}
	var baseline loopbackResult

	b.Run("baseline=group-commit-receiver", func(b *testing.B) {
		db, err := store.Open(context.Background(), store.Options{Path: filepath.Join(b.TempDir(), "baseline.db"), Synchronous: store.SyncFull})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		recv, err := newGroupCommitReceiver(db)
		if err != nil {
			b.Fatal(err)
		}
		defer recv.close()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{Handler: recv}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()

		cpu0 := selfCPU(b)
		baseline = runLoadtest(b, bin, env, "http://"+ln.Addr().String())
		baseline.serverCPU = selfCPU(b) - cpu0
		if n := recv.count(b); n < int64(baseline.accepted) {
			b.Fatalf("%d rows stored after %d accepted requests", n, baseline.accepted)
		}
		baseline.report(b)
	})

	b.Run("serve-roles-inbound", func(b *testing.B) {
		dbPath := filepath.Join(b.TempDir(), "inbound.db")
		p := startServe(b, bin, env, "serve", "--db", dbPath, "--addr", "127.0.0.1:0",
			"--roles", "inbound", "--log-level", "error")
		cpu0 := procCPU(b, p.cmd.Process.Pid)
		r := runLoadtest(b, bin, env, p.base)
		r.serverCPU = procCPU(b, p.cmd.Process.Pid) - cpu0
		r.report(b)
		if baseline.rate > 0 {
			b.ReportMetric(r.rate/baseline.rate, "x-baseline")
		}
	})

	// The same wiring as serve --roles inbound, in this process, so that
	// -cpuprofile profiles the server alone (the load is another process):
	//
	//	go test -run '^$' -bench 'WebhookLoopback/wired' -benchtime 50000x -cpuprofile /tmp/ingest.prof .
	b.Run("wired-inbound-in-this-process", func(b *testing.B) {
		cfg, err := parseConfig("serve", []string{"--roles", "inbound", "--log-level", "error"}, func(string) string { return "" }, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		base := "http://" + ln.Addr().String()
		a, err := wire(context.Background(), cfg, db, secrets{AdminToken: admin, OmniWebhook: secret, BotToBackend: randomHex(b, 32), BotWebhook: randomHex(b, 32)}, newLogger(cfg, io.Discard), urls{self: base, public: base})
		if err != nil {
			b.Fatal(err)
		}
		defer a.close()
		srv := &http.Server{Handler: a.handler}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		cpu0 := selfCPU(b)
		r := runLoadtest(b, bin, env, base)
		r.serverCPU = selfCPU(b) - cpu0
		r.report(b)
		if baseline.rate > 0 {
			b.ReportMetric(r.rate/baseline.rate, "x-baseline")
		}
	})
}

// loopbackResult is one side's figures.
type loopbackResult struct {
	accepted             int
	rate                 float64 // accepted requests per second
	p50, p99             time.Duration
	serverCPU, clientCPU time.Duration
	load1                float64
}

func (r loopbackResult) report(b *testing.B) {
	b.ReportMetric(r.rate, "req/s")
	b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-ms")
	if r.accepted > 0 {
		b.ReportMetric(float64(r.serverCPU.Microseconds())/float64(r.accepted), "server-cpu-µs/req")
		b.ReportMetric(float64(r.clientCPU.Microseconds())/float64(r.accepted), "client-cpu-µs/req")
	}
	b.ReportMetric(r.load1, "load1")
	b.ReportMetric(0, "ns/op")
}

// loadtestLine is the webhook row of loadtest's report: path, sent,
// accepted, per sec, p50, p95, p99, max, errors.
var loadtestLine = regexp.MustCompile(`(?m)^webhook\s+(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+)ms\s+([\d.]+)ms\s+([\d.]+)ms\s+([\d.]+)ms\s+(.*)$`)

// runLoadtest runs `switchyard loadtest` against base for b.N webhooks, with
// no probes (the instance has no chat role) and no wait for a drain.
func runLoadtest(b *testing.B, bin string, env []string, base string) loopbackResult {
	b.Helper()
	r := loopbackResult{load1: loadAverage(b)}
	cmd := exec.Command(bin, "loadtest", "--url", base, "--paths", "webhook", "--count", strconv.Itoa(b.N),
		"--concurrency", "64", "--webhook-probes=false", "--drain", "1ms")
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	b.ResetTimer()
	err := cmd.Run()
	b.StopTimer()
	if err != nil {
		b.Fatalf("loadtest: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	r.clientCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	m := loadtestLine.FindStringSubmatch(out.String())
	if m == nil {
		b.Fatalf("no webhook line in loadtest's report:\n%s", out.String())
	}
	if m[8] != "none" {
		b.Fatalf("loadtest saw errors: %s\n%s", m[8], out.String())
	}
	r.accepted, _ = strconv.Atoi(m[2])
	if r.accepted != b.N {
		b.Fatalf("%d of %d webhooks accepted:\n%s", r.accepted, b.N, out.String())
	}
	r.rate, _ = strconv.ParseFloat(m[3], 64)
	r.p50 = msDuration(m[4])
	r.p99 = msDuration(m[6])
	return r
}

func msDuration(s string) time.Duration {
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(f * float64(time.Millisecond))
}

// groupCommitReceiver is the baseline: it decodes each request's body as a
// Telegram update and inserts the update_id and the body in one row through
// store.DB.Tx, which shares commits among concurrent requests. Nothing else:
// no authentication, no normalisation, no middleware, no metrics.
type groupCommitReceiver struct {
	db     *store.DB
	insert *sql.Stmt
}

func newGroupCommitReceiver(db *store.DB) (*groupCommitReceiver, error) {
	if _, err := db.Write.Exec(`create table baseline_updates (update_id integer primary key, body blob not null) strict`); err != nil {
		return nil, err
	}
	// Prepared once, as the queue prepares its hot statements.
	insert, err := db.Write.Prepare(`insert into baseline_updates (update_id, body) values (?, ?) on conflict (update_id) do nothing`)
	if err != nil {
		return nil, err
	}
	return &groupCommitReceiver{db: db, insert: insert}, nil
}

func (g *groupCommitReceiver) close() { _ = g.insert.Close() }

func (g *groupCommitReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var u struct {
		UpdateID int64 `json:"update_id"`
	}
	if err := json.Unmarshal(body, &u); err != nil || u.UpdateID == 0 {
		http.Error(w, "not an update", http.StatusBadRequest)
		return
	}
	err = g.db.Tx(r.Context(), func(tx *sql.Tx) error {
		_, err := tx.Stmt(g.insert).Exec(u.UpdateID, body)
		return err
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

func (g *groupCommitReceiver) count(b *testing.B) int64 {
	var n int64
	if err := g.db.Read.QueryRow(`select count(*) from baseline_updates`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// startServe runs the binary with args (a serve), and waits for its banner.
func startServe(b *testing.B, bin string, env []string, args ...string) *process {
	b.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out syncLog
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := runningAt.FindStringSubmatch(out.String()); m != nil {
			return &process{cmd: cmd, base: m[1]}
		}
		select {
		case err := <-done:
			b.Fatalf("switchyard exited before it was ready: %v\n%s", err, out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("switchyard did not print its banner in time:\n%s", out.String())
		}
	}
}

// selfCPU is this process's CPU time so far.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is process pid's CPU time so far, from /proc (Linux only).
func procCPU(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 14th and 15th fields of the whole line.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks
}

// loadAverage is the one-minute load average (0 where /proc has none).
func loadAverage(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	return f
}

func randomHex(b *testing.B, n int) string {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		b.Fatal(err)
	}
	return hex.EncodeToString(buf)
}
