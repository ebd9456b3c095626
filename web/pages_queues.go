package web

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"switchyard/mask"
	"switchyard/queue"
)

// queueOps is what the console needs of the queues and topics (*queue.Admin).
type queueOps interface {
	Stats(ctx context.Context) (queue.Stats, error)
	ListMessages(ctx context.Context, f queue.MessageFilter) ([]queue.MessageInfo, error)
	ListDead(ctx context.Context, f queue.DeadFilter) ([]queue.DeadLetter, error)
	CountDead(ctx context.Context, f queue.DeadFilter, at string) (queue.DeadCount, error)
	CountMessages(ctx context.Context, f queue.MessageFilter, at string) (queue.MessageCount, error)
	Redrive(ctx context.Context, f queue.DeadFilter) (int, error)
	PurgeDead(ctx context.Context, f queue.DeadFilter) (int, error)
	Purge(ctx context.Context, name string) (int, error)
	DeadLetteredSince(ctx context.Context, since time.Time) ([]queue.DeadLettered, error)
	Pause(ctx context.Context, t queue.PauseTarget, opts queue.PauseOpts) (queue.PauseState, error)
	Resume(ctx context.Context, t queue.PauseTarget) (queue.PauseState, error)
}

// queueRow is one queue as the console shows it.
type queueRow struct {
	Name      string
	Href      string
	Ready     int64
	InFlight  int64
	Delayed   int64
	Held      int64 // waiting behind an earlier message of their order key
	Dead      int64
	OldestAge time.Duration // age of the oldest message; zero when empty
	Pause     pauseView
}

// Depth is every message waiting: ready, delayed and held.
func (q queueRow) Depth() int64 { return q.Ready + q.Delayed + q.Held }

// groupRow is one consumer group of a topic.
type groupRow struct {
	Topic, Group string
	Href         string
	Lag          int64
	Retrying     int64
	Dead         int64
	OldestAge    time.Duration
	Partitions   []partitionRow
	Pause        pauseView
}

type partitionRow struct {
	Partition      int
	Committed, End int64
	Lag            int64
	OldestAge      time.Duration
}

// queuesModel is the Queues page.
type queuesModel struct {
	Wired  bool
	Queues []queueRow
	Groups []groupRow
}

func queueHref(name, group string) string {
	h := "/admin/queues/" + url.PathEscape(name)
	if group != "" {
		h += "?group=" + url.QueryEscape(group)
	}
	return h
}

func toQueueRows(st queue.Stats) []queueRow {
	rows := make([]queueRow, 0, len(st.Queues))
	for _, q := range st.Queues {
		rows = append(rows, queueRow{
			Name: q.Name, Href: queueHref(q.Name, ""), Ready: q.Ready, InFlight: q.InFlight, Delayed: q.Delayed,
			Held: q.Held, Dead: q.Dead, OldestAge: q.OldestAge, Pause: toPauseView(q.Name, "", q.Pause),
		})
	}
	return rows
}

func toGroupRows(st queue.Stats) []groupRow {
	var rows []groupRow
	for _, t := range st.Topics {
		for _, g := range t.Groups {
			gr := groupRow{
				Topic: t.Name, Group: g.Group, Href: queueHref(t.Name, g.Group),
				Lag: g.Lag, Retrying: g.Retrying, Dead: g.Dead, OldestAge: g.OldestAge, Pause: toPauseView(t.Name, g.Group, g.Pause),
			}
			for _, p := range g.Partitions {
				gr.Partitions = append(gr.Partitions, partitionRow{
					Partition: p.Partition, Committed: p.Committed, End: p.End, Lag: p.Lag, OldestAge: p.OldestAge,
				})
			}
			rows = append(rows, gr)
		}
	}
	return rows
}

// queueStats reads the statistics; an error is logged and shows as no rows.
func (s *Server) queueStats(r *http.Request) (queue.Stats, bool) {
	if s.opts.Queues == nil {
		return queue.Stats{}, false
	}
	st, err := s.opts.Queues.Stats(r.Context())
	if err != nil {
		s.log.ErrorContext(r.Context(), "queue statistics", "err", err)
		return queue.Stats{}, false
	}
	return st, true
}

