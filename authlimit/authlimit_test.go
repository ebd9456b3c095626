package authlimit_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard/authlimit"
	"switchyard/metrictest"
)

// clock is a manual clock for the limiter.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type testBundle struct {
	lim   *authlimit.Limiter
	clock *clock
	logs  *bytes.Buffer
}

func setup(t *testing.T, opts authlimit.Opts) *testBundle {
	t.Helper()
	b := &testBundle{clock: &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}, logs: &bytes.Buffer{}}
	opts.Now = b.clock.Now
	opts.Logger = slog.New(slog.NewTextHandler(b.logs, nil))
	b.lim = authlimit.New(opts)
	return b
}

func from(addr string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/admin/login", nil)
	r.RemoteAddr = addr
	return r
}

// try makes one attempt from addr with a right or wrong secret.
func (b *testBundle) try(t *testing.T, addr string, right bool) (authlimit.Verdict, time.Duration) {
	t.Helper()
	return b.lim.Check(from(addr), "test", func() bool { return right })
}

func (b *testBundle) fail(t *testing.T, addr string, n int) {
	t.Helper()
	for i := range n {
		if v, wait := b.try(t, addr, false); v != authlimit.Refused {
			t.Fatalf("failure %d from %s: verdict %v (wait %v), want Refused", i+1, addr, v, wait)
		}
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()

	t.Run("after five failures the next attempt waits, even with the right secret", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authlimit.Opts{})
		b.fail(t, "203.0.113.7:5000", 5)
		checked := false
		v, wait := b.lim.Check(from("203.0.113.7:5001"), "test", func() bool { checked = true; return true })
		if v != authlimit.Throttled || wait != time.Second {
			t.Fatalf("sixth attempt: verdict %v wait %v, want Throttled for 1s", v, wait)
		}
		if checked {
			t.Fatal("the secret of a throttled attempt was checked")
		}
	})

	t.Run("the wait doubles with each further failure up to the cap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authlimit.Opts{MaxWait: 10 * time.Second})
		const addr = "203.0.113.8:1"
		b.fail(t, addr, 5)
		for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second} {
			if left := b.lim.Wait(from(addr)); left != want {
				t.Fatalf("wait %v, want %v", left, want)
			}
			b.clock.Advance(want - time.Millisecond)
			if v, left := b.try(t, addr, true); v != authlimit.Throttled || left != time.Millisecond {
				t.Fatalf("just before the wait ends: verdict %v with %v left", v, left)
			}
			b.clock.Advance(time.Millisecond)
			b.fail(t, addr, 1)
		}
	})

	t.Run("a different client address is unaffected", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authlimit.Opts{})
		b.fail(t, "203.0.113.9:1", 5)
		if v, _ := b.try(t, "203.0.113.10:1", true); v != authlimit.Allowed {
			t.Fatalf("another address: verdict %v, want Allowed", v)
		}
		if v, _ := b.try(t, "203.0.113.10:1", false); v != authlimit.Refused {
			t.Fatalf("another address's wrong secret: verdict %v, want Refused", v)
		}
	})

	t.Run("a success forgets the failures", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authlimit.Opts{})
		b.fail(t, "198.51.100.1:1", 4)
		if v, _ := b.try(t, "198.51.100.1:1", true); v != authlimit.Allowed {
			t.Fatalf("verdict %v, want Allowed", v)
		}
		b.fail(t, "198.51.100.1:1", 4) // four more, not a fifth: still no wait
		if v, _ := b.try(t, "198.51.100.1:1", true); v != authlimit.Allowed {
			t.Fatalf("after a reset and four failures: verdict %v, want Allowed", v)
		}
	})

	t.Run("failures are forgotten an hour after the last one", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authlimit.Opts{})
		b.fail(t, "198.51.100.2:1", 4)
		b.clock.Advance(time.Hour)
		b.fail(t, "198.51.100.2:1", 4)
		if v, _ := b.try(t, "198.51.100.2:1", true); v != authlimit.Allowed {
			t.Fatalf("verdict %v, want Allowed", v)
		}
	})

	t.Run("memory is bounded: the oldest client is forgotten first", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authlimit.Opts{MaxClients: 3, FirstWait: time.Hour, MaxWait: time.Hour})
		b.fail(t, "192.0.2.1:1", 5)
		for _, a := range []string{"192.0.2.2:1", "192.0.2.3:1", "192.0.2.4:1"} {
			b.clock.Advance(time.Second)
			b.fail(t, a, 1)
		}
		if w := b.lim.Wait(from("192.0.2.1:1")); w != 0 {
			t.Fatalf("the oldest of four clients over a cap of three still waits %v", w)
		}
		b.fail(t, "192.0.2.2:1", 4)
		if v, _ := b.try(t, "192.0.2.2:1", true); v != authlimit.Throttled {
			t.Fatalf("a client kept on record lost its count: verdict %v", v)
		}
	})

	t.Run("parallel attempts cannot race past the count", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authlimit.Opts{})
		b.fail(t, "192.0.2.50:1", 1)
		release := make(chan struct{})
		var mu sync.Mutex
		checked, throttled := 0, 0
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				v, _ := b.lim.Check(from("192.0.2.50:1"), "test", func() bool {
					mu.Lock()
					checked++
					mu.Unlock()
					<-release
					return false
				})
				if v == authlimit.Throttled {
					mu.Lock()
					throttled++
					mu.Unlock()
				}
			})
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			mu.Lock()
			done := checked+throttled == 20 || (checked == 4 && throttled == 16)
			mu.Unlock()
			if done || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(release)
		wg.Wait()
		if checked != 4 || throttled != 16 {
			t.Fatalf("20 parallel attempts after one failure: %d checked, %d throttled; want 4 and 16", checked, throttled)
		}
	})

	t.Run("each failure is logged once, with the client and without the secret", func(t *testing.T) {
		t.Parallel()
		b := setup(t, authlimit.Opts{})
		const guess = "hunter2-the-guess"
		for range 5 {
			b.lim.Check(from("192.0.2.77:1"), "console-login", func() bool { return guess == "right" })
		}
		b.try(t, "192.0.2.77:1", false) // throttled: not checked, not logged
		logs := b.logs.String()
		if n := strings.Count(logs, "authentication failed"); n != 5 {
			t.Fatalf("%d log lines for 5 failures:\n%s", n, logs)
		}
		if !strings.Contains(logs, "client=192.0.2.77") || !strings.Contains(logs, "surface=console-login") || !strings.Contains(logs, "throttled_for=1s") {
			t.Fatalf("the lines do not name the client, surface and wait:\n%s", logs)
		}
		if strings.Contains(logs, guess) {
			t.Fatalf("the guess is in the log:\n%s", logs)
		}
	})
}

