package store

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Broadcasts carry wake-ups between the processes (instances) that share one
// PostgreSQL database. A process that commits work for others — a queue send,
// a topic publish — wakes its own waiters in memory; Broadcast tells the other
// processes, through PostgreSQL's NOTIFY, and OnBroadcast hears what they
// tell. A broadcast is only a hint to look now rather than at the next poll:
// it carries no data, may come late, twice, or (while the listening
// connection is down) not at all, so every waiter keeps polling as well.
//
// The NOTIFY never runs inside the caller's transaction (one NOTIFY per
// transaction serialises every commit on the server's notification lock): a
// broadcast is gathered in memory and sent, after the commit that made it
// true, on a connection of its own. Broadcasts are gathered: the first after
// a quiet spell goes out at once, later ones at most once per interval
// (Options.BroadcastInterval, stretched up to ten times while broadcasts keep
// coming), so that the same channel and payload given a thousand times go out
// a few times, and all that is pending goes out in one statement. One more connection per database listens (LISTEN), reconnects
// with a backoff when it drops, and after each (re)connection tells every
// subscriber that it may have missed something (Notice.Missed).
//
// On SQLite, Broadcast and OnBroadcast do nothing: other processes on the
// file have no channel to hear on and find the work by polling.

// DefaultBroadcastInterval is Options.BroadcastInterval when zero: the
// shortest time between two statements that send broadcasts.
const DefaultBroadcastInterval = 5 * time.Millisecond

// pgChannel is the one PostgreSQL channel every broadcast of the database
// travels on; the store's own channels are a prefix of the payload, so the
// listening connection LISTENs once and never needs to change.
const pgChannel = "switchyard"

// maxWire is the longest payload NOTIFY takes: it must be shorter than 8000
// bytes.
const maxWire = 7999

// The roles of the notifier's two connections, as pg_stat_activity's
// application_name ends.
const (
	roleNotify = "(notify)"
	roleListen = "(listen)"
)

// maxIntervalFactor bounds how far a steady stream of broadcasts stretches
// the interval between statements (see sendLoop).
const maxIntervalFactor = 10

// maxBatch caps the payloads of one statement.
const maxBatch = 1000

// listenCheck is how long the listening connection waits for a notification
// before it checks that the server still answers: a connection whose server
// vanished without closing it would otherwise wait for ever.
const listenCheck = 30 * time.Second

// Notice is what a BroadcastFunc is told.
type Notice struct {
	// Payload is the payload another process gave Broadcast; empty when
	// Missed.
	Payload string
	// Missed says broadcasts on the channel may have been missed: the
	// listening connection was just (re)established, or a payload was too
	// long or not valid text to carry. Look at everything the channel
	// covers.
	Missed bool
}

// BroadcastFunc hears the broadcasts of other processes on one channel. It
// runs on the listening goroutine, one call at a time, so it must be quick
// (wake something up) and must not block.
type BroadcastFunc func(Notice)

// Broadcast tells every other process on the database that payload, on
// channel, has news: their OnBroadcast functions of channel hear it soon —
// at once after a quiet spell, within ten BroadcastIntervals in a busy one,
// plus a round trip. Call it once
// the news is committed — from AfterCommit, never inside a transaction, so
// that a process told looks after the fact. It never blocks and never
// fails: a broadcast that cannot be sent is sent later, or the others find
// the news by polling. An empty payload means everything on channel, and is
// heard as Notice.Missed; so is a payload that NOTIFY cannot carry (too
// long, not UTF-8, a NUL byte).
// The process's own broadcasts are not delivered back to it. On SQLite, and
// with broadcasts turned off, it does nothing.
//
// channel is a short name of letters, digits and ".-_:" that says which
// subscribers it is for; a bad one is a wiring mistake and panics.
func (db *DB) Broadcast(channel, payload string) {
	checkChannel(channel)
	if db.notes != nil {
		db.notes.broadcast(channel, payload)
	}
}

// OnBroadcast calls fn with every broadcast another process on the database
// sends on channel, and with a Missed notice whenever some may have been
// missed, until stop is called or the database closes. On PostgreSQL the
// first call opens the listening connection; until it is up (and while it
// is down) nothing is heard, and fn is told Missed once it is. On SQLite fn
// is never called.
func (db *DB) OnBroadcast(channel string, fn BroadcastFunc) (stop func()) {
	checkChannel(channel)
	if fn == nil {
		panic("store: OnBroadcast with a nil function")
	}
	if db.notes == nil {
		return func() {}
	}
	return db.notes.subscribe(channel, fn)
}