func (s *Server) queuesPage(w http.ResponseWriter, r *http.Request) {
	st, ok := s.queueStats(r)
	m := queuesModel{Wired: ok, Queues: toQueueRows(st), Groups: toGroupRows(st)}
	s.render(w, r, queuesPage(s.newPage(w, r, "Queues", "queues"), m))
}

// liveMessageRow is a live queue message.
type liveMessageRow struct {
	ID        string
	State     string
	Attempts  int
	LastError string
	OrderKey  string
	SentAt    string
	VisibleAt string
	Body      string
}

// deadRow is a dead letter of a queue or a topic group.
type deadRow struct {
	ID        string
	Where     string // "partition 3 @ 17" for topic records
	Key       string
	Attempts  int
	LastError string
	CreatedAt string
	DeadAt    string
	Body      string
}

// queueDetailModel is one queue's or one topic group's page: its
// statistics and one of its lists (dead letters, or a queue's live
// messages), a window at a time.
type queueDetailModel struct {
	Name  string
	Group string // set for a topic's consumer group
	Path  string // this page without its query: the search form's action
	Self  string // this page as asked for, where its forms come back to
	Queue *queueRow
	Topic *groupRow
	List  string // listDead or listLive
	Tabs  []stateTab
	Term  string      // the list's search term
	Keep  []formField // the list's other filters, kept by its search form
	// States filters the live messages by state (tabs of their own).
	States []stateTab
	Live   []liveMessageRow
	Dead   []deadRow
	Pager  pager
	Bulk   bulkModel
	// DeadTotal is how many dead letters there are, filters aside.
	DeadTotal int64
}

// A queue page's lists (?list=).
const (
	listDead = "dead"
	listLive = "live"
)

// deadBulkForm is the id of the dead letters' bulk-action form.
const deadBulkForm = "dead-bulk"

// DeadAPI is the admin API's listing of the dead letters, for a script.
func (m queueDetailModel) DeadAPI() string {
	if m.Group != "" {
		return "GET /admin/api/topics/" + m.Name + "/groups/" + m.Group + "/dlq?order=newest&limit=1000&cursor=…"
	}
	return "GET /admin/api/queues/" + m.Name + "/dlq?order=newest&limit=1000&cursor=…"
}

func toDeadRows(dead []queue.DeadLetter) []deadRow {
	rows := make([]deadRow, 0, len(dead))
	for _, d := range dead {
		row := deadRow{
			ID: d.ID, Key: d.Key, Attempts: d.Attempts, LastError: mask.Phones(d.LastError),
			CreatedAt: when(d.CreatedAt), DeadAt: when(d.DeadAt), Body: prettyPayload(d.Body),
		}
		if d.Partition != nil && d.Offset != nil {
			row.Where = "partition " + countInt(*d.Partition) + " @ " + count(*d.Offset)
		}
		if row.Key == "" {
			row.Key = d.OrderKey
		}
		rows = append(rows, row)
	}
	return rows
}

