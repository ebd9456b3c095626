package web

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"switchyard/history"
	"switchyard/telemetry"
)

// The console's search: "what happened to X". One box on every page takes
// a Telegram id, a magnet uid, an identity user id, a message id, an
// idempotency key or a trace id; the page asks each wired domain object what
// its own tables know about it (their History methods) and merges the items
// in time order, each with its trace: the span tree when the process's ring
// still holds it (/admin/traces/{id}), the bare trace id otherwise, for the
// operator's collector.

// historySource is a domain object the search asks about its own tables
// (*backend.Outbox, *onboarding.Bot, *referral.Service, *omni.Admin,
// *queue.Admin).
type historySource interface {
	History(ctx context.Context, term string, limit int) (history.Found, error)
}

// searchLimit bounds what the search shows: each source's queries, and the
// merged list.
const searchLimit = 200

// searchModel is the search page.
type searchModel struct {
	Term string
	// Asked says a search was submitted (an empty one finds nothing).
	Asked bool
	Rows  []searchRow
	// Cut says that more was found than is shown.
	Cut bool
	// Trace is the term's trace, when the term is a trace id.
	Trace *traceView
	// Naming are the kept traces with a span naming the term.
	Naming []traceRef
}

// searchRow is one item found.
type searchRow struct {
	When, Flow, Kind, Summary, Link string
	// At is the item's time to the nanosecond, for the time element.
	At      string
	IDs     []history.ID
	TraceID string
	// TraceSpans counts the ring's spans of TraceID (0: not kept here).
	TraceSpans int
}

// traceRef names a kept trace by its first span.
type traceRef struct {
	ID, Root string
	Spans    int
}

func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(w, r, "Search", "search")
	p.Query = history.Term(r.URL.Query().Get("q"))
	m := searchModel{Term: p.Query, Asked: r.URL.Query().Has("q")}
	if m.Term == "" {
		s.render(w, r, searchPage(p, m))
		return
	}
	var items []history.Item
	sources := s.opts.History
	if !history.Searchable(m.Term) {
		sources = nil
	}
	for _, src := range sources {
		found, err := src.History(r.Context(), m.Term, searchLimit)
		if err != nil {
			s.failed(w, r, "search", err)
			return
		}
		items = append(items, found.Items...)
		m.Cut = m.Cut || found.Cut
	}
	history.Sort(items)
	if len(items) > searchLimit {
		items, m.Cut = items[len(items)-searchLimit:], true // the most recent
	}
	spans := map[string]int{}
	kept := func(id string) int {
		if s.opts.Traces == nil || id == "" {
			return 0
		}
		n, ok := spans[id]
		if !ok {
			n = len(s.opts.Traces.Trace(id))
			spans[id] = n
		}
		return n
	}
	for _, it := range items {
		m.Rows = append(m.Rows, searchRow{When: when(it.At), At: it.At.UTC().Format(time.RFC3339Nano), Flow: string(it.Flow), Kind: it.Kind, Summary: it.Summary,
			Link: it.Link, IDs: it.IDs, TraceID: it.TraceID, TraceSpans: kept(it.TraceID)})
	}
	if s.opts.Traces != nil && history.Searchable(m.Term) {
		if history.IsTraceID(m.Term) {
			m.Trace = s.traceView(m.Term)
		}
		m.Naming = refsOf(s.opts.Traces.Naming(m.Term))
	}
	s.render(w, r, searchPage(p, m))
}

// refsOf groups spans by trace, the first span of each naming it.
func refsOf(spans []telemetry.SpanRecord) []traceRef {
	var refs []traceRef
	at := map[string]int{}
	for _, sp := range spans {
		if i, ok := at[sp.TraceID]; ok {
			refs[i].Spans++
			continue
		}
		at[sp.TraceID] = len(refs)
		refs = append(refs, traceRef{ID: sp.TraceID, Root: sp.Name, Spans: 1})
	}
	return refs
}

// traceView is a kept trace as a tree of spans, and the traces that follow
// from it.
type traceView struct {
	ID     string
	Roots  []*spanNode
	Spans  int
	Linked []traceRef
}

// spanNode is one span and the spans it parents.
type spanNode struct {
	Name, Kind, Duration, Status, Start string
	Error                               bool
	Attrs                               []telemetry.Attr
	Links                               []telemetry.Link
	Children                            []*spanNode
}

// traceView builds the tree of trace id's kept spans; nil when the ring
// holds none of them.
func (s *Server) traceView(id string) *traceView {
	spans := s.opts.Traces.Trace(id)
	if len(spans) == 0 {
		return nil
	}
	v := &traceView{ID: id, Spans: len(spans)}
	nodes := make(map[string]*spanNode, len(spans))
	for _, sp := range spans {
		status := "ok"
		if sp.Error {
			status = "error"
			if sp.Status != "" {
				status += ": " + sp.Status
			}
		}
		nodes[sp.SpanID] = &spanNode{Name: sp.Name, Kind: sp.Kind, Duration: durationText(sp.Duration()), Status: status,
			Start: sp.Start.UTC().Format("15:04:05.000"), Error: sp.Error, Attrs: sp.Attributes, Links: sp.Links}
	}
	// Spans come in start order, so each parent's children do too. A span
	// whose parent the ring no longer holds (or that came from another
	// process) is a root.
	for _, sp := range spans {
		n := nodes[sp.SpanID]
		if parent, ok := nodes[sp.ParentID]; ok && sp.ParentID != "" {
			parent.Children = append(parent.Children, n)
		} else {
			v.Roots = append(v.Roots, n)
		}
	}
	v.Linked = slices.DeleteFunc(refsOf(s.opts.Traces.Linked(id)), func(r traceRef) bool { return r.ID == id })
	return v
}

// durationText is a span's duration, to the microsecond below a second.
func durationText(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return strconv.FormatInt(d.Microseconds(), 10) + " µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s"
}

// tracePage shows one kept trace, or says the ring does not hold it.
func (s *Server) tracePage(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if !history.IsTraceID(id) {
		s.problem(w, r, http.StatusNotFound, "search", "That is not a trace id: a trace id is 32 lower-case hex digits.")
		return
	}
	p := s.newPage(w, r, "Trace "+id, "search")
	var v *traceView
	if s.opts.Traces != nil {
		v = s.traceView(id)
	}
	s.render(w, r, tracePage(p, id, v, s.opts.Traces != nil))
}
