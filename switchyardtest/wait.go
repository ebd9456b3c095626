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

// Queue is a queue's counts by state.
type Queue struct {
	Name     string `json:"name"`
	Ready    int64  `json:"ready"`
	Delayed  int64  `json:"delayed"`
	Held     int64  `json:"held"`
	InFlight int64  `json:"inFlight"`
	Dead     int64  `json:"dead"`
}

func (a *App) queue(ctx context.Context, name string) (Queue, error) {
	var res struct {
		Queues []Queue `json:"queues"`
	}
	if err := a.Get(ctx, "/admin/api/queues", &res); err != nil {
		return Queue{}, err
	}
	for _, q := range res.Queues {
		if q.Name == name {
			return q, nil
		}
	}
	return Queue{}, fmt.Errorf("no queue %s", name)
}

// QueueIs holds once the queue name is as holds says, such as "nothing
// ready or in hand" (q.Ready+q.InFlight == 0).
func QueueIs(name, what string, holds func(q Queue) bool) Condition {
	return Condition{
		What: fmt.Sprintf("queue %s: %s", name, what),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			q, err := a.queue(ctx, name)
			if err != nil {
				return false, "", err
			}
			return holds(q), fmt.Sprintf("%d ready, %d delayed, %d held, %d in hand, %d dead", q.Ready, q.Delayed, q.Held, q.InFlight, q.Dead), nil
		},
	}
}
