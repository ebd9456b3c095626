package store_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// hearing records what one OnBroadcast function was told.
type hearing struct {
	mu      sync.Mutex
	payload []string
	missed  int
}

func hear(t testing.TB, db *store.DB, channel string) *hearing {
	t.Helper()
	h := &hearing{}
	t.Cleanup(db.OnBroadcast(channel, func(n store.Notice) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if n.Missed {
			h.missed++
			return
		}
		h.payload = append(h.payload, n.Payload)
	}))
	return h
}

func (h *hearing) heard(payload string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, p := range h.payload {
		if p == payload {
			n++
		}
	}
	return n
}

func (h *hearing) missedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.missed
}

func (h *hearing) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("heard %q and %d missed notices", h.payload, h.missed)
}

// otherInstance opens a second handle on db's database: another instance.
func otherInstance(t testing.TB, db *store.DB, opts store.Options) *store.DB {
	t.Helper()
	opts.Path = db.Path()
	other, err := store.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	return other
}

// listening waits until h's listener is up: it tells Missed as it connects.
func listening(t testing.TB, db *store.DB, h *hearing, times int) {
	t.Helper()
	testwait.Until(t, 10*time.Second, fmt.Sprintf("the listening connection established %d times", times), func() bool {
		return db.BroadcastStats().Listens >= int64(times) && h.missedCount() >= times
	}, h.String)
}

func terminate(t testing.TB, db *store.DB, pid uint32) {
	t.Helper()
	if pid == 0 {
		t.Fatal("no backend to end")
	}
	var ended bool
	if err := db.Read.QueryRow(`select pg_terminate_backend(cast(? as integer))`, int64(pid)).Scan(&ended); err != nil || !ended {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ended, err)
	}
}

