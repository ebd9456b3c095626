package queue

import (
	"sort"
	"sync"
	"sync/atomic"

	"switchyard/store"
)

// hub is the in-process side of one database: the wake-up signals of its
// queues and topics, and the names declared in this process. Senders and
// publishers wake the workers of the same process at once; other processes on
// the same file find the work by polling.
type hub struct {
	mu       sync.Mutex
	signals  map[string]*signal
	declared map[string]bool
	stmts    stmtCache
}

var hubs sync.Map // *store.DB → *hub

func hubFor(db *store.DB) *hub {
	if h, ok := hubs.Load(db); ok {
		return h.(*hub)
	}
	h, _ := hubs.LoadOrStore(db, &hub{signals: map[string]*signal{}, declared: map[string]bool{}})
	return h.(*hub)
}

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
// when notify closes its channel.
type signal struct {
	mu sync.Mutex
	ch chan struct{}
	// uncommitted is set by notifications made inside a caller's transaction,
	// before it commits; a waiter that reads through the read pool must first
	// let the writer finish that transaction.
	uncommitted atomic.Bool
	// listeners are the subscribers' dirty masks: bit p%64 is set for each
	// partition p published to since the subscriber last looked, so it reads
	// only those partitions' logs.
	listeners map[*atomic.Uint64]struct{}
}

// listen registers a dirty mask that markPartition fills.
func (s *signal) listen() *atomic.Uint64 {
	m := new(atomic.Uint64)
	s.mu.Lock()
	if s.listeners == nil {
		s.listeners = map[*atomic.Uint64]struct{}{}
	}
	s.listeners[m] = struct{}{}
	s.mu.Unlock()
	return m
}

func (s *signal) unlisten(m *atomic.Uint64) {
	s.mu.Lock()
	delete(s.listeners, m)
	s.mu.Unlock()
}

func (s *signal) markPartition(p int) {
	bit := uint64(1) << (p % 64)
	s.mu.Lock()
	for m := range s.listeners {
		m.Or(bit)
	}
	s.mu.Unlock()
}

// wait returns a channel that is closed at the next notify.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch
}

func (s *signal) notify() {
	s.mu.Lock()
	close(s.ch)
	s.ch = make(chan struct{})
	s.mu.Unlock()
}

// notifyUncommitted wakes waiters for writes that are not committed yet.
func (s *signal) notifyUncommitted() {
	s.uncommitted.Store(true)
	s.notify()
}
