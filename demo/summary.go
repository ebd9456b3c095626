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

// OK reports whether the promise was checked on something and held for
// every subject. An invariant that checked nothing proves nothing: it is
// not checked, not held.
func (i Invariant) OK() bool { return i.Checked > 0 && i.Pending == 0 && i.Violations == 0 }

// NotChecked reports whether no subject reached the promise (no journey got
// that far, or the run was too short).
func (i Invariant) NotChecked() bool { return i.Checked == 0 && i.Pending == 0 && i.Violations == 0 }

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
	// Stalled is set when stopping cancelled the journeys in flight because
	// none had moved for this long (Opts.Drain): the instance stopped
	// answering.
	Stalled time.Duration
}

// mostlyFailed reports whether more than half of the flow's journeys that
// ended failed: the flow did not work, whatever the invariants say about
// the few that got through.
func (f FlowStats) mostlyFailed() bool { return f.Failed > f.Completed }

// Problems lists why the run failed, empty when it passed: an invariant that
// broke, did not settle or was not checked on anything; a flow most of
// whose journeys failed; journeys cancelled because the instance stopped
// answering.
func (s Summary) Problems() []string {
	var out []string
	var broken, notChecked []string
	for _, inv := range s.Invariants {
		switch {
		case inv.NotChecked():
			notChecked = append(notChecked, inv.Name)
		case !inv.OK():
			broken = append(broken, inv.Name)
		}
	}
	if len(s.Invariants) == 0 {
		out = append(out, "no invariant was checked")
	}
	if len(broken) > 0 {
		out = append(out, plural(len(broken), "invariant does not hold", "invariants do not hold")+": "+strings.Join(broken, "; "))
	}
	if len(notChecked) > 0 {
		out = append(out, plural(len(notChecked), "invariant was not checked", "invariants were not checked")+
			" (no journey reached it): "+strings.Join(notChecked, "; "))
	}
	for _, fl := range s.flows() {
		if fl.f.mostlyFailed() {
			out = append(out, fmt.Sprintf("most %s journeys failed (%d of %d)", fl.name, fl.f.Failed, fl.f.Failed+fl.f.Completed))
		}
	}
	if s.Stalled > 0 {
		out = append(out, fmt.Sprintf("the journeys in flight were cancelled: none moved for %s", s.Stalled))
	}
	return out
}

// OK reports whether the run passed: every invariant checked on something
// and held, no flow failed most of its journeys, nothing stalled.
func (s Summary) OK() bool { return len(s.Problems()) == 0 }

type namedFlow struct {
	name string
	f    FlowStats
}

func (s Summary) flows() []namedFlow {
	return []namedFlow{{"bot outbox", s.Bot}, {"referral", s.Referral}, {"chat", s.Chat}}
}

// Write prints the summary for a terminal.
func (s Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "\ndemo summary: %s of traffic at %.4g arrivals/s — %d arrivals", s.Elapsed.Round(time.Second), s.Rate, s.Arrivals)
	if s.Skipped > 0 {
		fmt.Fprintf(w, ", %d skipped (too many in flight)", s.Skipped)
	}
	fmt.Fprintln(w)
	flows := s.flows()
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
		if inv.NotChecked() {
			fmt.Fprintf(w, "  ---- %s — not checked: no journey reached it\n", inv.Name)
			continue
		}
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
	problems := s.Problems()
	if len(problems) == 0 {
		fmt.Fprintln(w, "all invariants hold")
		return
	}
	fmt.Fprintln(w, "THE RUN FAILED:")
	for _, p := range problems {
		fmt.Fprintf(w, "  - %s\n", p)
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
	when := fmt.Sprintf("%d:%02d", int(e.Minutes()), int(e.Seconds())%60)
	if st.Stopping {
		when = "stopping"
	}
	fmt.Fprintf(w, "demo %s  bot: %s · referral: %s · chat: %s · %d in flight\n",
		when, flow(st.Bot), flow(st.Referral), flow(st.Chat), st.InFlight)
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
