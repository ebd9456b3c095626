package queue

import (
	"strconv"
	"strings"

	"switchyard/store"
)

// Wake-ups across processes. A send, a publish, a redrive or an unparked
// message wakes the signal of its queue, topic or group once committed
// (afterCommit, AfterCommit), and so does a member that joins a consumer
// group or hands partitions over (Subscription.announce, after its lease
// writes). On PostgreSQL the signal also broadcasts the same wake-up to the
// other processes on the database (store.DB.Broadcast: after the commit,
// never inside the transaction, gathered over a few milliseconds), and the
// hub of each of those wakes its own signal of that name exactly as a local
// commit would: a queue's workers receive at once; a topic's subscribers
// reread only the partition published to; a group's members look at its
// leases and balance. A wake-up that does not arrive costs only latency:
// workers and subscribers poll as well, and when the listening connection
// was down the hub wakes every signal it has, with every partition marked,
// so that each looks once at everything.
//
// On SQLite nothing is broadcast; the other processes on the file poll.

// peerChannel is the queue package's channel among the database's broadcasts.
const peerChannel = "queue"

// maxCachedPartitions bounds the wire names a topic's signal keeps, one per
// partition published to.
const maxCachedPartitions = 1024

// wireName is how the signal called name travels in a broadcast: as it is
// when it is printable ASCII without a space, a quote or a backslash (every
// name that starts q:, t:, g:, l: does not start with a quote), else
// Go-quoted, which keeps it valid UTF-8 without NULs, as NOTIFY needs.
func wireName(name string) string {
	for _, c := range []byte(name) {
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.Quote(name)
		}
	}
	return name
}

// parseWire reads a payload made by tellPeers: the signal's name, and the
// partition published to, or -1 for a plain wake-up.
func parseWire(payload string) (name string, partition int, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(payload, `"`):
		q, err := strconv.QuotedPrefix(payload)
		if err != nil {
			return "", 0, false
		}
		if name, err = strconv.Unquote(q); err != nil {
			return "", 0, false
		}
		rest = payload[len(q):]
	default:
		name = payload
		if i := strings.IndexByte(payload, ' '); i >= 0 {
			name, rest = payload[:i], payload[i:]
		}
	}
	if name == "" {
		return "", 0, false
	}
	if rest == "" {
		return name, -1, true
	}
	p, err := strconv.Atoi(strings.TrimPrefix(rest, " "))
	if !strings.HasPrefix(rest, " ") || err != nil || p < 0 {
		return "", 0, false
	}
	return name, p, true
}

// tellPeers broadcasts to the other processes on the database what the
// signal just told this one's waiters: a wake-up (p < 0), or a record
// published to partition p.
func (s *signal) tellPeers(p int) {
	if s.hub == nil || !s.hub.db.Postgres() {
		return
	}
	payload := s.wire
	if p >= 0 {
		payload = s.partitionWire(p)
	}
	s.hub.db.Broadcast(peerChannel, payload)
}

// partitionWire is the payload of a publish to partition p, made once.
func (s *signal) partitionWire(p int) string {
	if p >= maxCachedPartitions {
		return s.wire + " " + strconv.Itoa(p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p >= len(s.wires) {
		s.wires = append(s.wires, make([]string, p+1-len(s.wires))...)
	}
	if s.wires[p] == "" {
		s.wires[p] = s.wire + " " + strconv.Itoa(p)
	}
	return s.wires[p]
}

// hearPeers makes the hub wake its signals at the other processes'
// broadcasts; it returns the function that stops it.
func (h *hub) hearPeers() (stop func()) {
	return h.db.OnBroadcast(peerChannel, h.heard)
}

// wakeAll wakes every signal of the hub with every partition marked, so
// that each waiter looks once at everything.
func (h *hub) wakeAll() {
	h.mu.Lock()
	all := make([]*signal, 0, len(h.signals))
	for _, s := range h.signals {
		all = append(all, s)
	}
	h.mu.Unlock()
	for _, s := range all {
		s.wakeDirty(^uint64(0))
	}
}

// heard wakes the signal another process woke, as a commit here would. A
// signal nobody in this process has asked for is not made: nobody here
// waits on it.
func (h *hub) heard(n store.Notice) {
	if n.Missed {
		h.wakeAll()
		return
	}
	name, p, ok := parseWire(n.Payload)
	if !ok {
		return
	}
	h.mu.Lock()
	s := h.signals[name]
	h.mu.Unlock()
	switch {
	case s == nil:
	case p < 0:
		s.wake()
	default:
		s.wakeDirty(uint64(1) << (p % 64))
	}
}