func (s *Server) queueDetail(w http.ResponseWriter, r *http.Request) {
	if s.opts.Queues == nil {
		s.problem(w, r, http.StatusNotFound, "queues", "Queues are not wired in this process.")
		return
	}
	name, group := mux.Vars(r)["queue"], r.URL.Query().Get("group")
	ctx := r.Context()
	st, err := s.opts.Queues.Stats(ctx)
	if err != nil {
		s.failed(w, r, "queues", err)
		return
	}
	m := queueDetailModel{Name: name, Group: group, Path: "/admin/queues/" + url.PathEscape(name), Self: r.URL.RequestURI(), List: listDead}
	if group == "" {
		for _, q := range toQueueRows(st) {
			if q.Name == name {
				m.Queue = &q
				m.DeadTotal = q.Dead
			}
		}
	} else if g, ok := groupOf(st, name, group); ok {
		m.Topic = &g
		m.DeadTotal = g.Dead
	}
	if m.Queue == nil && m.Topic == nil {
		s.problem(w, r, http.StatusNotFound, "queues", "There is no queue or topic group by that name.")
		return
	}
	q := r.URL.Query()
	if m.Queue != nil && q.Get("list") == listLive {
		m.List = listLive
	}
	m.Term = searchTerm(q)
	if group != "" {
		m.Keep = append(m.Keep, formField{"group", group})
	}
	if m.Queue != nil {
		m.Tabs = []stateTab{
			{Label: "Dead letters", Count: count(m.DeadTotal), Href: m.Path + "?list=dead", Active: m.List == listDead, Testid: "tab-dead"},
			{Label: "Live messages", Count: count(m.Queue.Depth() + m.Queue.InFlight), Href: m.Path + "?list=live", Active: m.List == listLive, Testid: "tab-live"},
		}
		m.Keep = append(m.Keep, formField{"list", m.List})
	}
	if m.List == listLive {
		err = s.liveWindow(r, &m)
	} else {
		err = s.deadWindow(r, &m)
	}
	if errors.Is(err, queue.ErrBadCursor) {
		s.problem(w, r, http.StatusBadRequest, "queues", "That page of the list is not one the console gave out; start again from the newest.")
		return
	}
	if err != nil {
		s.failed(w, r, "queues", err)
		return
	}
	title := "Queue " + name
	if group != "" {
		title = "Topic " + name + " · group " + group
	}
	s.render(w, r, queueDetailPage(s.newPage(w, r, title, "queues"), m))
}

// deadWindow reads the window of dead letters r asks for into m, with its
// pager and bulk actions.
func (s *Server) deadWindow(r *http.Request, m *queueDetailModel) error {
	ctx, win := r.Context(), windowOf(r)
	f := queue.DeadFilter{Queue: m.Name, Group: m.Group, Search: m.Term, Before: win.Before, After: win.After, NewestFirst: true, Limit: perPage + 1}
	dead, err := s.opts.Queues.ListDead(ctx, f)
	if err != nil {
		return err
	}
	shown, _, _ := fitWindow(dead, perPage, win)
	var firstKey, lastKey string
	if len(shown) > 0 {
		firstKey, lastKey = shown[0].Cursor, shown[len(shown)-1].Cursor
	}
	c, err := s.opts.Queues.CountDead(ctx, f, firstKey)
	if err != nil {
		return err
	}
	m.Dead = toDeadRows(shown)
	m.Pager = countedPager(r, len(shown), firstKey, lastKey, c.Total, c.Newer, "dead letters")
	fields := append(slices.Clone(m.Keep), formField{"back", m.Self})
	if m.Term != "" {
		fields = append(fields, formField{"q", m.Term})
	}
	m.Bulk = bulkModel{
		FormID: deadBulkForm, Noun: "dead letters", Total: c.Total, Fields: fields,
		Actions: []bulkAction{
			{Label: "Redrive", Action: queueActionHref(m.Name, "dead/redrive"), Testid: "redrive"},
			{Label: "Delete", Action: queueActionHref(m.Name, "dead/purge"), Testid: "delete"},
		},
	}
	return nil
}

