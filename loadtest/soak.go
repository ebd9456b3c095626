package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"switchyard/store"
)

// Interval is one row of a soak: what one interval of Opts.ReportEvery
// measured, and the instance's resources at its end. Latencies are in
// milliseconds, so that the JSON a test reads needs no unit.
type Interval struct {
	// N numbers the rows from 1. At is the interval's end and Length its
	// length, in seconds since the load began; the last row is the rest of
	// the load, shorter when the duration is not a multiple of the interval.
	N      int            `json:"n"`
	At     float64        `json:"atSeconds"`
	Length float64        `json:"lengthSeconds"`
	Paths  []IntervalPath `json:"paths"`
	// RSS is the instance's resident memory; Database its database's size
	// and WAL its write-ahead log's (0 on PostgreSQL); Free the database's
	// free space, when /metrics says (switchyard_store_free_bytes).
	RSS      Sample `json:"rss"`
	Database Sample `json:"database"`
	WAL      Sample `json:"wal"`
	Free     Sample `json:"free"`
}

// IntervalPath is one path's figures in an Interval.
type IntervalPath struct {
	Path Path `json:"path"`
	// Accepted and Errors are the requests answered in the interval, 2xx
	// and not; PerSecond is Accepted over its length; P99 the 99th
	// percentile of the accepted ones' latency.
	Accepted  int64   `json:"accepted"`
	Errors    int64   `json:"errors"`
	PerSecond float64 `json:"perSecond"`
	P99       float64 `json:"p99Ms"`
	// Handled is how many accepted → handled delays ended in the interval
	// (every outbox event, the webhook and topic probes), HandledP99 their
	// 99th percentile; Waiting is the age, at the interval's end, of the
	// oldest timed request not yet seen handled (0: none), so that a
	// consumer that stalls shows in the row that it stalls in, not only in
	// the one where it catches up.
	Handled    int     `json:"handled"`
	HandledP99 float64 `json:"handledP99Ms"`
	Waiting    float64 `json:"waitingMs"`
}

// Lag is the path's accepted → handled lag in the interval: the p99 of what
// was handled, or the oldest still waiting when that is longer.
func (p IntervalPath) Lag() float64 { return max(p.HandledP99, p.Waiting) }

// Sample is one reading of a size in bytes and where it came from:
// "metrics" (the instance's /metrics), "proc" (/proc/<pid>/status), "file"
// (the size of the SQLite file on disk), or "" when nothing could tell.
type Sample struct {
	Bytes int64  `json:"bytes"`
	From  string `json:"from"`
}

// Known reports whether the sample was read.
func (s Sample) Known() bool { return s.From != "" }

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// intervals closes the rows of a run.
type intervals struct {
	opts  Opts
	recs  map[Path]*recorder
	gens  map[Path]generator
	res   sampler
	start time.Time
	last  time.Time // the open row's beginning
	rows  []Interval
}

// run closes a row every opts.ReportEvery until load ends; then done. It
// reads the instance's resources with ctx, Run's, so that the load's end
// does not cut the last reading short.
func (iv *intervals) run(load, ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if iv.opts.ReportEvery <= 0 {
		return
	}
	t := time.NewTicker(iv.opts.ReportEvery)
	defer t.Stop()
	for {
		select {
		case <-load.Done():
			return
		case now := <-t.C:
			if iv.opts.Duration > 0 && iv.start.Add(iv.opts.Duration).Sub(now) < iv.opts.ReportEvery/10 {
				return // the load ends now: close closes this row, with the answers still in flight
			}
			iv.closeRow(ctx, now)
		}
	}
}

// close closes the last row, the rest of the load once every request has
// its answer, unless it is empty: a sliver shorter than a tenth of an
// interval in which nothing was answered.
func (iv *intervals) close(ctx context.Context) {
	if iv.opts.ReportEvery <= 0 {
		return
	}
	now := time.Now()
	answered := false
	for _, r := range iv.recs {
		r.mu.Lock()
		answered = answered || len(r.lat) > r.cut.lat || r.errorCount() > r.cut.errors
		r.mu.Unlock()
	}
	if !answered && now.Sub(iv.last) < iv.opts.ReportEvery/10 {
		return
	}
	iv.closeRow(ctx, now)
}

func (iv *intervals) closeRow(ctx context.Context, now time.Time) {
	row := Interval{N: len(iv.rows) + 1, At: now.Sub(iv.start).Seconds(), Length: now.Sub(iv.last).Seconds()}
	for _, p := range iv.opts.Paths {
		ip := iv.recs[p].interval(iv.last, now)
		if at := iv.gens[p].waiting(); !at.IsZero() {
			ip.Waiting = millis(now.Sub(at))
		}
		row.Paths = append(row.Paths, ip)
	}
	row.RSS, row.Database, row.WAL, row.Free = iv.res.sample(ctx)
	iv.last = now
	iv.rows = append(iv.rows, row)
	if iv.opts.OnInterval != nil {
		iv.opts.OnInterval(row)
	}
}

