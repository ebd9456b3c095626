package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gorilla/mux"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/mask"
	"switchyard/queue"
)

// The attempt history (issue 20) on the console: a dead letter's page with
// its attempts, and the Attempts table of a bot outbox event.

// deadLetterOps is what a dead letter's page needs of the queues
// (*queue.Admin), asked of Options.Queues.
type deadLetterOps interface {
	DeadLetterDetail(ctx context.Context, f queue.DeadFilter) (queue.DeadLetter, []queue.Attempt, error)
}

// eventAttemptOps is what an event's page needs of the outbox's history
// (*backend.Outbox), asked of Options.Outbox.
type eventAttemptOps interface {
	EventAttempts(ctx context.Context, id contract.EventID) ([]backend.EventAttempt, error)
}

// attemptRow is one attempt as the console shows it.
type attemptRow struct {
	Attempt  string // "—" for a redrive
	Outcome  string
	Bad      bool // the attempt failed
	Error    string
	At       string
	Duration string // "—" when unknown
	Instance string
}

// attemptRoutes adds the attempt pages to the console (consoleRoutes).
func (s *Server) attemptRoutes(get func(path string, h http.HandlerFunc)) {
	get("/queues/{queue}/dead/{id}", s.deadLetterPage)
}

// deadLetterHref is a dead letter's page.
func deadLetterHref(name, group, id string) string {
	h := "/admin/queues/" + url.PathEscape(name) + "/dead/" + url.PathEscape(id)
	if group != "" {
		h += "?group=" + url.QueryEscape(group)
	}
	return h
}

func attemptNumber(n int) string {
	if n <= 0 {
		return "—"
	}
	return strconv.Itoa(n)
}

func toQueueAttemptRows(attempts []queue.Attempt) []attemptRow {
	rows := make([]attemptRow, 0, len(attempts))
	for _, a := range attempts {
		row := attemptRow{Attempt: attemptNumber(a.Attempt), Outcome: string(a.Outcome), Error: mask.Phones(a.Error),
			At: when(a.At), Duration: "—", Instance: a.Instance,
			Bad: a.Outcome == queue.OutcomeRetry || a.Outcome == queue.OutcomeDead}
		if a.DurationKnown {
			row.Duration = durationText(a.Duration)
		}
		if row.Instance == "" {
			row.Instance = "—"
		}
		rows = append(rows, row)
	}
	return rows
}

func toEventAttemptRows(attempts []backend.EventAttempt) []attemptRow {
	rows := make([]attemptRow, 0, len(attempts))
	for _, a := range attempts {
		rows = append(rows, attemptRow{Attempt: attemptNumber(a.Attempt), Outcome: a.Outcome, Error: mask.Phones(a.Error),
			At: when(a.At), Duration: "—", Instance: a.Instance,
			Bad: a.Outcome != backend.AttemptProcessed && a.Outcome != backend.AttemptRedriven})
	}
	return rows
}

// deadLetterModel is one dead letter's page.
type deadLetterModel struct {
	Name, Group string
	Back        string // the queue's page
	Self        string
	Dead        deadRow
	Attempts    []attemptRow
}

func (s *Server) deadLetterPage(w http.ResponseWriter, r *http.Request) {
	ops, ok := s.opts.Queues.(deadLetterOps)
	if s.opts.Queues == nil || !ok {
		s.problem(w, r, http.StatusNotFound, "queues", "Queues are not wired in this process.")
		return
	}
	v := mux.Vars(r)
	f := queue.DeadFilter{Queue: v["queue"], Group: r.URL.Query().Get("group"), ID: v["id"]}
	d, attempts, err := ops.DeadLetterDetail(r.Context(), f)
	if errors.Is(err, queue.ErrNotFound) {
		s.problem(w, r, http.StatusNotFound, "queues", "There is no dead letter "+f.ID+" of "+f.Queue+": redriven, deleted, or pruned by retention.")
		return
	}
	if err != nil {
		s.failed(w, r, "queues", err)
		return
	}
	m := deadLetterModel{Name: f.Queue, Group: f.Group, Back: queueHref(f.Queue, f.Group), Self: deadLetterHref(f.Queue, f.Group, f.ID),
		Dead: toDeadRows([]queue.DeadLetter{d})[0], Attempts: toQueueAttemptRows(attempts)}
	s.render(w, r, deadLetterPage(s.newPage(w, r, "Dead letter "+d.ID, "queues"), m))
}

// eventAttempts reads an event's attempts for its page; an outbox without
// a history, or an error (logged), shows none.
func (s *Server) eventAttempts(r *http.Request, id contract.EventID) []attemptRow {
	ops, ok := s.opts.Outbox.(eventAttemptOps)
	if !ok {
		return nil
	}
	attempts, err := ops.EventAttempts(r.Context(), id)
	if err != nil {
		s.log.ErrorContext(r.Context(), "event attempts", "event_id", int64(id), "err", err)
		return nil
	}
	return toEventAttemptRows(attempts)
}
