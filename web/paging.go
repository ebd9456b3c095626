package web

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Every console list shows one window of a list kept in a stable order
// (newest first, by a key the owning package defines: an id, or a time and
// an id), never the whole list. The window's position is in the URL, next to
// the list's filters, so a page can be linked, reloaded and polled:
//
//	?before=K   the rows after K in the list's order (older than K)
//	?after=K    the rows before K (newer than K), shown in the same order
//	neither     the first window (the newest rows)
//
// K is the key of the row at the window's edge, opaque to web/: the owning
// package reads it back (keyset paging, so a window costs the same at any
// depth and rows arriving meanwhile do not shift it). A list asks its
// owner for one row more than it shows, in the window's direction, to know
// whether there is a further window that way; the other way there is one
// whenever the window did not start at the list's head.

// perPage is how many rows a console list shows at once, unless it says
// otherwise.
const perPage = 50

// window is a list's position from the request's query string.
type window struct {
	Before string // show rows after this key in the list's order
	After  string // show rows before this key, in the list's order
}

// maxKeyLen bounds a key read from a URL: keys are ids, times and
// combinations of them, never long.
const maxKeyLen = 200

// windowOf reads a list's window from r's query string. A key that is too
// long is ignored (the first window), as is after when before is also given.
func windowOf(r *http.Request) window {
	q := r.URL.Query()
	w := window{Before: strings.TrimSpace(q.Get("before")), After: strings.TrimSpace(q.Get("after"))}
	if len(w.Before) > maxKeyLen {
		w.Before = ""
	}
	if len(w.After) > maxKeyLen || w.Before != "" {
		w.After = ""
	}
	return w
}

// Newer reports whether w asks for the rows before a key (a "newer" page).
func (w window) Newer() bool { return w.After != "" }

// First reports whether w is the list's first window.
func (w window) First() bool { return w.Before == "" && w.After == "" }

// fitWindow cuts rows, as the owner returned them for w with a limit of
// want+1, to the window shown: at most want rows, in the list's order (the
// owner returns a newer window in reverse order, nearest the key first,
// which fitWindow turns around). It reports whether there are rows past each
// edge of the window.
func fitWindow[T any](rows []T, want int, w window) (shown []T, newer, older bool) {
	more := len(rows) > want
	if more {
		rows = rows[:want]
	}
	if w.Newer() {
		rows = slices.Clone(rows)
		slices.Reverse(rows)
		return rows, more, true
	}
	return rows, w.Before != "", more
}

// pager is the navigation of a list window: where it sits in the list, and
// links to the neighbouring windows and the first one. An empty link means
// there is no such window.
type pager struct {
	Total int64 // rows matching the list's filters; -1 when not counted
	// Capped says Total is a bound: more than Total rows match ("10,000+"),
	// when counting them all would read every row (a text search).
	Capped bool
	Shown  int    // rows in this window
	Offset int64  // rows before this window in the list's order; -1 when unknown
	Noun   string // what the rows are, plural: "dead letters"
	First  string
	Newer  string
	Older  string
	// Last links to the list's last (oldest) window, when its owner has a
	// key for it and this window is not it; set by the list's handler.
	Last string
}

// newPager builds the pager of a window of shown rows. base is the list's
// URL with its filters (and no window); firstKey and lastKey are the keys of
// the window's first and last rows.
func newPager(base url.URL, shown int, newer, older bool, firstKey, lastKey, noun string) pager {
	p := pager{Total: -1, Shown: shown, Offset: -1, Noun: noun}
	if newer {
		p.Newer = withWindow(base, "after", firstKey)
		p.First = withWindow(base, "", "")
	}
	if older {
		p.Older = withWindow(base, "before", lastKey)
	}
	return p
}

// withWindow is base with its window set to one key (none when param is
// empty) and every other query parameter kept.
func withWindow(base url.URL, param, key string) string {
	q := base.Query()
	q.Del("before")
	q.Del("after")
	if param != "" {
		q.Set(param, key)
	}
	base.RawQuery = q.Encode()
	return base.RequestURI()
}

// listBase is the URL of the list r shows, without its window: the base of
// its pager's links.
func listBase(r *http.Request) url.URL {
	u := url.URL{Path: r.URL.Path}
	q := r.URL.Query()
	q.Del("before")
	q.Del("after")
	u.RawQuery = q.Encode()
	return u
}

// Position says where the window sits: "1–50 of 10,000", "51–100 of 10,000"
// when the rows before it were counted, "50 of 10,000" when they were not.
func (p pager) Position() string {
	var b strings.Builder
	switch {
	case p.Shown == 0:
		b.WriteString("none")
	case p.Offset >= 0:
		b.WriteString(count(p.Offset+1) + "–" + count(p.Offset+int64(p.Shown)))
	default:
		b.WriteString(countInt(p.Shown))
	}
	if p.Total >= 0 {
		b.WriteString(" of " + count(p.Total))
		if p.Capped {
			b.WriteString("+")
		}
	}
	return b.String() + " " + p.Noun
}

// Paged reports whether the list has more than one window, so the pager
// needs its links.
func (p pager) Paged() bool { return p.Newer != "" || p.Older != "" || p.Last != "" }

// bulkModel is a list's bulk actions (bulkBar).
type bulkModel struct {
	FormID  string      // the form's id, which the rows' check boxes name
	Noun    string      // what the rows are, plural
	Total   int64       // rows matching the filters: what scope=all acts on
	Fields  []formField // the list's filters and the page to come back to
	Actions []bulkAction
}

// bulkAction is one action of a bulkBar: a POST to Action with the chosen
// ids (id=…, repeated) or scope=all.
type bulkAction struct {
	Label  string // "Redrive", "Delete"
	Action string
	Testid string
}

// maxBulk caps the ids one bulk action takes: more than any window shows.
const maxBulk = 500

// bulkScope is what a bulk action acts on: the ids chosen, or every row
// matching the list's filters. ok is false when neither was asked for
// (scope=chosen with nothing chosen).
func bulkScope(r *http.Request) (ids []string, all bool, ok bool) {
	if r.PostForm.Get("scope") == "all" {
		return nil, true, true
	}
	for _, id := range r.PostForm["id"] {
		if len(ids) == maxBulk {
			break
		}
		if id = strings.TrimSpace(id); id != "" && len(id) <= maxKeyLen && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, false, len(ids) > 0
}

// clearTerm is a list's URL with its other filters and no search term.
func clearTerm(action string, keep []formField) string {
	q := url.Values{}
	for _, f := range keep {
		q.Add(f.Name, f.Value)
	}
	if len(q) == 0 {
		return action
	}
	return action + "?" + q.Encode()
}
