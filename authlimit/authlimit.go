// Package authlimit throttles failed authentication per client address, so a
// secret cannot be guessed at the rate the server answers. One Limiter is
// shared by every surface that checks a secret — the console login, the
// admin API's Bearer token, the bot contract's Bearer secret, the webhook
// secrets — so a client's failures count together wherever it guesses.
//
// The rule: a client may fail Free times in a row; the Free-th failure makes
// it wait FirstWait, and each further failure doubles the wait up to MaxWait.
// While a client waits, its attempts are answered 429 with Retry-After
// without being checked — even one with the right secret, or the wait would
// not slow a guesser down. A success forgets the client's failures; so does
// Forget without a failure. A client with failures on record has at most
// Free minus its failures (at least one) attempts in flight, so parallel
// connections cannot race a burst of guesses past the count.
//
// The client is the peer address of the connection (an IPv6 address counts
// by its /64, which one host usually owns whole). X-Forwarded-For is ignored
// unless the peer is one of TrustedProxies: behind a reverse proxy that is
// not declared, every client shares the proxy's address and one guesser
// throttles them all.
//
// Only a presented secret is an attempt: a request without one is the
// caller's own 401 and counts for nothing; a console session cookie (a
// random 256-bit id) is not throttled either.
package authlimit

import (
	"container/list"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Defaults of Opts.
const (
	DefaultFree       = 5
	DefaultFirstWait  = time.Second
	DefaultMaxWait    = 15 * time.Minute
	DefaultForget     = time.Hour
	DefaultMaxClients = 10000
)

var (
	metricFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_auth_failures_total",
		Help: "Authentication attempts refused for a wrong secret, by surface.",
	}, []string{"surface"})
	metricThrottled = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_auth_throttled_total",
		Help: "Authentication attempts answered 429 unchecked because the client must wait, by surface.",
	}, []string{"surface"})
)

// Opts configure New. Zero values get the defaults.
type Opts struct {
	// Free is how many failures in a row a client may make before it waits.
	Free int
	// FirstWait is the wait the Free-th failure sets; each further failure
	// doubles it.
	FirstWait time.Duration
	// MaxWait caps the wait.
	MaxWait time.Duration
	// Forget is how long after its last failure a client's record is dropped;
	// at least MaxWait.
	Forget time.Duration
	// MaxClients bounds the memory: with more clients on record, the one
	// whose last failure is oldest is forgotten.
	MaxClients int
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names the
	// client. Empty: the header is never read.
	TrustedProxies []netip.Prefix
	// Now tells the time; nil is time.Now.
	Now func() time.Time
	// Logger gets one line per failed attempt (surface and client, never the
	// secret tried); nil discards.
	Logger *slog.Logger
}

// Limiter counts failed authentication per client. It is safe for
// concurrent use.
type Limiter struct {
	opts Opts
	log  *slog.Logger

	// records mirrors len(clients), so that while no client has failures
	// on record — the usual case — a check takes no lock.
	records atomic.Int64
	mu      sync.Mutex
	clients map[string]*list.Element // of *record
	lru     *list.List               // front: the most recent failure
}

type record struct {
	client       string
	failures     int
	lastFailure  time.Time
	blockedUntil time.Time
	inFlight     int // attempts admitted while failures are on record
}