// liveWindow reads the window of live messages r asks for into m.
func (s *Server) liveWindow(r *http.Request, m *queueDetailModel) error {
	ctx, win := r.Context(), windowOf(r)
	state := queue.MessageState(r.URL.Query().Get("state"))
	switch state {
	case queue.StateReady, queue.StateDelayed, queue.StateHeld, queue.StateInFlight:
		m.Keep = append(m.Keep, formField{"state", string(state)})
	default:
		state = ""
	}
	for _, t := range []struct {
		state queue.MessageState
		label string
	}{{"", "All"}, {queue.StateReady, "Ready"}, {queue.StateDelayed, "Delayed"}, {queue.StateHeld, "Held"}, {queue.StateInFlight, "In flight"}} {
		href := m.Path + "?list=live"
		if t.state != "" {
			href += "&state=" + string(t.state)
		}
		if m.Term != "" {
			href += "&q=" + url.QueryEscape(m.Term)
		}
		m.States = append(m.States, stateTab{Label: t.label, Href: href, Active: t.state == state, Testid: "live-state-" + cmp.Or(string(t.state), "all")})
	}
	f := queue.MessageFilter{Queue: m.Name, State: state, Search: m.Term, Before: win.Before, After: win.After, NewestFirst: true, Limit: perPage + 1}
	live, err := s.opts.Queues.ListMessages(ctx, f)
	if err != nil {
		return err
	}
	shown, _, _ := fitWindow(live, perPage, win)
	var firstKey, lastKey string
	if len(shown) > 0 {
		firstKey, lastKey = shown[0].Cursor, shown[len(shown)-1].Cursor
	}
	c, err := s.opts.Queues.CountMessages(ctx, f, firstKey)
	if err != nil {
		return err
	}
	for _, l := range shown {
		m.Live = append(m.Live, liveMessageRow{
			ID: string(l.ID), State: string(l.State), Attempts: l.Attempts, LastError: mask.Phones(l.LastError),
			OrderKey: l.OrderKey, SentAt: when(l.SentAt), VisibleAt: when(l.VisibleAt), Body: prettyPayload(l.Body),
		})
	}
	m.Pager = countedPager(r, len(shown), firstKey, lastKey, c.Total, c.Newer, "live messages")
	return nil
}

// deadScope reads the dead letters a queue form acts on: the queue from the
// path; group, search term and scope from the form. A form of one row names
// its id; a bulk form chooses ids (scope=chosen) or every dead letter
// matching its search (scope=all); a form with neither acts on all. ok is
// false when a bulk form chose nothing.
func deadScope(r *http.Request) (f queue.DeadFilter, ok bool) {
	f = queue.DeadFilter{Queue: mux.Vars(r)["queue"], Group: r.PostForm.Get("group")}
	switch r.PostForm.Get("scope") {
	case "":
		f.ID = strings.TrimSpace(r.PostForm.Get("id"))
		return f, true
	case "all":
		f.Search = strings.TrimSpace(r.PostForm.Get("q"))
		return f, true
	}
	ids, _, ok := bulkScope(r)
	f.IDs = ids
	return f, ok
}

// deadWhat names the dead letters of f, with their number: the confirmation
// says how many an action takes.
func deadWhat(f queue.DeadFilter, n int64) string {
	var what string
	switch {
	case f.ID != "":
		what = "dead letter " + f.ID + " of " + f.Queue
	case len(f.IDs) == 1:
		what = "the 1 chosen dead letter (" + f.IDs[0] + ") of " + f.Queue
	case len(f.IDs) > 0:
		what = "the " + countInt(len(f.IDs)) + " chosen dead letters of " + f.Queue
	case n == 1:
		what = "the 1 dead letter of " + f.Queue
	default:
		what = "all " + count(n) + " dead letters of " + f.Queue
	}
	if f.Group != "" {
		what += " (group " + f.Group + ")"
	}
	if f.Search != "" {
		what += " matching “" + f.Search + "”"
	}
	return what
}

func (s *Server) queueRedrive(w http.ResponseWriter, r *http.Request) {
	s.deadLetterAction(w, r, deadAction{
		question: func(what string) string {
			return "Redrive " + what + "? Each goes back to be handled again."
		},
		verb:     "Redrive",
		do:       func(ctx context.Context, f queue.DeadFilter) (int, error) { return s.opts.Queues.Redrive(ctx, f) },
		notFound: func(err error) bool { return errors.Is(err, queue.ErrNotFound) },
		done:     "Redrove",
	})
}

func (s *Server) queuePurgeDead(w http.ResponseWriter, r *http.Request) {
	s.deadLetterAction(w, r, deadAction{
		question: func(what string) string { return "Delete " + what + " for good? This cannot be undone." },
		verb:     "Delete for good",
		do:       func(ctx context.Context, f queue.DeadFilter) (int, error) { return s.opts.Queues.PurgeDead(ctx, f) },
		notFound: func(error) bool { return false },
		done:     "Deleted",
	})
}

