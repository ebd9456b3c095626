package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// DemoTraffic is the traffic simulator's switch (the demo package's
// Controller, adapted in main). The Overview shows it when it is set: only a
// process whose bots both run on the sandbox has one.
type DemoTraffic interface {
	// StartTraffic seeds what is missing and starts arrivals at rate a second.
	StartTraffic(ctx context.Context, rate float64) error
	// StopTraffic ends arrivals and returns at once; the journeys in flight
	// finish and the invariants are checked in the background.
	StopTraffic()
	TrafficStatus() DemoStatus
}

// DemoStatus is the simulator's state as the console shows it.
type DemoStatus struct {
	Running, Stopping bool
	Rate              float64
	Elapsed           time.Duration
	Started, Failed   int // journeys of the current run
	InFlight          int
	// Last is the verdict of the last finished run ("" before the first).
	Last string
}

// maxDemoRate bounds what the console lets an operator ask for.
const maxDemoRate = 50

func (s *Server) demoStart(w http.ResponseWriter, r *http.Request) {
	if s.opts.Demo == nil {
		http.NotFound(w, r)
		return
	}
	rate, err := strconv.ParseFloat(r.PostFormValue("rate"), 64)
	if err != nil || rate <= 0 || rate > maxDemoRate {
		setFlash(w, r, false, fmt.Sprintf("The rate must be a number above 0 and at most %d arrivals a second.", maxDemoRate))
		http.Redirect(w, r, "/admin", http.StatusSeeOther)
		return
	}
	if err := s.opts.Demo.StartTraffic(context.WithoutCancel(r.Context()), rate); err != nil {
		setFlash(w, r, false, "Demo traffic did not start: "+err.Error())
	} else {
		setFlash(w, r, true, fmt.Sprintf("Demo traffic started at %g arrivals a second.", rate))
	}
	http.Redirect(w, r, "/admin", http.StatusSeeOther)
}

func (s *Server) demoStop(w http.ResponseWriter, r *http.Request) {
	if s.opts.Demo == nil {
		http.NotFound(w, r)
		return
	}
	s.opts.Demo.StopTraffic()
	setFlash(w, r, true, "Demo traffic is stopping: journeys in flight finish, then the invariants are checked.")
	http.Redirect(w, r, "/admin", http.StatusSeeOther)
}
