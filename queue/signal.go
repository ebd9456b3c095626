package queue

import (
	"context"
	"database/sql"
	"sort"
	"sync"
	"sync/atomic"

	"switchyard/store"
)

// hub is the in-process side of one database: the wake-up signals of its
// queues and topics, the names declared in this process and the prepared
// statements. Senders and publishers wake the workers of the same process at
// once; on PostgreSQL the other processes on the database are woken by a
// broadcast (notify.go), and on SQLite they find the work by polling.
//
// The database keeps its hub (store.DB.Ext), so a hub lives as long as its
// database: closing the database closes the hub's statements and drops it.
type hub struct {
	db       *store.DB
	peers    func() // stops hearing the other processes' wake-ups
	clock    func() // stops hearing the store's clock move
	mu       sync.Mutex
	signals  map[string]*signal
	declared map[string]bool
	stmts    stmtCache

	scopesMu sync.Mutex
	scopes   map[*sql.Tx]*scope // the record handlers running now, by transaction
}

// hubKey is the key of the queue package's hub among a database's Ext values.
type hubKey struct{}

func newHub(db *store.DB) *hub {
	h := &hub{db: db, signals: map[string]*signal{}, declared: map[string]bool{}, scopes: map[*sql.Tx]*scope{}}
	h.peers = h.hearPeers()
	// A clock moved by hand (a test's) makes delays, backoffs and
	// visibility timeouts due at once: every worker and subscriber of this
	// process looks again now, as after a missed broadcast, rather than at
	// its next poll.
	h.clock = db.OnClockMove(h.wakeAll)
	return h
}

func hubFor(db *store.DB) *hub { return db.Ext(hubKey{}, func() any { return newHub(db) }).(*hub) }

// Close stops hearing other processes and closes the hub's prepared
// statements; the database calls it as it closes.
func (h *hub) Close() error {
	h.peers()
	h.clock()
	return h.stmts.close()
}

// signal returns the signal of the queue or topic with the given name
// (queues and topics are told apart by a prefix).
func (h *hub) signal(name string) *signal {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.signals[name]
	if !ok {
		s = &signal{ch: make(chan struct{}), hub: h, wire: wireName(name)}
		h.signals[name] = s
	}
	return s
}

// afterCommit arranges for fn, what a send or a publish in tx does outside
// the database (a wake-up, a metric), to run once tx has committed with that
// send or publish in it: at the commit of a transaction of db.Tx
// (store.DB.AfterCommit), and never when the savepoint of the record handler
// that made it rolls back (openScope).
func afterCommit(db *store.DB, tx *sql.Tx, fn func()) {
	h := hubFor(db)
	h.scopesMu.Lock()
	sc, ok := h.scopes[tx]
	if ok {
		sc.after = append(sc.after, fn)
	}
	h.scopesMu.Unlock()
	if !ok {
		db.AfterCommit(tx, fn)
	}
}

// scope is what the sends and publishes of one record handler, running in a
// savepoint of tx that may roll back while tx commits, leave for later: the
// functions to run after the commit, and the records to write before it.
type scope struct {
	after   []func()
	records []*staged
}

// stageInScope adds recs, published in tx, to the scope open in tx and
// reports whether there was one.
func (h *hub) stageInScope(tx *sql.Tx, recs []*staged) bool {
	h.scopesMu.Lock()
	defer h.scopesMu.Unlock()
	sc, ok := h.scopes[tx]
	if ok {
		sc.records = append(sc.records, recs...)
	}
	return ok
}

// openScope collects what afterCommit and the publishes are given in tx from
// now on, until keepScope or closeScope: a record handler runs in a
// savepoint of tx that may roll back while tx commits.
func (h *hub) openScope(tx *sql.Tx) *scope {
	sc := new(scope)
	h.scopesMu.Lock()
	h.scopes[tx] = sc
	h.scopesMu.Unlock()
	return sc
}

// keepScope closes the scope of a record whose savepoint was released: its
// records join tx's other publishes, written just before the commit, and its
// after-commit functions wait for the commit.
func (h *hub) keepScope(ctx context.Context, db *store.DB, tx *sql.Tx, sc *scope) error {
	h.closeScope(tx, sc)
	if err := stageTx(ctx, db, tx, sc.records); err != nil {
		return err
	}
	for _, fn := range sc.after {
		db.AfterCommit(tx, fn)
	}
	return nil
}

// closeScope closes the scope of a record whose savepoint rolled back (or
// whose transaction fails): its records are never written and its
// after-commit functions never run.
func (h *hub) closeScope(tx *sql.Tx, sc *scope) {
	h.scopesMu.Lock()
	if h.scopes[tx] == sc {
		delete(h.scopes, tx)
	}
	h.scopesMu.Unlock()
}

func (h *hub) declare(queue string) {
	h.mu.Lock()
	h.declared[queue] = true
	h.mu.Unlock()
}

func (h *hub) declaredQueues() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := make([]string, 0, len(h.declared))
	for n := range h.declared {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func queueSignal(db *store.DB, name string) *signal { return hubFor(db).signal("q:" + name) }
func topicSignal(db *store.DB, name string) *signal { return hubFor(db).signal("t:" + name) }
func groupSignal(db *store.DB, topic, group string) *signal {
	return hubFor(db).signal("g:" + topic + "\x00" + group)
}

// signal is a broadcast wake-up: every waiter of the current generation wakes
// when notify closes its channel. A loop that does other work between waits
// also registers a listener, whose flags keep what it was told meanwhile:
// it takes the channel, reads and clears its flags, works, then waits.
type signal struct {
	mu        sync.Mutex
	ch        chan struct{}
	listeners map[*listener]struct{}

	// hub and wire tell the other processes on the database what notify
	// and published tell this one's waiters (notify.go).
	hub   *hub
	wire  string
	wires []string // wire with each partition, as published made them
}

// listener is what a worker or subscriber was told since it last looked.
type listener struct {
	// woken is set by every notification.
	woken atomic.Bool
	// dirty has bit p%64 set for each partition p published to since the
	// subscriber last looked, so it rereads only those partitions' logs.
	dirty atomic.Uint64
}

// wait returns a channel that is closed at the next notify.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

// notify wakes every waiter, in this process and (after a commit, which is
// where notify is called) in the others on the database.
func (s *signal) notify() {
	s.wake()
	s.tellPeers(-1)
}

// wake wakes the waiters of this process.
func (s *signal) wake() {
	s.mu.Lock()
	for l := range s.listeners {
		l.woken.Store(true)
	}
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// listen registers a listener that published fills.
func (s *signal) listen() *listener {
	l := new(listener)
	s.mu.Lock()
	if s.listeners == nil {
		s.listeners = map[*listener]struct{}{}
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	return l
}

func (s *signal) unlisten(l *listener) {
	s.mu.Lock()
	delete(s.listeners, l)
	s.mu.Unlock()
}

// published tells the listeners, in this process and in the others on the
// database, that partition p has a new, committed record and wakes them.
func (s *signal) published(p int) {
	s.wakeDirty(uint64(1) << (p % 64))
	s.tellPeers(p)
}

// wakeDirty marks the partitions of bit dirty for this process's listeners
// and wakes them.
func (s *signal) wakeDirty(bit uint64) {
	s.mu.Lock()
	for l := range s.listeners {
		l.dirty.Or(bit)
		l.woken.Store(true)
	}
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}