// deadAction is one of the Queues page's actions on dead letters.
type deadAction struct {
	question func(what string) string // what the confirmation asks, of deadWhat
	verb     string                   // its button
	do       func(ctx context.Context, f queue.DeadFilter) (int, error)
	notFound func(err error) bool // whether err means there was nothing to act on
	done     string               // the past tense the flash reports
}

// deadLetterAction runs a on the dead letters the form names, after the
// operator confirms — the confirmation states how many — and returns to
// the queue's page.
func (s *Server) deadLetterAction(w http.ResponseWriter, r *http.Request, a deadAction) {
	if !s.parseForm(w, r, "/admin/queues") {
		return
	}
	f, ok := deadScope(r)
	back := backTo(r, queueHref(f.Queue, f.Group))
	if s.opts.Queues == nil {
		s.done(w, r, back, false, "Queues are not wired in this process.")
		return
	}
	if !ok {
		s.done(w, r, back, false, "Choose at least one dead letter first (the check boxes), or act on all matching.")
		return
	}
	var n int64
	if f.ID == "" && len(f.IDs) == 0 && r.PostForm.Get("confirm") != "yes" {
		c, err := s.opts.Queues.CountDead(r.Context(), f, "")
		if err != nil {
			s.actionFailed(w, r, back, err, false)
			return
		}
		if c.Total == 0 {
			s.done(w, r, back, false, "No dead letters of "+f.Queue+" match; nothing was done.")
			return
		}
		n = c.Total
	}
	if !s.confirmed(w, r, "queues", a.question(deadWhat(f, n)), a.verb, back) {
		return
	}
	done, err := a.do(r.Context(), f)
	if err != nil {
		s.actionFailed(w, r, back, err, a.notFound(err))
		return
	}
	s.done(w, r, back, true, a.done+" "+countInt(done)+" dead letter(s) of "+f.Queue+".")
}

func (s *Server) queuePurge(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r, "/admin/queues") {
		return
	}
	name := mux.Vars(r)["queue"]
	back := backTo(r, queueHref(name, ""))
	if s.opts.Queues == nil {
		s.done(w, r, back, false, "Queues are not wired in this process.")
		return
	}
	if !s.confirmed(w, r, "queues", "Delete every live message of "+name+" (ready, delayed, held and in flight)? This cannot be undone.", "Purge the queue", back) {
		return
	}
	n, err := s.opts.Queues.Purge(r.Context(), name)
	if err != nil {
		s.actionFailed(w, r, back, err, false)
		return
	}
	s.done(w, r, back, true, "Purged "+countInt(n)+" message(s) from "+name+".")
}

// groupOf finds a topic group in the statistics.
func groupOf(st queue.Stats, topic, group string) (groupRow, bool) {
	for _, g := range toGroupRows(st) {
		if g.Topic == topic && g.Group == group {
			return g, true
		}
	}
	return groupRow{}, false
}

// totals sums the queues for the overview.
func queueTotals(rows []queueRow) (depth, dead int64) {
	for _, q := range rows {
		depth += q.Depth()
		dead += q.Dead
	}
	return depth, dead
}

// queueActionHref is the POST route of an action on a queue or topic.
func queueActionHref(name, action string) string {
	return "/admin/queues/" + url.PathEscape(name) + "/" + action
}

// keyWord is what a list's search calls a row's key.
func keyWord(what string) string {
	if what == "a message" {
		return "order key"
	}
	return "order or record key"
}

// countedPager is the pager of a window whose list was counted: in all
// (total) and before the window (newer). The counts say whether there are
// newer and older windows, and the last window — the oldest rows — has a
// link of its own.
func countedPager(r *http.Request, shown int, firstKey, lastKey string, total, newer int64, noun string) pager {
	hasOlder := newer+int64(shown) < total
	p := newPager(listBase(r), shown, newer > 0, hasOlder, firstKey, lastKey, noun)
	p.Total, p.Offset = total, newer
	if hasOlder {
		p.Last = withWindow(listBase(r), "after", queue.CursorOldest)
	}
	return p
}
