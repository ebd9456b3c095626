package web

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/gorilla/mux"

	"switchyard/queue"
)

// pauseView is a queue's or a consumer group's pause state as the queue
// tables show it, with the form that pauses or resumes it.
type pauseView struct {
	Paused bool
	Since  string // when it was paused, as the console writes times
	By     string // "console", "admin API"
	Reason string
	// Action is the POST route of the button (…/pause or …/resume), and
	// Group the form's group field ("" for a queue).
	Action string
	Group  string
	// Label names the queue or group for the button's accessible name.
	Label string
}

// Text is "Paused since <time> by <who>", with the reason when one was given.
func (p pauseView) Text() string {
	t := "Paused since " + p.Since + " by " + p.By
	if p.Reason != "" {
		t += ": " + p.Reason
	}
	return t
}

func toPauseView(name, group string, st queue.PauseState) pauseView {
	v := pauseView{Paused: st.Paused, By: st.By, Reason: st.Reason, Group: group, Label: name}
	if group != "" {
		v.Label = name + " · " + group
	}
	if st.Paused {
		v.Since = when(st.At)
		v.Action = queueActionHref(name, "resume")
	} else {
		v.Action = queueActionHref(name, "pause")
	}
	return v
}

// queuePause pauses a queue, or a topic's consumer group when the form names
// one, and returns to the page the form was on. Pausing deletes nothing and
// is undone by Resume, so it asks no confirmation. The console's sessions
// are all of the one admin token, so the pause is recorded as the
// console's (queue.ConsoleActor), not a person's.
func (s *Server) queuePause(w http.ResponseWriter, r *http.Request) { s.pauseAction(w, r, true) }

// queueResume resumes what queuePause paused.
func (s *Server) queueResume(w http.ResponseWriter, r *http.Request) { s.pauseAction(w, r, false) }

func (s *Server) pauseAction(w http.ResponseWriter, r *http.Request, pause bool) {
	if !s.parseForm(w, r, "/admin/queues") {
		return
	}
	t := queue.PauseTarget{Queue: mux.Vars(r)["queue"], Group: r.PostForm.Get("group")}
	back := pauseBack(r)
	if s.opts.Queues == nil {
		s.done(w, r, back, false, "Queues are not wired in this process.")
		return
	}
	what := "Queue " + t.Queue
	if t.Group != "" {
		what = "Consumer group " + t.Group + " of " + t.Queue
	}
	var err error
	if pause {
		_, err = s.opts.Queues.Pause(r.Context(), t, queue.PauseOpts{By: queue.ConsoleActor, Reason: r.PostForm.Get("reason")})
		what += " is paused: its messages wait until you resume it."
	} else {
		_, err = s.opts.Queues.Resume(r.Context(), t)
		what += " is running again."
	}
	if errors.Is(err, queue.ErrNotFound) {
		s.done(w, r, back, false, "There is no queue or consumer group by that name.")
		return
	}
	if err != nil {
		s.actionFailed(w, r, back, err, false)
		return
	}
	s.done(w, r, back, true, what)
}

// pauseBack is where a pause or resume returns: the form's back field, else
// the console page it was posted from (the Overview, the Queues page, a
// queue's page), else the Queues page.
func pauseBack(r *http.Request) string {
	if b := r.PostForm.Get("back"); b != "" {
		return safeNext(b)
	}
	if u, err := url.Parse(r.Referer()); err == nil && u.Path != "" {
		return safeNext(u.RequestURI())
	}
	return "/admin/queues"
}
