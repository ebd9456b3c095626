package backend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"switchyard/bot/contract"
	"switchyard/clock"
	"switchyard/testwait"
)

// TestManualClockRetries takes a registered event through its ten attempts
// with the store's clock moved by the clock's admin API (clock/), the way an
// integration test of a --clock manual instance does: every retry comes due
// only when the clock passes next_retry_at, a long poll waiting for it
// wakes at the move (the outbox's own poll is an hour here, so nothing else
// could answer it), and the tenth attempt dead-letters the event in a
// fraction of a second of real time.
func TestManualClockRetries(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t, func(o *Opts) { o.PollInterval = time.Hour })
	clock.New(e.db).AdminRoutes(e.router.PathPrefix("/admin/api").Subrouter())
	advance := func(t *testing.T, by time.Duration) time.Time {
		t.Helper()
		var got clock.Time
		e.call(t, "POST", "/admin/api/clock/advance", map[string]string{"by": by.String()}, 200, &got)
		return got.Now
	}

	t.Run("a registered event failed ten times reaches its dead letter in well under a second", func(t *testing.T) {
		began := time.Now()
		var emitted EmitResponse
		e.call(t, "POST", "/admin/api/bot/events", map[string]any{"eventType": "registered", "magnetUid": 77}, 201, &emitted)
		id := emitted.ID
		if events := e.pending(t, ""); len(events) != 1 || events[0].ID != id {
			t.Fatalf("the new event is not pending: %+v", events)
		}
		for attempt := 1; attempt <= contract.BOT_OUTBOX_MAX_ATTEMPTS; attempt++ {
			res := e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{fmt.Sprint(id): "telegram 500"}})
			if attempt == contract.BOT_OUTBOX_MAX_ATTEMPTS {
				if res != (contract.AckResult{DeadLettered: 1}) {
					t.Fatalf("the tenth failure: ack %+v, want it dead-lettered", res)
				}
				break
			}
			if res != (contract.AckResult{Retried: 1}) {
				t.Fatalf("failure %d: ack %+v", attempt, res)
			}
			rec := e.event(t, id)
			backoff := time.Duration(contract.BOT_OUTBOX_BACKOFF_BASE_SECONDS<<attempt) * time.Second
			if rec.NextRetryAt == nil || !rec.NextRetryAt.Equal(e.clock.Now().Add(backoff)) {
				t.Fatalf("failure %d: next retry %v, want now %v + %v", attempt, rec.NextRetryAt, e.clock.Now(), backoff)
			}
			if events := e.pending(t, ""); len(events) != 0 {
				t.Fatalf("failure %d: pending before its retry is due: %+v", attempt, events)
			}
			// A second short of the retry it is still not due.
			advance(t, rec.NextRetryAt.Sub(e.clock.Now())-time.Second)
			if events := e.pending(t, ""); len(events) != 0 {
				t.Fatalf("failure %d: pending a second before its retry: %+v", attempt, events)
			}
			// A long poll waits; the move past next_retry_at answers it.
			got := make(chan []contract.Event, 1)
			go func() { got <- longPoll(e) }()
			testwait.Until(t, 10*time.Second, "the long poll to wait", func() bool { return waiters(e) == 1 })
			advance(t, time.Second)
			select {
			case events := <-got:
				if len(events) != 1 || events[0].ID != id || events[0].Attempts != attempt {
					t.Fatalf("failure %d: the long poll answered %+v", attempt, events)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("failure %d: the long poll did not wake when the clock passed next_retry_at", attempt)
			}
		}
		took := time.Since(began)
		rec := e.event(t, id)
		if !rec.DeadLettered || rec.State != StateDead || rec.Attempts != contract.BOT_OUTBOX_MAX_ATTEMPTS {
			t.Fatalf("after ten failures: %+v", rec)
		}
		// 60 s · (2 + 4 + … + 512) of the store's clock went by.
		if passed := rec.DeadLetteredAt.Sub(rec.CreatedAt); passed < 17*time.Hour {
			t.Fatalf("the store's clock moved %v from emit to dead letter, want over 17 h", passed)
		}
		t.Logf("ten attempts to the dead letter: %v of the store's clock in %v of real time",
			rec.DeadLetteredAt.Sub(rec.CreatedAt), took)
	})
}

// longPoll is GET /bot/events/pending?wait=25 off the test's goroutine: the
// events it answered, nil when it failed.
func longPoll(e *backendEnv) []contract.Event {
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/bot/events/pending?wait=25", nil)
	if err != nil {
		return nil
	}
	req.Header.Set("Authorization", "Bearer "+backendTestSecret)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var res contract.PendingResponse
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&res) != nil {
		return nil
	}
	return res.Events
}
