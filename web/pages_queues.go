package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
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

// queueDetailModel is one queue's or one topic group's page.
type queueDetailModel struct {
	Name  string
	Group string // set for a topic's consumer group
	Self  string // this page, where its forms come back to
	Queue *queueRow
	Topic *groupRow
	Live  []liveMessageRow
	Dead  []deadRow
	// DeadTotal is how many dead letters there are; Dead holds the oldest
	// deadShown of them.
	DeadTotal int64
	Missing   bool
}

// deadShown is how many dead letters a queue's page lists.
const deadShown = 100

// DeadAPI is the admin API's listing of the dead letters, for the ones the
// page does not show.
func (m queueDetailModel) DeadAPI() string {
	if m.Group != "" {
		return "GET /admin/api/topics/" + m.Name + "/groups/" + m.Group + "/dlq?limit=1000"
	}
	return "GET /admin/api/queues/" + m.Name + "/dlq?limit=1000"
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
	m := queueDetailModel{Name: name, Group: group, Self: queueHref(name, group)}
	if group == "" {
		for _, q := range toQueueRows(st) {
			if q.Name == name {
				m.Queue = &q
			}
		}
		if m.Queue != nil {
			live, err := s.opts.Queues.ListMessages(ctx, queue.MessageFilter{Queue: name, Limit: 50})
			if err != nil {
				s.failed(w, r, "queues", err)
				return
			}
			for _, l := range live {
				m.Live = append(m.Live, liveMessageRow{
					ID: string(l.ID), State: string(l.State), Attempts: l.Attempts, LastError: mask.Phones(l.LastError),
					OrderKey: l.OrderKey, SentAt: when(l.SentAt), VisibleAt: when(l.VisibleAt), Body: prettyPayload(l.Body),
				})
			}
		}
	} else {
		if g, ok := groupOf(st, name, group); ok {
			m.Topic = &g
		}
	}
	if m.Queue == nil && m.Topic == nil {
		s.problem(w, r, http.StatusNotFound, "queues", "There is no queue or topic group by that name.")
		return
	}
	dead, err := s.opts.Queues.ListDead(ctx, queue.DeadFilter{Queue: name, Group: group, Limit: deadShown})
	if err != nil {
		s.failed(w, r, "queues", err)
		return
	}
	m.Dead = toDeadRows(dead)
	// The page said "Dead letters (100)" for any number above 100: the
	// total is the statistics' count (read a moment before the list).
	switch {
	case m.Queue != nil:
		m.DeadTotal = m.Queue.Dead
	case m.Topic != nil:
		m.DeadTotal = m.Topic.Dead
	}
	m.DeadTotal = max(m.DeadTotal, int64(len(m.Dead)))
	title := "Queue " + name
	if group != "" {
		title = "Topic " + name + " · group " + group
	}
	s.render(w, r, queueDetailPage(s.newPage(w, r, title, "queues"), m))
}

// deadFilterOf reads the dead letters a queue form acts on: the queue from
// the path; group and id (empty: all) from the form.
func deadFilterOf(r *http.Request) queue.DeadFilter {
	return queue.DeadFilter{Queue: mux.Vars(r)["queue"], Group: r.PostForm.Get("group"), ID: r.PostForm.Get("id")}
}

func deadWhat(f queue.DeadFilter) string {
	what := "every dead letter of " + f.Queue
	if f.ID != "" {
		what = "dead letter " + f.ID + " of " + f.Queue
	}
	if f.Group != "" {
		what += " (group " + f.Group + ")"
	}
	return what
}

func (s *Server) queueRedrive(w http.ResponseWriter, r *http.Request) {
	s.deadLetterAction(w, r, deadAction{
		question: func(f queue.DeadFilter) string {
			return "Redrive " + deadWhat(f) + "? It goes back to be handled again."
		},
		verb:     "Redrive",
		do:       func(ctx context.Context, f queue.DeadFilter) (int, error) { return s.opts.Queues.Redrive(ctx, f) },
		notFound: func(err error) bool { return errors.Is(err, queue.ErrNotFound) },
		done:     "Redrove",
	})
}

func (s *Server) queuePurgeDead(w http.ResponseWriter, r *http.Request) {
	s.deadLetterAction(w, r, deadAction{
		question: func(f queue.DeadFilter) string { return "Delete " + deadWhat(f) + " for good? This cannot be undone." },
		verb:     "Delete for good",
		do:       func(ctx context.Context, f queue.DeadFilter) (int, error) { return s.opts.Queues.PurgeDead(ctx, f) },
		notFound: func(error) bool { return false },
		done:     "Deleted",
	})
}

// deadAction is one of the Queues page's actions on dead letters.
type deadAction struct {
	question func(f queue.DeadFilter) string // what the confirmation asks
	verb     string                          // its button
	do       func(ctx context.Context, f queue.DeadFilter) (int, error)
	notFound func(err error) bool // whether err means there was nothing to act on
	done     string               // the past tense the flash reports
}

// deadLetterAction runs a on the dead letters the form names, after the
// operator confirms, and returns to the queue's page.
func (s *Server) deadLetterAction(w http.ResponseWriter, r *http.Request, a deadAction) {
	if !s.parseForm(w, r, "/admin/queues") {
		return
	}
	f := deadFilterOf(r)
	back := backTo(r, queueHref(f.Queue, f.Group))
	if s.opts.Queues == nil {
		s.done(w, r, back, false, "Queues are not wired in this process.")
		return
	}
	if !s.confirmed(w, r, "queues", a.question(f), a.verb, back) {
		return
	}
	n, err := a.do(r.Context(), f)
	if err != nil {
		s.actionFailed(w, r, back, err, a.notFound(err))
		return
	}
	s.done(w, r, back, true, a.done+" "+countInt(n)+" dead letter(s) of "+f.Queue+".")
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