// New returns a Limiter.
func New(opts Opts) *Limiter {
	if opts.Free <= 0 {
		opts.Free = DefaultFree
	}
	if opts.FirstWait <= 0 {
		opts.FirstWait = DefaultFirstWait
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	opts.MaxWait = max(opts.MaxWait, opts.FirstWait)
	if opts.Forget <= 0 {
		opts.Forget = DefaultForget
	}
	opts.Forget = max(opts.Forget, opts.MaxWait)
	if opts.MaxClients <= 0 {
		opts.MaxClients = DefaultMaxClients
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Limiter{opts: opts, log: opts.Logger, clients: map[string]*list.Element{}, lru: list.New()}
}

// Verdict is the outcome of one authentication attempt.
type Verdict int

const (
	// Allowed: the secret was right.
	Allowed Verdict = iota
	// Refused: the secret was wrong; the caller answers its 401.
	Refused
	// Throttled: the client must wait; the secret was not checked. The
	// caller answers 429 with Retry-After.
	Throttled
)

// Check is one authentication attempt by r's client on surface (a stable
// name for logs and metrics, such as "console-login"). right, which compares
// the presented secret, runs only when the client may try now. The wait is
// how long a Throttled client must still wait.
func (l *Limiter) Check(r *http.Request, surface string, right func() bool) (Verdict, time.Duration) {
	// While no client has failures on record, a right secret costs no lock
	// and no parsing of the address.
	var client string
	probation := false
	if l.records.Load() != 0 {
		client = l.Client(r)
		var wait time.Duration
		if probation, wait = l.admit(client); wait > 0 {
			metricThrottled.WithLabelValues(surface).Inc()
			return Throttled, wait
		}
	}
	ok := right()
	if ok && !probation && l.records.Load() == 0 {
		return Allowed, 0
	}
	if client == "" {
		client = l.Client(r)
	}
	failures, wait := l.record(client, probation, ok)
	if ok {
		return Allowed, 0
	}
	metricFailures.WithLabelValues(surface).Inc()
	attrs := []slog.Attr{slog.String("surface", surface), slog.String("client", client), slog.Int("failures", failures)}
	if wait > 0 {
		attrs = append(attrs, slog.Duration("throttled_for", wait))
	}
	l.log.LogAttrs(r.Context(), slog.LevelWarn, "authentication failed", attrs...)
	return Refused, 0
}

// Declare makes the failure and throttle counters of each surface exist at
// 0, so an alert on them sees 0, not "no data", before the first failure.
// Call it where the surface's check is set up, with the names Check gets.
func (l *Limiter) Declare(surfaces ...string) {
	for _, s := range surfaces {
		metricFailures.WithLabelValues(s)
		metricThrottled.WithLabelValues(s)
	}
}

// Wait is how long r's client must still wait before an attempt of its is
// checked; zero when it may try now.
func (l *Limiter) Wait(r *http.Request) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := l.lookup(l.Client(r), l.opts.Now())
	if rec == nil {
		return 0
	}
	return max(rec.blockedUntil.Sub(l.opts.Now()), 0)
}

// admit decides whether client may try now. probation tells that the attempt
// was admitted against failures on record (and holds an in-flight slot).
func (l *Limiter) admit(client string) (probation bool, wait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.opts.Now()
	l.prune(now)
	rec := l.lookup(client, now)
	if rec == nil {
		return false, 0
	}
	if now.Before(rec.blockedUntil) {
		return false, rec.blockedUntil.Sub(now)
	}
	if rec.inFlight >= max(l.opts.Free-rec.failures, 1) {
		// Its earlier attempts are still being checked: they decide the wait.
		return false, l.opts.FirstWait
	}
	rec.inFlight++
	return true, 0
}

// record notes an attempt's outcome and returns the client's failures and
// wait after it.
func (l *Limiter) record(client string, probation, ok bool) (int, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.opts.Now()
	rec := l.lookup(client, now)
	if rec != nil && probation && rec.inFlight > 0 {
		rec.inFlight--
	}
	if ok {
		if rec != nil {
			l.remove(rec)
		}
		return 0, 0
	}
	if rec == nil {
		rec = l.insert(client, now)
	}
	rec.failures++
	rec.lastFailure = now
	l.lru.MoveToFront(l.clients[client])
	var wait time.Duration
	if n := rec.failures - l.opts.Free; n >= 0 {
		wait = l.opts.MaxWait
		if n < 32 {
			wait = min(l.opts.FirstWait<<n, l.opts.MaxWait)
		}
		rec.blockedUntil = now.Add(wait)
	}
	return rec.failures, wait
}

// lookup returns client's record, dropping it when forgotten.
func (l *Limiter) lookup(client string, now time.Time) *record {
	el, ok := l.clients[client]
	if !ok {
		return nil
	}
	rec := el.Value.(*record)
	if l.forgotten(rec, now) {
		l.remove(rec)
		return nil
	}
	return rec
}

func (l *Limiter) forgotten(rec *record, now time.Time) bool {
	return rec.inFlight == 0 && !now.Before(rec.lastFailure.Add(l.opts.Forget)) && !now.Before(rec.blockedUntil)
}

// prune drops forgotten records from the back, the oldest failures, so
// that once an attack is over the checks go back to taking no lock.
func (l *Limiter) prune(now time.Time) {
	for back := l.lru.Back(); back != nil && l.forgotten(back.Value.(*record), now); back = l.lru.Back() {
		l.remove(back.Value.(*record))
	}
}

// insert adds a record for client, first dropping forgotten records and, at
// MaxClients, the one whose last failure is oldest.
func (l *Limiter) insert(client string, now time.Time) *record {
	l.prune(now)
	for len(l.clients) >= l.opts.MaxClients {
		l.remove(l.lru.Back().Value.(*record))
	}
	rec := &record{client: client, lastFailure: now}
	l.clients[client] = l.lru.PushFront(rec)
	l.records.Store(int64(len(l.clients)))
	return rec
}

func (l *Limiter) remove(rec *record) {
	if el, ok := l.clients[rec.client]; ok {
		l.lru.Remove(el)
		delete(l.clients, rec.client)
		l.records.Store(int64(len(l.clients)))
	}
}

// Client is the address r's failures count against: the peer's IP (an IPv6
// one by its /64), or, when the peer is a trusted proxy, the nearest address
// in X-Forwarded-For that is not one.
func (l *Limiter) Client(r *http.Request) string {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		// Not ip:port (a Unix socket, a test's made-up address): the whole
		// string is the client.
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			return host
		}
		return r.RemoteAddr
	}
	addr := peer.Addr().Unmap()
	if l.trusted(addr) {
		addr = l.forwardedFor(r, addr)
	}
	if addr.Is6() {
		return netip.PrefixFrom(addr, 64).Masked().String()
	}
	return addr.String()
}

func (l *Limiter) trusted(a netip.Addr) bool {
	for _, p := range l.opts.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedFor walks X-Forwarded-For from the right — the entries the
// trusted proxies appended — to the first address that is not a trusted
// proxy. An entry that is not an address ends the walk at the last proxy
// that vouched for it.
func (l *Limiter) forwardedFor(r *http.Request, proxy netip.Addr) netip.Addr {
	var hops []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(h, ",")...)
	}
	addr := proxy
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return addr
		}
		addr = hop.Unmap()
		if !l.trusted(addr) {
			return addr
		}
	}
	return addr
}

// ParseTrustedProxies reads a comma-separated list of IP addresses and CIDR
// prefixes.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if strings.Contains(f, "/") {
			p, err := netip.ParsePrefix(f)
			if err != nil {
				return nil, err
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, err
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
