// Package history is the shape of the console's "what happened to X" search:
// the items each domain package finds about a search term in its own tables,
// and the few rules for reading a term (is it a number, a UUID, a trace id).
// It is a leaf: the domain packages build Items, web merges and shows them.
package history

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"switchyard/telemetry"
)

// Flow is the subsystem an item belongs to.
type Flow string

// The three flows, as the console names them.
const (
	FlowBot      Flow = "bot outbox"
	FlowReferral Flow = "referral"
	FlowChat     Flow = "chat"
	// FlowQueues are the queues under all three: a message by its id or
	// its idempotency key, live or dead-lettered.
	FlowQueues Flow = "queues"
)

// Item is one thing a package knows about a search term: an event, a row's
// change, a delivery. Summary holds no PII: phone numbers masked, no names,
// no message texts.
type Item struct {
	At      time.Time
	Flow    Flow
	Kind    string // "outbox event emitted", "acked", "funnel stage", …
	Summary string
	IDs     []ID
	// Link is the console page of the item ("" when there is none).
	Link string
	// TraceID is the trace the item's row recorded ("" when none was).
	TraceID string
}

// ID is one of an item's ids, named ("event", "telegram id", "thread").
type ID struct{ Name, Value string }

// Found is what a package found: its items, and whether one of its bounded
// queries may have left some out.
type Found struct {
	Items []Item
	Cut   bool
}

// Add appends items, noting a cut when a query returned limit rows (it may
// have had more).
func (f *Found) Add(limit, rows int, items ...Item) {
	f.Items = append(f.Items, items...)
	if rows >= limit {
		f.Cut = true
	}
}

// Sort orders items by time, oldest first; items of one time keep their order.
func Sort(items []Item) {
	slices.SortStableFunc(items, func(a, b Item) int { return a.At.Compare(b.At) })
}

// TraceID is the trace id of a traceparent, or "" when it is empty or
// malformed (no trace was recorded).
func TraceID(traceparent string) string {
	sc, ok := telemetry.Parse(traceparent)
	if !ok {
		return ""
	}
	return sc.TraceID().String()
}

var (
	traceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)
	uuidPattern    = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
)

// IsTraceID reports whether term is a W3C trace id: 32 lower-case hex
// digits, not all zero. A malformed one is simply not a trace id.
func IsTraceID(term string) bool {
	return traceIDPattern.MatchString(term) && strings.Trim(term, "0") != ""
}

// IsUUID reports whether term is a UUID (an identity user id, a message id).
func IsUUID(term string) bool { return uuidPattern.MatchString(term) }

// Number reads term as a positive decimal id (a Telegram id, a magnet uid,
// an event or message id); ok is false for anything else.
func Number(term string) (n int64, ok bool) {
	if term == "" || term[0] < '0' || term[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(term, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// Term is a search term as typed, trimmed.
func Term(q string) string { return strings.TrimSpace(q) }

// Searchable reports whether term can name anything: not empty, and no
// longer than the longest id (an idempotency key is shorter than 200).
func Searchable(term string) bool { return term != "" && len(term) <= 200 }