func TestBroadcast(t *testing.T) {
	t.Parallel()

	t.Run("another instance hears a broadcast, and the sender does not hear its own", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "broadcasts travel by LISTEN/NOTIFY; on SQLite other processes poll")
		a := storetest.New(t)
		b := otherInstance(t, a, store.Options{})
		ha, hb := hear(t, a, "test"), hear(t, b, "test")
		listening(t, a, ha, 1)
		listening(t, b, hb, 1)

		a.Broadcast("test", "from a")
		testwait.Until(t, 5*time.Second, "b hears a's broadcast", func() bool { return hb.heard("from a") == 1 }, hb.String)
		// NOTIFY delivers in commit order: a's own notification, were it
		// delivered, would come before the answer b sends now.
		b.Broadcast("test", "from b")
		testwait.Until(t, 5*time.Second, "a hears b's answer", func() bool { return ha.heard("from b") == 1 }, ha.String)
		if n := ha.heard("from a"); n != 0 {
			t.Errorf("a heard its own broadcast %d times", n)
		}
		if n := hb.heard("from b"); n != 0 {
			t.Errorf("b heard its own broadcast %d times", n)
		}
		if got := b.BroadcastStats().Received; got != 1 {
			t.Errorf("b received %d notifications, want 1", got)
		}
	})

	t.Run("the sending connection does not wait for its commits to be flushed", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "broadcasts travel by LISTEN/NOTIFY; on SQLite other processes poll")
		db := storetest.New(t)
		// A notifying commit holds the server's notification lock until it
		// is done; a flush inside it would serialise every instance's.
		if v, err := store.SenderSetting(db, "synchronous_commit"); err != nil || v != "off" {
			t.Errorf("synchronous_commit = %q, %v; want off", v, err)
		}
	})

	t.Run("a burst of broadcasts goes out as a few statements, each payload once per interval", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "broadcasts travel by LISTEN/NOTIFY; on SQLite other processes poll")
		a := storetest.New(t)
		b := otherInstance(t, a, store.Options{})
		hb := hear(t, b, "test")
		listening(t, b, hb, 1)
		before := notificationsSent(t)

		const calls, payloads = 10_000, 4
		start := time.Now()
		for i := range calls {
			a.Broadcast("test", fmt.Sprintf("p%d", i%payloads))
		}
		elapsed := time.Since(start)
		testwait.Until(t, 5*time.Second, "b hears every payload", func() bool {
			for p := range payloads {
				if hb.heard(fmt.Sprintf("p%d", p)) == 0 {
					return false
				}
			}
			return true
		}, hb.String)
		s := a.BroadcastStats()
		// One statement per interval at most, the first at once, and one
		// after the burst with what was pending at its end: bounds that hold
		// whenever they are read.
		maxStatements := int64(elapsed/store.DefaultBroadcastInterval) + 2
		t.Logf("%d broadcasts in %s: %d payloads sent in %d statements", calls, elapsed, s.Sent, s.Statements)
		if s.Statements > maxStatements || s.Sent > s.Statements*payloads || s.Sent >= calls/10 {
			t.Errorf("%d broadcasts in %s sent %d payloads in %d statements, want at most %d statements of at most %d payloads",
				calls, elapsed, s.Sent, s.Statements, maxStatements, payloads)
		}
		if s.Statements >= s.Sent {
			t.Errorf("%d payloads in %d statements: pending payloads were not sent together", s.Sent, s.Statements)
		}
		if got := notificationsSent(t) - before; got < float64(s.Sent) {
			t.Errorf("switchyard_store_notifications_total{direction=sent} grew by %v, want at least %d", got, s.Sent)
		}
	})

	t.Run("a dropped listening connection is re-established and its subscribers told to look at everything", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "broadcasts travel by LISTEN/NOTIFY; on SQLite other processes poll")
		a := storetest.New(t)
		b := otherInstance(t, a, store.Options{})
		hb := hear(t, b, "test")
		listening(t, b, hb, 1)

		terminate(t, a, store.ListenerPID(b))
		listening(t, b, hb, 2)
		a.Broadcast("test", "after")
		testwait.Until(t, 5*time.Second, "b hears a broadcast on its new connection", func() bool { return hb.heard("after") == 1 }, hb.String)
	})

	t.Run("a broadcast pending when the sending connection drops is sent on the next one", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "broadcasts travel by LISTEN/NOTIFY; on SQLite other processes poll")
		a := storetest.New(t)
		b := otherInstance(t, a, store.Options{})
		hb := hear(t, b, "test")
		listening(t, b, hb, 1)
		a.Broadcast("test", "first")
		testwait.Until(t, 5*time.Second, "b hears the first broadcast", func() bool { return hb.heard("first") == 1 }, hb.String)

		terminate(t, b, store.SenderPID(a))
		a.Broadcast("test", "second")
		testwait.Until(t, 10*time.Second, "b hears the broadcast made after the sender's connection dropped", func() bool {
			return hb.heard("second") == 1
		}, hb.String)
	})

	t.Run("a payload NOTIFY cannot carry is heard as everything on its channel", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "broadcasts travel by LISTEN/NOTIFY; on SQLite other processes poll")
		a := storetest.New(t)
		b := otherInstance(t, a, store.Options{})
		hb, other := hear(t, b, "test"), hear(t, b, "other")
		listening(t, b, hb, 1)

		a.Broadcast("test", strings.Repeat("x", 8000))
		a.Broadcast("test", "nul\x00byte")
		a.Broadcast("test", "not utf-8 \xff")
		a.Broadcast("other", "fine")
		testwait.Until(t, 5*time.Second, "b told to look at everything on the channel", func() bool { return hb.missedCount() >= 2 }, hb.String)
		testwait.Until(t, 5*time.Second, "the other channel's broadcast heard", func() bool { return other.heard("fine") == 1 }, other.String)
		if hb.heard("fine") != 0 || other.missedCount() != 1 {
			t.Errorf("channels crossed: test %s; other %s", hb, other)
		}
	})

	t.Run("broadcasts turned off send nothing and open no connection", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "broadcasts travel by LISTEN/NOTIFY; on SQLite other processes poll")
		a := storetest.NewWith(t, store.Options{BroadcastInterval: -1})
		h := hear(t, a, "test")
		a.Broadcast("test", "x")
		if s := a.BroadcastStats(); s != (store.BroadcastStats{}) || h.missedCount() != 0 {
			t.Errorf("stats %+v, %s; want nothing", s, h)
		}
	})

	t.Run("on SQLite broadcasts do nothing: other processes poll", func(t *testing.T) {
		t.Parallel()
		storetest.SQLiteOnly(t, "on PostgreSQL broadcasts reach other processes (the subtests above)")
		a := storetest.New(t)
		b := otherInstance(t, a, store.Options{})
		hb := hear(t, b, "test")
		a.Broadcast("test", "x")
		if s := a.BroadcastStats(); s != (store.BroadcastStats{}) || hb.missedCount() != 0 {
			t.Errorf("stats %+v, %s; want nothing", s, hb)
		}
	})

	t.Run("a bad channel name is a wiring mistake", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		for _, ch := range []string{"", "two words", strings.Repeat("c", 65), "é"} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("Broadcast(%q, …) did not panic", ch)
					}
				}()
				db.Broadcast(ch, "x")
			}()
		}
	})
}

