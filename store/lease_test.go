package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// exclusiveRunner is one RunExclusive call running in the background, with
// the tenures of its function as they begin.
type exclusiveRunner struct {
	owner  string
	logs   *logLines
	cancel context.CancelFunc
	done   chan struct{} // closed when RunExclusive returned, with err
	err    error
	starts chan *tenure  // one per run of fn
	stops  chan stopInfo // one per run of fn that saw its ctx end
}

// tenure is one run of a runner's fn; send on ret to make fn return.
type tenure struct {
	ctx  context.Context
	prev store.Lease
	ret  chan error
}

// stopInfo is what fn saw when its ctx ended: the store's time then, and why.
type stopInfo struct {
	at    time.Time
	cause error
}

func startExclusive(t *testing.T, db *store.DB, opts store.LeaseOpts) *exclusiveRunner {
	t.Helper()
	if opts.Owner == "" {
		opts.Owner = store.NewOwnerID()
	}
	r := &exclusiveRunner{
		owner:  opts.Owner,
		logs:   &logLines{},
		done:   make(chan struct{}),
		starts: make(chan *tenure, 16),
		stops:  make(chan stopInfo, 16),
	}
	opts.Logger = slog.New(slog.NewJSONHandler(r.logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		r.err = db.RunExclusive(ctx, opts, func(ctx context.Context, prev store.Lease) error {
			ten := &tenure{ctx: ctx, prev: prev, ret: make(chan error, 1)}
			r.starts <- ten
			select {
			case err := <-ten.ret:
				return err
			case <-ctx.Done():
				r.stops <- stopInfo{at: db.Now(), cause: context.Cause(ctx)}
				return nil
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Errorf("RunExclusive of %s did not return after cancellation", r.owner)
		}
	})
	return r
}

// started waits for the next run of fn.
func (r *exclusiveRunner) started(t *testing.T) *tenure {
	t.Helper()
	select {
	case ten := <-r.starts:
		return ten
	case <-time.After(30 * time.Second):
		t.Fatalf("%s never ran its function; its log:\n%s", r.owner, r.logs)
		return nil
	}
}

// stopped waits for fn to see its ctx end.
func (r *exclusiveRunner) stopped(t *testing.T) stopInfo {
	t.Helper()
	select {
	case s := <-r.stops:
		return s
	case <-time.After(30 * time.Second):
		t.Fatalf("%s's function was never stopped; its log:\n%s", r.owner, r.logs)
		return stopInfo{}
	}
}

// idle fails the test if fn starts within d: the negative check, given a
// window several polls long to go wrong in.
func (r *exclusiveRunner) idle(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case <-r.starts:
		t.Fatalf("%s ran its function while another owner held the lease; its log:\n%s", r.owner, r.logs)
	case <-time.After(d):
	}
}

// logLines collects a JSON log, one record a line.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// records returns the records whose message is msg.
func (l *logLines) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// waitLog waits until the log holds a record with message msg.
func (r *exclusiveRunner) waitLog(t *testing.T, msg string) map[string]any {
	t.Helper()
	var recs []map[string]any
	testwait.Until(t, 10*time.Second, r.owner+" to log "+msg, func() bool {
		recs = r.logs.records(t, msg)
		return len(recs) > 0
	}, func() string { return "its log:\n" + r.logs.String() })
	return recs[0]
}

func readLease(t *testing.T, db *store.DB, name string) store.Lease {
	t.Helper()
	l, ok, err := db.Lease(context.Background(), name)
	if err != nil || !ok {
		t.Fatalf("lease %s: %v %v", name, ok, err)
	}
	return l
}

const (
	msgStandingBy = "lease held by another process; standing by"
	msgTookOver   = "took over the lease from another process"
)

func TestRunExclusive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = 30 * time.Second

	t.Run("a standby waits while the holder runs, logs it once, and takes over as soon as the holder releases", func(t *testing.T) {
		t.Parallel()
		// The clock stands still: the lease never expires, so the standby can
		// only get in through the holder's release.
		db, clock := storetest.NewWithClock(t)
		opts := store.LeaseOpts{Name: "job", TTL: time.Second} // polls every 50 ms
		a := startExclusive(t, db, opts)
		ta := a.started(t)
		if ta.prev != (store.Lease{}) {
			t.Errorf("first holder's prev = %+v, want none", ta.prev)
		}
		b := startExclusive(t, db, opts)
		rec := b.waitLog(t, msgStandingBy)
		if rec["holder"] != a.owner || rec["lease"] != "job" || rec["owner"] != b.owner || rec["level"] != "INFO" {
			t.Errorf("standing-by line = %v, want holder %s, lease job, owner %s at INFO", rec, a.owner, b.owner)
		}
		b.idle(t, 500*time.Millisecond)

		releasedAt := clock.Now()
		a.cancel()
		select {
		case <-a.done:
			if a.err != nil {
				t.Errorf("the holder's RunExclusive = %v, want nil", a.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the holder's RunExclusive did not return after cancellation")
		}
		if s := a.stopped(t); !errors.Is(s.cause, context.Canceled) {
			t.Errorf("the holder's fn stopped for %v, want its ctx cancelled", s.cause)
		}
		tb := b.started(t)
		if tb.prev.Owner != a.owner || !tb.prev.ExpiresAt.Equal(releasedAt) {
			t.Errorf("standby's prev = %+v, want owner %s released at %s", tb.prev, a.owner, releasedAt)
		}
		if n := len(b.logs.records(t, msgStandingBy)); n != 1 {
			t.Errorf("the standby logged %q %d times, want once:\n%s", msgStandingBy, n, b.logs)
		}
		if recs := b.logs.records(t, msgTookOver); len(recs) != 1 || recs[0]["previous_owner"] != a.owner {
			t.Errorf("took-over lines = %v, want one naming %s", recs, a.owner)
		}
		if l := readLease(t, db, "job"); l.Owner != b.owner || !l.HeldAt(clock.Now()) {
			t.Errorf("lease = %+v, want held by %s", l, b.owner)
		}
	})

	t.Run("a holder that cannot renew is stopped before its lease expires, and takes it back when the database recovers", func(t *testing.T) {
		t.Parallel()
		clock := store.NewManualClock(time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC))
		db := storetest.NewWith(t, store.Options{Clock: clock, BusyTimeout: 50 * time.Millisecond})
		a := startExclusive(t, db, store.LeaseOpts{Name: "job", TTL: ttl})
		ta := a.started(t)
		expires := readLease(t, db, "job").ExpiresAt

		// Another process takes the file's write lock and keeps it: every
		// renewal fails with SQLITE_BUSY. On PostgreSQL it locks the lease's
		// row, so that every renewal waits.
		other, err := store.Open(ctx, store.Options{Path: db.Path()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Close() })
		locked, unlock, unlocked := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		release := sync.OnceFunc(func() { close(unlock) })
		t.Cleanup(release) // before other.Close, which waits for the transaction
		go func() {
			unlocked <- other.Tx(ctx, func(tx *sql.Tx) error {
				if other.Postgres() {
					if _, err := tx.ExecContext(ctx, `select name from store_leases where name = 'job' for update`); err != nil {
						return err
					}
				}
				close(locked)
				<-unlock
				return nil
			})
		}()
		<-locked
		clock.Advance(2 * ttl / 3) // renewal due, and only a third of the TTL left

		s := a.stopped(t)
		if !errors.Is(s.cause, store.ErrLeaseLost) {
			t.Errorf("fn stopped for %v, want ErrLeaseLost", s.cause)
		}
		l := readLease(t, db, "job")
		if l.Owner != a.owner || !s.at.Before(l.ExpiresAt) || !l.ExpiresAt.Equal(expires) {
			t.Errorf("fn stopped at %s with the lease %+v: want it stopped while its own lease (until %s) still kept others out", s.at, l, expires)
		}
		if ta.ctx.Err() == nil {
			t.Error("fn's ctx is not done")
		}
		a.waitLog(t, "lease not renewed in time; stopping the work before it expires")

		release()
		if err := <-unlocked; err != nil {
			t.Fatal(err)
		}
		a.started(t) // the lease was never anyone else's: it takes it again
		if l := readLease(t, db, "job"); l.Owner != a.owner || !l.HeldAt(clock.Now()) {
			t.Errorf("lease after recovery = %+v, want held by %s", l, a.owner)
		}
	})

	t.Run("a holder whose lease another owner took is stopped at its next renewal, then stands by", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		a := startExclusive(t, db, store.LeaseOpts{Name: "job", TTL: ttl})
		a.started(t)
		// As if a's lease had expired while it stalled and the intruder took it.
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `update store_leases set owner = 'intruder', expires_at = ? where name = 'job'`,
				store.TS(clock.Now().Add(time.Hour)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(ttl/3 + time.Second)
		if s := a.stopped(t); !errors.Is(s.cause, store.ErrLeaseLost) {
			t.Errorf("fn stopped for %v, want ErrLeaseLost", s.cause)
		}
		a.waitLog(t, "lease taken by another process; stopping the work")
		if rec := a.waitLog(t, msgStandingBy); rec["holder"] != "intruder" {
			t.Errorf("standing-by line = %v, want holder intruder", rec)
		}
		if l := readLease(t, db, "job"); l.Owner != "intruder" {
			t.Errorf("lease = %+v: the stopped holder's release took the intruder's lease", l)
		}
		if err := db.ReleaseLease(ctx, "job", "intruder"); err != nil {
			t.Fatal(err)
		}
		if ten := a.started(t); ten.prev != (store.Lease{}) {
			t.Errorf("prev after the intruder's delete = %+v, want none", ten.prev)
		}
	})

	t.Run("a holder that died without releasing is replaced once its lease expires", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		if ok, err := db.AcquireLease(ctx, "job", "dead", ttl); err != nil || !ok {
			t.Fatalf("dead acquire: %v %v", ok, err)
		}
		expires := clock.Now().Add(ttl)
		b := startExclusive(t, db, store.LeaseOpts{Name: "job", TTL: ttl})
		if rec := b.waitLog(t, msgStandingBy); rec["holder"] != "dead" {
			t.Errorf("standing-by line = %v, want holder dead", rec)
		}
		clock.Advance(ttl - time.Second)
		b.idle(t, 1500*time.Millisecond) // a second before the expiry: still the dead holder's
		clock.Advance(time.Second)
		ten := b.started(t)
		if ten.prev.Owner != "dead" || !ten.prev.ExpiresAt.Equal(expires) {
			t.Errorf("prev = %+v, want dead's lease expiring at %s", ten.prev, expires)
		}
	})

	t.Run("the lease is renewed while fn runs, long past its first expiry", func(t *testing.T) {
		t.Parallel()
		const ttl = 3 * time.Second // polls every 150 ms
		db, clock := storetest.NewWithClock(t)
		a := startExclusive(t, db, store.LeaseOpts{Name: "job", TTL: ttl})
		ta := a.started(t)
		for range 6 {
			clock.Advance(ttl/3 + time.Second)
			want := clock.Now().Add(ttl)
			deadline := time.Now().Add(30 * time.Second)
			for l := readLease(t, db, "job"); !l.ExpiresAt.Equal(want); l = readLease(t, db, "job") {
				if time.Now().After(deadline) {
					t.Fatalf("lease = %+v, want it renewed to %s", l, want)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if ok, err := db.AcquireLease(ctx, "job", "other", ttl); err != nil || ok {
				t.Fatalf("another owner took a renewed lease: %v %v", ok, err)
			}
		}
		if ta.ctx.Err() != nil {
			t.Errorf("fn's ctx ended (%v) while its lease was renewed", context.Cause(ta.ctx))
		}
	})

	t.Run("fn returning by itself ends RunExclusive with its error and frees the lease", func(t *testing.T) {
		t.Parallel()
		db, _ := storetest.NewWithClock(t)
		a := startExclusive(t, db, store.LeaseOpts{Name: "job", TTL: ttl})
		boom := errors.New("boom")
		a.started(t).ret <- boom
		select {
		case <-a.done:
			if !errors.Is(a.err, boom) {
				t.Errorf("RunExclusive = %v, want fn's error", a.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("RunExclusive did not return when fn did")
		}
		if ok, err := db.AcquireLease(ctx, "job", "next", ttl); err != nil || !ok {
			t.Errorf("next owner could not take the lease fn gave up: %v %v", ok, err)
		}
	})

	t.Run("runners on two handles of one file never run at once", func(t *testing.T) {
		t.Parallel()
		first := storetest.New(t)
		second, err := store.Open(ctx, store.Options{Path: first.Path()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = second.Close() })
		var active, runs, overlaps atomic.Int32
		var wg sync.WaitGroup
		for i := range 4 {
			db := []*store.DB{first, second}[i%2]
			wg.Go(func() {
				for runs.Load() < 40 {
					err := db.RunExclusive(ctx, store.LeaseOpts{Name: "job", TTL: time.Second}, func(ctx context.Context, _ store.Lease) error {
						if active.Add(1) > 1 {
							overlaps.Add(1)
						}
						time.Sleep(2 * time.Millisecond) // the work, so that overlaps have room to happen
						runs.Add(1)
						active.Add(-1)
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n := overlaps.Load(); n != 0 {
			t.Errorf("%d runs overlapped another", n)
		}
	})
}

func TestNewOwnerID(t *testing.T) {
	t.Parallel()
	host, _ := os.Hostname()
	a, b := store.NewOwnerID(), store.NewOwnerID()
	if a == b {
		t.Errorf("two owner ids are both %s", a)
	}
	if want := fmt.Sprintf("%s:%d:", host, os.Getpid()); !strings.HasPrefix(a, want) || len(a) != len(want)+8 {
		t.Errorf("owner id %q, want %s and 8 hex digits", a, want)
	}
}