func TestClient(t *testing.T) {
	t.Parallel()
	proxies, err := authlimit.ParseTrustedProxies("10.0.0.0/8, 127.0.0.1, ::1")
	if err != nil {
		t.Fatal(err)
	}
	plain := authlimit.New(authlimit.Opts{})
	behind := authlimit.New(authlimit.Opts{TrustedProxies: proxies})
	for _, c := range []struct {
		name, remote string
		xff          []string
		lim          *authlimit.Limiter
		want         string
	}{
		{"an IPv4 peer is its address", "203.0.113.5:4411", nil, plain, "203.0.113.5"},
		{"an IPv6 peer counts by its /64", "[2001:db8:1:2:3:4:5:6]:443", nil, plain, "2001:db8:1:2::/64"},
		{"an IPv4-mapped IPv6 peer is its IPv4 address", "[::ffff:203.0.113.5]:1", nil, plain, "203.0.113.5"},
		{"X-Forwarded-For is ignored without trusted proxies", "203.0.113.5:1", []string{"198.51.100.9"}, plain, "203.0.113.5"},
		{"X-Forwarded-For is ignored from a peer that is not a trusted proxy", "203.0.113.5:1", []string{"198.51.100.9"}, behind, "203.0.113.5"},
		{"a trusted proxy names the client", "127.0.0.1:1", []string{"198.51.100.9"}, behind, "198.51.100.9"},
		{"a forged entry left of the client's is not believed", "127.0.0.1:1", []string{"6.6.6.6, 198.51.100.9"}, behind, "198.51.100.9"},
		{"a chain of trusted proxies is walked", "10.1.1.1:1", []string{"198.51.100.9, 10.2.2.2", "10.3.3.3"}, behind, "198.51.100.9"},
		{"a garbled entry stops at the last trusted proxy", "127.0.0.1:1", []string{"198.51.100.9, not-an-ip"}, behind, "127.0.0.1"},
		{"a trusted proxy without the header is the client", "127.0.0.1:1", nil, behind, "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := from(c.remote)
			for _, h := range c.xff {
				r.Header.Add("X-Forwarded-For", h)
			}
			if got := c.lim.Client(r); got != c.want {
				t.Fatalf("Client = %q, want %q", got, c.want)
			}
		})
	}
	t.Run("a bad trusted-proxy entry is an error", func(t *testing.T) {
		if _, err := authlimit.ParseTrustedProxies("10.0.0.0/8,nope"); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("prefixes and addresses parse", func(t *testing.T) {
		want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}
		for i, p := range proxies {
			if p != want[i] {
				t.Fatalf("%v, want %v", proxies, want)
			}
		}
	})
}

// BenchmarkCheck is the cost the throttle adds to every authenticated
// request of a client without failures (the webhook ingest's hot path).
func BenchmarkCheck(b *testing.B) {
	lim := authlimit.New(authlimit.Opts{})
	r := from("149.154.167.220:443")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			lim.Check(r, "bench", func() bool { return true })
		}
	})
}

// TestDeclare: a declared surface's failure and throttle counters exist at
// 0 before its first failure, so an alert on them sees 0, not "no data".
func TestDeclare(t *testing.T) {
	surface := "declared-" + t.Name()
	for _, m := range []string{"switchyard_auth_failures_total", "switchyard_auth_throttled_total"} {
		if slices.Contains(metrictest.LabelValues(t, m, "surface"), surface) {
			t.Fatalf("%s has a %s series before Declare", m, surface)
		}
	}
	authlimit.New(authlimit.Opts{}).Declare(surface)
	for _, m := range []string{"switchyard_auth_failures_total", "switchyard_auth_throttled_total"} {
		if !slices.Contains(metrictest.LabelValues(t, m, "surface"), surface) {
			t.Errorf("%s has no %s series after Declare", m, surface)
		}
	}
}
