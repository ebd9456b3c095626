package telemetry

import (
	"context"
	"slices"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"switchyard/mask"
)

// SpanRecord is a finished span as the console shows it.
type SpanRecord struct {
	TraceID  string
	SpanID   string
	ParentID string // "" for a root span
	Name     string
	Kind     string
	Start    time.Time
	End      time.Time
	Error    bool   // the span's status is Error
	Status   string // the status description
	// Attributes are the span's attributes as strings, masked again on the
	// way in (mask.Field), in the order the span has them.
	Attributes []Attr
	// Links are the spans this one follows from, as "trace id/span id".
	Links []Link
}

// Attr is one attribute of a SpanRecord.
type Attr struct{ Key, Value string }

// Link is one link of a SpanRecord.
type Link struct{ TraceID, SpanID string }

// Duration is how long the span ran.
func (s SpanRecord) Duration() time.Duration { return s.End.Sub(s.Start) }

// Ring is a span processor that keeps the most recent finished spans in a
// fixed-size ring, so the console can show a trace with no collector at all.
// Its memory is bounded by its size: the oldest span gives way to the newest.
type Ring struct {
	mu    sync.Mutex
	spans []SpanRecord
	next  int  // where the next span goes
	full  bool // spans has wrapped around
}

// NewRing returns a ring keeping size spans.
func NewRing(size int) *Ring { return &Ring{spans: make([]SpanRecord, size)} }

// OnStart does nothing: a span is kept once it ends.
func (r *Ring) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd keeps s.
func (r *Ring) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	rec := SpanRecord{
		TraceID: s.SpanContext().TraceID().String(),
		SpanID:  s.SpanContext().SpanID().String(),
		Name:    s.Name(),
		Kind:    s.SpanKind().String(),
		Start:   s.StartTime(),
		End:     s.EndTime(),
		Status:  s.Status().Description,
		Error:   s.Status().Code == 1, // codes.Error
	}
	if p := s.Parent(); p.IsValid() {
		rec.ParentID = p.SpanID().String()
	}
	for _, a := range s.Attributes() {
		k := string(a.Key)
		rec.Attributes = append(rec.Attributes, Attr{Key: k, Value: mask.Field(k, a.Value.String())})
	}
	for _, l := range s.Links() {
		rec.Links = append(rec.Links, Link{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String()})
	}
	r.mu.Lock()
	r.spans[r.next] = rec
	r.next++
	if r.next == len(r.spans) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// Shutdown does nothing.
func (r *Ring) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing: spans are kept as they end.
func (r *Ring) ForceFlush(context.Context) error { return nil }

// Trace returns the kept spans of traceID, in start order.
func (r *Ring) Trace(traceID string) []SpanRecord {
	return r.find(func(s *SpanRecord) bool { return s.TraceID == traceID })
}

// Linked returns the kept spans that link to a span of traceID, in start
// order: the traces that follow from it.
func (r *Ring) Linked(traceID string) []SpanRecord {
	return r.find(func(s *SpanRecord) bool {
		return slices.ContainsFunc(s.Links, func(l Link) bool { return l.TraceID == traceID })
	})
}

// Naming returns the kept spans with an attribute whose value is value (an
// id: a Telegram user id, a message id, an idempotency key), in start order,
// so that an item found in the database leads to the traces that touched it.
func (r *Ring) Naming(value string) []SpanRecord {
	return r.find(func(s *SpanRecord) bool {
		return slices.ContainsFunc(s.Attributes, func(a Attr) bool { return a.Value == value })
	})
}

// Len is how many spans the ring holds.
func (r *Ring) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full {
		return len(r.spans)
	}
	return r.next
}

func (r *Ring) find(match func(*SpanRecord) bool) []SpanRecord {
	r.mu.Lock()
	var out []SpanRecord
	n := r.next
	if r.full {
		n = len(r.spans)
	}
	for i := range n {
		if match(&r.spans[i]) {
			out = append(out, r.spans[i])
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b SpanRecord) int { return a.Start.Compare(b.Start) })
	return out
}
