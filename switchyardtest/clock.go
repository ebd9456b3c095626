package switchyardtest

import (
	"net/http"
	"time"
)

// clockTime is the answer of the clock's routes.
type clockTime struct {
	Now time.Time `json:"now"`
}

// Now is the instance's time: the manual clock's, or the system's.
func (a *App) Now(t T) time.Time {
	t.Helper()
	if !a.manual {
		return time.Now().UTC()
	}
	var c clockTime
	a.Do(t, http.MethodGet, "/admin/api/clock", nil, &c)
	return c.Now
}

// Advance moves the manual clock forward by d and returns the new time.
// Everything that came due runs at once: the outbox's retries, queue
// delays and backoffs, the referral consumer's retries, leases, prunes and
// schedules. Wait for the work in hand before a move (WaitFor): a queue
// message in flight when the clock passes its visibility timeout is
// delivered again, as after a stall that long.
func (a *App) Advance(t T, d time.Duration) time.Time {
	t.Helper()
	if !a.manual {
		t.Fatalf("switchyardtest: Advance on an instance with the real clock (Options.RealClock)")
	}
	var c clockTime
	a.Do(t, http.MethodPost, "/admin/api/clock/advance", map[string]string{"by": d.String()}, &c)
	return c.Now
}

// AdvanceTo moves the manual clock forward to at, when at is later than
// now, and returns the clock's time.
func (a *App) AdvanceTo(t T, at time.Time) time.Time {
	t.Helper()
	now := a.Now(t)
	if !at.After(now) {
		return now
	}
	return a.Advance(t, at.Sub(now))
}