// BroadcastStats counts what the database's broadcasts did since Open.
type BroadcastStats struct {
	// Sent counts the payloads sent with NOTIFY, Statements the statements
	// that sent them.
	Sent, Statements int64
	// Received counts the notifications of other processes heard.
	Received int64
	// Listens counts the times the listening connection was established
	// (and its subscribers told Missed).
	Listens int64
}

// BroadcastStats returns the counts of the database's broadcasts (zero on
// SQLite).
func (db *DB) BroadcastStats() BroadcastStats {
	if db.notes == nil {
		return BroadcastStats{}
	}
	n := db.notes
	return BroadcastStats{Sent: n.sent.Load(), Statements: n.statements.Load(), Received: n.received.Load(), Listens: n.listens.Load()}
}

var metricNotifications = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchyard_store_notifications_total",
	Help: "PostgreSQL notifications (wake-ups between instances) sent, and received from other instances.",
}, []string{"direction"})

func init() {
	metricNotifications.WithLabelValues("sent")
	metricNotifications.WithLabelValues("received")
}

func checkChannel(channel string) {
	if channel == "" || len(channel) > 64 {
		panic("store: a broadcast channel is 1 to 64 characters")
	}
	for _, c := range []byte(channel) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_', c == ':':
		default:
			panic("store: a broadcast channel is letters, digits and .-_: — not " + channel)
		}
	}
}

// note is one pending broadcast.
type note struct{ channel, payload string }

// wire is the NOTIFY payload of a note: "channel payload", or "channel"
// alone for everything on it.
func (n note) wire() string {
	if n.payload == "" {
		return n.channel
	}
	return n.channel + " " + n.payload
}

// carriable reports whether NOTIFY can carry payload on channel.
func carriable(channel, payload string) bool {
	return len(channel)+1+len(payload) <= maxWire && utf8.ValidString(payload) && !strings.ContainsRune(payload, 0)
}

// notifier is a PostgreSQL database's broadcasts: the pending ones and their
// sender, the subscribers and their listener.
type notifier struct {
	cfg      *pgx.ConnConfig
	interval time.Duration
	log      *slog.Logger

	ctx    context.Context // ends at close
	cancel context.CancelFunc
	wg     sync.WaitGroup // the sender and the listener

	mu        sync.Mutex
	closed    bool
	pending   map[note]struct{}
	sending   bool // the sender runs
	listening bool // the listener runs
	kick      chan struct{}

	subsMu sync.Mutex
	subs   atomic.Pointer[map[string][]*subscriber] // copied on write

	senderPID   atomic.Uint32 // the sending connection's backend, whose notifications are our own
	listenerPID atomic.Uint32

	sent, statements, received, listens atomic.Int64
}

type subscriber struct{ fn BroadcastFunc }

