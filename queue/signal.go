package queue

import (
	"sort"
	"sync"
	"sync/atomic"

	"switchyard/store"
)

// hub is the in-process side of one database: the wake-up signals of its
// queues and topics, the names declared in this process and the prepared
// statements. Senders and publishers wake the workers of the same process at
// once; other processes on the same file find the work by polling.
//
// The database keeps its hub (store.DB.Ext), so a hub lives as long as its
// database: closing the database closes the hub's statements and drops it.
type hub struct {
	mu       sync.Mutex
	signals  map[string]*signal
	declared map[string]bool
	stmts    stmtCache
}

// hubKey is the key of the queue package's hub among a database's Ext values.
type hubKey struct{}

func newHub() any { return &hub{signals: map[string]*signal{}, declared: map[string]bool{}} }

func hubFor(db *store.DB) *hub { return db.Ext(hubKey{}, newHub).(*hub) }

// Close closes the hub's prepared statements; the database calls it as it closes.
func (h *hub) Close() error { return h.stmts.close() }

// signal returns the signal of the queue or topic with the given name
// (queues and topics are told apart by a prefix).
func (h *hub) signal(name string) *signal {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.signals[name]
	if !ok {
		s = &signal{ch: make(chan struct{})}
		h.signals[name] = s
	}
	return s
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
}

// listener is what a worker or subscriber was told since it last looked.
type listener struct {
	// woken is set by every notification.
	woken atomic.Bool
	// dirty has bit p%64 set for each partition p published to since the
	// subscriber last looked, so it rereads only those partitions' logs.
	dirty atomic.Uint64
	// uncommitted is set by publishes made inside a caller's transaction,
	// before it commits: the subscriber, which reads through the read pool,
	// must first let the writer finish that transaction.
	uncommitted atomic.Bool
}

// wait returns a channel that is closed at the next notify.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) notify() {
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

// published tells the listeners that partition p has a new record and wakes
// them; committed is false inside a caller's transaction.
func (s *signal) published(p int, committed bool) {
	bit := uint64(1) << (p % 64)
	s.mu.Lock()
	for l := range s.listeners {
		if !committed {
			l.uncommitted.Store(true)
		}
		l.dirty.Or(bit)
		l.woken.Store(true)
	}
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}