// errorCount is the errors counted so far; r.mu is held.
func (r *recorder) errorCount() int64 {
	var n int64
	for _, v := range r.errors {
		n += v
	}
	return n
}

// The gauges a row reads from /metrics: the Prometheus client's process
// collector and the store's.
const (
	metricRSS      = "process_resident_memory_bytes"
	metricDatabase = "switchyard_store_database_bytes"
	metricWAL      = "switchyard_store_wal_bytes"
	metricFree     = "switchyard_store_free_bytes"
)

// sampler reads an instance's resources: its /metrics (public, like
// /healthz: no credentials are sent), else its process's /proc status and
// its SQLite file's size.
type sampler struct {
	hc   *http.Client
	base string
	pid  int
	db   string
}

func (s sampler) sample(ctx context.Context) (rss, db, wal, free Sample) {
	m, _ := s.metrics(ctx) // unreadable: every figure falls back
	gauge := func(name string) Sample {
		if v, ok := m[name]; ok {
			return Sample{Bytes: int64(v), From: "metrics"}
		}
		return Sample{}
	}
	rss, db, wal, free = gauge(metricRSS), gauge(metricDatabase), gauge(metricWAL), gauge(metricFree)
	if !rss.Known() && s.pid > 0 {
		if n, err := VmRSS(s.pid); err == nil {
			rss = Sample{Bytes: n, From: "proc"}
		}
	}
	if s.db != "" && !store.IsPostgresURL(s.db) {
		if !db.Known() {
			if fi, err := os.Stat(s.db); err == nil {
				db = Sample{Bytes: fi.Size(), From: "file"}
			}
		}
		if !wal.Known() {
			switch fi, err := os.Stat(s.db + "-wal"); {
			case err == nil:
				wal = Sample{Bytes: fi.Size(), From: "file"}
			case errors.Is(err, os.ErrNotExist) && db.From == "file":
				wal = Sample{Bytes: 0, From: "file"} // checkpointed and removed, or never written
			}
		}
	}
	return rss, db, wal, free
}

// metrics reads the unlabelled samples of the instance's /metrics.
func (s sampler) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, statusError{resp.StatusCode}
	}
	return ParseMetrics(resp.Body)
}

// ParseMetrics reads the samples without labels of a Prometheus text
// exposition (the only kind the gauges a row reads have): name → value.
// Comments, labelled samples and timestamps are skipped.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil || math.IsNaN(v) {
			continue
		}
		out[f[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /metrics: %w", err)
	}
	return out, nil
}

// VmRSS is a process's resident memory from /proc/<pid>/status (Linux).
func VmRSS(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest) // "12345 kB"
		if len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return kb * 1024, nil
			}
		}
		return 0, fmt.Errorf("/proc/%d/status: unreadable VmRSS %q", pid, strings.TrimSpace(rest))
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// PrintIntervalHeader writes the header of the rows' table for paths.
func PrintIntervalHeader(w io.Writer, paths []Path) {
	var b strings.Builder
	fmt.Fprintf(&b, "%7s", "at")
	for _, p := range paths {
		fmt.Fprintf(&b, "  %9s %8s %8s", string(p)+"/s", "p99", "lag")
	}
	fmt.Fprintf(&b, "  %8s %9s %8s  %s", "rss MiB", "db MiB", "wal MiB", "errors")
	fmt.Fprintln(w, b.String())
}

// Print writes the row as a line of the table PrintIntervalHeader begins.
func (r Interval) Print(w io.Writer) {
	var b strings.Builder
	fmt.Fprintf(&b, "%6.0fs", r.At)
	var errs []string
	for _, p := range r.Paths {
		fmt.Fprintf(&b, "  %9.0f %8s %8s", p.PerSecond, msText(p.P99), msText(p.Lag()))
		if p.Errors > 0 {
			errs = append(errs, fmt.Sprintf("%s×%d", p.Path, p.Errors))
		}
	}
	if len(errs) == 0 {
		errs = []string{"none"}
	}
	fmt.Fprintf(&b, "  %8s %9s %8s  %s", mib(r.RSS), mib(r.Database), mib(r.WAL), strings.Join(errs, " "))
	fmt.Fprintln(w, b.String())
}

func msText(ms float64) string {
	if ms >= 10_000 {
		return fmt.Sprintf("%.1fs", ms/1000)
	}
	return fmt.Sprintf("%.1fms", ms)
}

func mib(s Sample) string {
	if !s.Known() {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(s.Bytes)/(1<<20))
}