// TestBroadcastClose runs alone (not in parallel), so that the goroutines it
// looks for can only be its own databases'.
func TestBroadcastClose(t *testing.T) {
	storetest.PostgresOnly(t, "broadcasts travel by LISTEN/NOTIFY; on SQLite other processes poll")
	a := storetest.New(t)
	b := otherInstance(t, a, store.Options{})
	ha, hb := hear(t, a, "test"), hear(t, b, "test")
	listening(t, a, ha, 1)
	listening(t, b, hb, 1)
	a.Broadcast("test", "x")
	testwait.Until(t, 5*time.Second, "b hears a", func() bool { return hb.heard("x") == 1 }, hb.String)
	if notifierGoroutines() == 0 {
		t.Fatal("no broadcast goroutines found to begin with: the check below proves nothing")
	}

	// b's listener is reconnecting as it closes.
	terminate(t, a, store.ListenerPID(b))
	for _, db := range []*store.DB{b, a} {
		closed := make(chan error, 1)
		go func() { closed <- db.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second * testwait.Slack):
			t.Fatalf("Close has not returned after %s", 5*time.Second*testwait.Slack)
		}
	}
	testwait.Until(t, 5*time.Second, "no broadcast goroutine left after Close", func() bool { return notifierGoroutines() == 0 },
		func() string { return fmt.Sprintf("%d left", notifierGoroutines()) })
	a.Broadcast("test", "after close") // does nothing, and does not panic
}

func notifierGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "switchyard/store.(*notifier)") {
			count++
		}
	}
	return count
}

func notificationsSent(t testing.TB) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "switchyard_store_notifications_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "direction" && l.GetValue() == "sent" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatal("switchyard_store_notifications_total{direction=sent} not registered")
	return 0
}

// BenchmarkBroadcastCall measures what Broadcast costs its caller (a
// sender's after-commit function) while the sender goroutine sends the
// gathered broadcasts in the background; b.N calls, from parallel callers,
// of the few payloads a busy process repeats.
//
//	SWITCHYARD_TEST_DB=postgres://… go test -run '^$' -bench BenchmarkBroadcastCall ./store/
func BenchmarkBroadcastCall(b *testing.B) {
	storetest.PostgresOnly(b, "broadcasts travel by LISTEN/NOTIFY; on SQLite Broadcast does nothing")
	db := storetest.New(b)
	payloads := []string{"q:sender.flow", "q:receiver.flow", `"t:pin.identity.users.v1" 3`, `"g:t\x00g"`}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			db.Broadcast("queue", payloads[i%len(payloads)])
			i++
		}
	})
	b.StopTimer()
	s := db.BroadcastStats()
	b.ReportMetric(float64(s.Statements)/b.Elapsed().Seconds(), "statements/s")
}