// newNotifier returns the broadcasts of the database cfg connects to, or
// nil when interval turns them off. It opens no connection until the first
// broadcast or subscriber.
func newNotifier(cfg *pgx.ConnConfig, interval time.Duration, log *slog.Logger) *notifier {
	if interval < 0 {
		return nil
	}
	if interval == 0 {
		interval = DefaultBroadcastInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &notifier{cfg: cfg, interval: interval, log: log, ctx: ctx, cancel: cancel, pending: map[note]struct{}{}, kick: make(chan struct{}, 1)}
	n.subs.Store(&map[string][]*subscriber{})
	return n
}

func (n *notifier) broadcast(channel, payload string) {
	if !carriable(channel, payload) {
		payload = ""
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.pending[note{channel, payload}] = struct{}{}
	if !n.sending {
		n.sending = true
		n.wg.Add(1)
		go n.sendLoop()
	}
	n.mu.Unlock()
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

func (n *notifier) subscribe(channel string, fn BroadcastFunc) (stop func()) {
	s := &subscriber{fn: fn}
	n.subsMu.Lock()
	next := maps.Clone(*n.subs.Load())
	next[channel] = append(next[channel][:len(next[channel]):len(next[channel])], s)
	n.subs.Store(&next)
	n.subsMu.Unlock()

	n.mu.Lock()
	if !n.closed && !n.listening {
		n.listening = true
		n.wg.Add(1)
		go n.listenLoop()
	}
	n.mu.Unlock()

	return sync.OnceFunc(func() {
		n.subsMu.Lock()
		defer n.subsMu.Unlock()
		next := maps.Clone(*n.subs.Load())
		list := make([]*subscriber, 0, len(next[channel]))
		for _, o := range next[channel] {
			if o != s {
				list = append(list, o)
			}
		}
		if len(list) == 0 {
			delete(next, channel)
		} else {
			next[channel] = list
		}
		n.subs.Store(&next)
	})
}

// close stops the sender (after one last attempt at what is pending, on the
// connection it has) and the listener, and waits for both.
func (n *notifier) close() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
}

// connect opens a connection of the notifier's own, named role in
// pg_stat_activity's application_name. Its contexts end by a deadline on the
// socket rather than by a cancel request, so that an interrupted wait leaves
// the connection usable and no cancel request can land on a later statement.
//
// The sending connection commits without waiting for its WAL to be flushed
// (synchronous_commit off): a transaction that notifies holds a lock that
// serialises every notifying commit of the server until its commit is done,
// and a wake-up needs no durability — what it announces was committed, durably,
// before it was broadcast.
func (n *notifier) connect(ctx context.Context, role string) (*pgx.Conn, error) {
	cfg := n.cfg.Copy()
	cfg.RuntimeParams["application_name"] += " " + role
	if role == roleNotify {
		cfg.RuntimeParams["synchronous_commit"] = "off"
	}
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

func closeConn(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// backoff is the pause after the k-th failure in a row: none after the first
// (a connection that went stale while idle is simply replaced), then 100 ms
// doubling to 5 s, jittered.
func backoff(k int) time.Duration {
	if k <= 1 {
		return 0
	}
	d := min(100*time.Millisecond<<min(k-2, 6), 5*time.Second)
	return d/2 + rand.N(d/2+1)
}

// take removes and returns what is pending, at most maxBatch notes.
func (n *notifier) take() []note {
	n.mu.Lock()
	defer n.mu.Unlock()
	batch := make([]note, 0, min(len(n.pending), maxBatch))
	for k := range n.pending {
		if len(batch) == maxBatch {
			break
		}
		batch = append(batch, k)
		delete(n.pending, k)
	}
	return batch
}

// putBack returns notes that could not be sent to the pending ones.
func (n *notifier) putBack(batch []note) {
	n.mu.Lock()
	for _, k := range batch {
		n.pending[k] = struct{}{}
	}
	n.mu.Unlock()
}

// notifyQuery sends each payload of $2 on channel $1, in one transaction.
const notifyQuery = `select pg_notify($1, p) from unnest($2::text[]) as p`

// sendLoop sends what is pending: at once when nothing went out for a
// while, else at the end of the current interval since the last statement,
// so a burst of broadcasts costs one statement per interval. The interval
// starts at the configured one and doubles, up to maxIntervalFactor times
// it, while broadcasts keep coming before it has passed (the others are
// woken often enough, and each wake-up costs them a look); it falls back
// once twice the interval passes without any.
func (n *notifier) sendLoop() {
	defer n.wg.Done()
	var (
		conn     *pgx.Conn
		last     time.Time
		failures int
		interval = n.interval
	)
	defer func() {
		if conn != nil {
			n.flush(conn)
			closeConn(conn)
		}
	}()
	for {
		select {
		case <-n.kick:
		case <-n.ctx.Done():
			return
		}
		switch since := time.Since(last); {
		case since < interval:
			if !Sleep(n.ctx, interval-since) {
				return
			}
			interval = min(2*interval, maxIntervalFactor*n.interval)
		case since >= 2*interval:
			interval = n.interval
		}
		for n.ctx.Err() == nil {
			if conn == nil {
				c, err := n.connect(n.ctx, roleNotify)
				if err != nil {
					if n.ctx.Err() != nil {
						return
					}
					if failures == 0 {
						n.log.Warn("store: could not open the connection that sends wake-ups to other instances; will retry (they poll meanwhile)", slog.Any("err", err))
					}
					failures++
					if !Sleep(n.ctx, backoff(failures)) {
						return
					}
					continue
				}
				conn = c
				n.senderPID.Store(conn.PgConn().PID())
			}
			batch := n.take()
			if len(batch) == 0 {
				break
			}
			last = time.Now()
			if err := n.send(n.ctx, conn, batch); err != nil {
				n.putBack(batch)
				closeConn(conn)
				conn = nil
				if n.ctx.Err() != nil {
					return
				}
				if failures == 0 {
					n.log.Warn("store: could not send wake-ups to other instances; will retry (they poll meanwhile)", slog.Any("err", err))
				}
				failures++
				if !Sleep(n.ctx, backoff(failures)) {
					return
				}
				continue
			}
			if failures > 0 {
				n.log.Info("store: sending wake-ups to other instances again")
				failures = 0
			}
			if len(batch) < maxBatch {
				break // what came meanwhile waits for the interval: a kick is pending
			}
		}
	}
}

func (n *notifier) send(ctx context.Context, conn *pgx.Conn, batch []note) error {
	wires := make([]string, len(batch))
	for i, k := range batch {
		wires[i] = k.wire()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, notifyQuery, pgChannel, wires); err != nil {
		return err
	}
	metricNotifications.WithLabelValues("sent").Add(float64(len(batch)))
	n.statements.Add(1)
	n.sent.Add(int64(len(batch)))
	return nil
}

// flush makes one last, short attempt at what is pending, as the database
// closes.
func (n *notifier) flush(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for batch := n.take(); len(batch) > 0; batch = n.take() {
		if n.send(ctx, conn, batch) != nil {
			return
		}
	}
}

// listenLoop keeps a connection listening, reconnecting with a backoff when
// it drops, until the notifier closes.
func (n *notifier) listenLoop() {
	defer n.wg.Done()
	failures := 0
	for n.ctx.Err() == nil {
		conn, err := n.connect(n.ctx, roleListen)
		if err == nil {
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			_, err = conn.Exec(ctx, "listen "+pgChannel)
			cancel()
			if err != nil {
				closeConn(conn)
			}
		}
		if err == nil {
			if failures > 0 {
				n.log.Info("store: listening for other instances' wake-ups again")
			}
			n.listenerPID.Store(conn.PgConn().PID())
			// Whatever was broadcast while nobody listened is lost: every
			// subscriber looks at everything once.
			n.deliverAll(Notice{Missed: true})
			n.listens.Add(1)
			since := time.Now()
			err = n.serve(conn)
			closeConn(conn)
			n.listenerPID.Store(0)
			if n.ctx.Err() != nil {
				return
			}
			if time.Since(since) > time.Minute {
				failures = 0 // a connection that served a while ends a run of failures
			}
		}
		if n.ctx.Err() != nil {
			return
		}
		if failures == 0 {
			n.log.Warn("store: not listening for other instances' wake-ups; reconnecting (polling meanwhile)", slog.Any("err", err))
		}
		failures++
		if !Sleep(n.ctx, backoff(failures)) {
			return
		}
	}
}

// serve delivers the notifications conn receives until it fails or the
// notifier closes.
func (n *notifier) serve(conn *pgx.Conn) error {
	for {
		ctx, cancel := context.WithTimeout(n.ctx, listenCheck)
		msg, err := conn.WaitForNotification(ctx)
		cancel()
		if n.ctx.Err() != nil {
			return n.ctx.Err()
		}
		if err != nil {
			if conn.IsClosed() || !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			// Quiet for a while: make sure the server is still there.
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			err := conn.Ping(ctx)
			cancel()
			if err != nil {
				return err
			}
			continue
		}
		n.deliver(msg)
	}
}

func (n *notifier) deliver(msg *pgconn.Notification) {
	if msg == nil || msg.Channel != pgChannel {
		return
	}
	if pid := n.senderPID.Load(); pid != 0 && msg.PID == pid {
		return // our own
	}
	channel, payload, _ := strings.Cut(msg.Payload, " ")
	subs := (*n.subs.Load())[channel]
	if len(subs) == 0 {
		return
	}
	n.received.Add(1)
	metricNotifications.WithLabelValues("received").Inc()
	notice := Notice{Payload: payload, Missed: payload == ""}
	for _, s := range subs {
		call(s.fn, notice)
	}
}

func (n *notifier) deliverAll(notice Notice) {
	for _, subs := range *n.subs.Load() {
		for _, s := range subs {
			call(s.fn, notice)
		}
	}
}

// call runs fn; one that panics is logged and the listener goes on.
func call(fn BroadcastFunc, notice Notice) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("store: a broadcast function panicked", slog.Any("panic", p))
		}
	}()
	fn(notice)
}
