package switchyardtest

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// A Condition is an outcome a test waits for. What names it in a failure
// ("bond created for 5f0c…"); Check asks the instance whether it holds now
// and, when it does not, says what it saw instead. An error of Check (an
// answer the instance should not give) ends the wait at once.
type Condition struct {
	What  string
	Check func(ctx context.Context, a *App) (ok bool, saw string, err error)
}

// Until is a condition of the test's own: holds reports whether it holds,
// and what it saw.
func Until(what string, holds func(ctx context.Context, a *App) (bool, string, error)) Condition {
	return Condition{What: what, Check: holds}
}

// pollEvery is how often WaitFor asks again.
const pollEvery = 10 * time.Millisecond

// WaitFor waits until c holds, for at most Options.Wait of real time, and
// fails the test with what it saw last when it does not. It never moves the
// clock: move it first (Advance), then wait for what came due.
func (a *App) WaitFor(t T, c Condition) {
	t.Helper()
	if err := a.Await(t.Context(), c, a.wait); err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
}

// Await is WaitFor for code that is not a test: it returns an error when c
// did not hold within timeout.
func (a *App) Await(ctx context.Context, c Condition, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	saw := ""
	for {
		ok, now, err := c.Check(ctx, a)
		switch {
		case ok:
			return nil
		case err != nil && ctx.Err() == nil:
			return fmt.Errorf("waiting for %s: %w", c.What, err)
		case now != "":
			saw = now
		}
		select {
		case <-ctx.Done():
			if saw == "" {
				saw = "nothing yet"
			}
			return fmt.Errorf("timed out after %s waiting for %s; saw %s", timeout, c.What, saw)
		case <-tick.C:
		}
	}
}

// notFound makes a 404 a "not yet": what a condition waits for may not
// exist yet.
func notFound(err error) (bool, string, error) {
	if StatusOf(err) == http.StatusNotFound {
		return false, err.Error(), nil
	}
	return false, "", err
}
