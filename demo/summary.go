package demo

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// FlowStats counts one flow's journeys.
type FlowStats struct {
	Started   int
	Completed int
	Failed    int
	// Errors are the first distinct failure reasons, with how many
	// journeys failed so (at most maxErrors reasons).
	Errors []ErrorCount
	// Detail says what the completed journeys did, e.g. "31 activated an NFT".
	Detail string
}

// ErrorCount is a failure reason and how many journeys ended with it.
type ErrorCount struct {
	Reason string
	Count  int
}

const maxErrors = 5

// fail counts a failed journey under reason.
func (f *FlowStats) fail(reason string) {
	f.Failed++
	for i := range f.Errors {
		if f.Errors[i].Reason == reason {
			f.Errors[i].Count++
			return
		}
	}
	if len(f.Errors) < maxErrors {
		f.Errors = append(f.Errors, ErrorCount{Reason: reason, Count: 1})
	}
}

func (f FlowStats) clone() FlowStats {
	f.Errors = append([]ErrorCount(nil), f.Errors...)
	return f
}

// Invariant is one promise checked from the outside at the end of a run.
type Invariant struct {
	Name string
	// Checked is how many subjects (events, registrations, users, messages)
	// the promise was checked on.
	Checked int
	// Pending is how many had not settled when the drain time ended (an
	// event still waiting, a bond not yet made).
	Pending int
	// Violations is how many broke the promise; Examples names the first few.
	Violations int
	Examples   []string
	// Note adds counts that explain the figure.
	Note string
}

const maxExamples = 5

// OK reports whether the promise held for every subject.
func (i Invariant) OK() bool { return i.Pending == 0 && i.Violations == 0 }

func (i *Invariant) violate(format string, args ...any) {
	i.Violations++
	if len(i.Examples) < maxExamples {
		i.Examples = append(i.Examples, fmt.Sprintf(format, args...))
	}
}

// Summary is the outcome of one simulator run.
type Summary struct {
	Started time.Time
	// Elapsed is how long traffic flowed (stopping not included).
	Elapsed time.Duration
	Rate    float64
	// Arrivals is how many journeys were started; Skipped how many were not
	// because too many were still in flight.
	Arrivals int
	Skipped  int
	// Bot, Referral and Chat are the three flows.
	Bot, Referral, Chat FlowStats
	Invariants          []Invariant
}

// OK reports whether every invariant held.
func (s Summary) OK() bool {
	for _, inv := range s.Invariants {
		if !inv.OK() {
			return false
		}
	}
	return len(s.Invariants) > 0
}

// Write prints the summary for a terminal.
func (s Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "\ndemo summary: %s of traffic at %.4g arrivals/s — %d arrivals", s.Elapsed.Round(time.Second), s.Rate, s.Arrivals)
	if s.Skipped > 0 {
		fmt.Fprintf(w, ", %d skipped (too many in flight)", s.Skipped)
	}
	fmt.Fprintln(w)
	flows := []struct {
		name string
		f    FlowStats
	}{{"bot outbox", s.Bot}, {"referral", s.Referral}, {"chat", s.Chat}}
	fmt.Fprintf(w, "  %-12s %8s %10s %7s\n", "flow", "started", "completed", "failed")
	for _, fl := range flows {
		fmt.Fprintf(w, "  %-12s %8d %10d %7d\n", fl.name, fl.f.Started, fl.f.Completed, fl.f.Failed)
	}
	for _, fl := range flows {
		if fl.f.Detail != "" {
			fmt.Fprintf(w, "  %s: %s\n", fl.name, fl.f.Detail)
		}
		for _, e := range fl.f.Errors {
			fmt.Fprintf(w, "  %s failed ×%d: %s\n", fl.name, e.Count, e.Reason)
		}
	}
	fmt.Fprintln(w, "invariants:")
	for _, inv := range s.Invariants {
		mark := "ok  "
		if !inv.OK() {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s — %d checked", mark, inv.Name, inv.Checked)
		if inv.Note != "" {
			fmt.Fprintf(w, " (%s)", inv.Note)
		}
		if inv.Violations > 0 {
			fmt.Fprintf(w, ", %d broken", inv.Violations)
		}
		if inv.Pending > 0 {
			fmt.Fprintf(w, ", %d not settled in time", inv.Pending)
		}
		fmt.Fprintln(w)
		for _, ex := range inv.Examples {
			fmt.Fprintf(w, "         - %s\n", ex)
		}
	}
	if s.OK() {
		fmt.Fprintln(w, "all invariants hold")
	} else {
		fmt.Fprintln(w, "SOME INVARIANTS DO NOT HOLD")
	}
}

// writeProgress prints one progress line.
func writeProgress(w io.Writer, st Status) {
	if !st.Running && !st.Stopping {
		return
	}
	e := st.Elapsed.Round(time.Second)
	flow := func(f FlowStats) string {
		return fmt.Sprintf("%d started, %d done, %d failed", f.Started, f.Completed, f.Failed)
	}
	fmt.Fprintf(w, "demo %d:%02d  bot: %s · referral: %s · chat: %s · %d in flight\n",
		int(e.Minutes()), int(e.Seconds())%60, flow(st.Bot), flow(st.Referral), flow(st.Chat), st.InFlight)
}

// plural is "1 thing" or "n things".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// joinNonEmpty joins the non-empty parts with ", ".
func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ", ")
}
