package switchyardtest_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard/switchyardtest"
)

// TestKitFailures: the kit fails a test the way a reader of its output
// needs — saying what it waited for and what it saw — and leaves nothing
// running.
func TestKitFailures(t *testing.T) {
	t.Parallel()

	t.Run("a wait that times out says what it waited for and what it saw last", func(t *testing.T) {
		t.Parallel()
		ft := new(fakeT)
		msg := ft.run(func(ft *fakeT) {
			app := switchyardtest.Start(ft, switchyardtest.Options{Wait: 300 * time.Millisecond})
			id := app.EmitEvent(ft, switchyardtest.Event{Type: switchyardtest.EventRegistered, TelegramID: "5002",
				Payload: map[string]any{"leaderUid": "not-a-uid"}})
			// Its first attempt fails; on the manual clock, its retry never
			// comes due.
			if err := app.Await(t.Context(), switchyardtest.EventFailed(id, 1), time.Minute); err != nil {
				t.Fatal(err)
			}
			app.WaitFor(ft, switchyardtest.EventProcessed(id))
		})
		ft.done()
		for _, want := range []string{"timed out after 300ms waiting for outbox event 1 processed", "saw event 1 retrying after 1 attempts", "leaderUid"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the failure %q does not say %q", msg, want)
			}
		}
	})

	t.Run("a condition that cannot hold fails at once", func(t *testing.T) {
		t.Parallel()
		ft := new(fakeT)
		began := time.Now()
		msg := ft.run(func(ft *fakeT) {
			app := switchyardtest.Start(ft, switchyardtest.Options{})
			app.WaitFor(ft, switchyardtest.FunnelAt(app.TelegramUser(1, "A"), "onboarded"))
		})
		ft.done()
		if !strings.Contains(msg, `no funnel stage is called "onboarded"`) {
			t.Errorf("the failure: %q", msg)
		}
		if took := time.Since(began); took > 20*time.Second {
			t.Errorf("it took %s: the wait went on after the condition's error", took)
		}
	})

	t.Run("an option serve refuses fails Start with serve's words", func(t *testing.T) {
		t.Parallel()
		ft := new(fakeT)
		msg := ft.run(func(ft *fakeT) {
			switchyardtest.Start(ft, switchyardtest.Options{Args: []string{"--retention-outbox", "soon"}})
		})
		failures := ft.done()
		if !strings.Contains(msg, "switchyardtest: start:") || !strings.Contains(msg, "retention-outbox") {
			t.Errorf("the failure: %q", msg)
		}
		if len(failures) != 1 {
			t.Errorf("failures: %q, want the start's only", failures)
		}
	})

	t.Run("Advance on the real clock fails the test", func(t *testing.T) {
		t.Parallel()
		ft := new(fakeT)
		msg := ft.run(func(ft *fakeT) {
			app := switchyardtest.Start(ft, switchyardtest.Options{RealClock: true})
			if now := app.Now(ft); time.Since(now).Abs() > time.Minute {
				t.Errorf("the real clock reads %s", now)
			}
			app.Advance(ft, time.Minute)
		})
		ft.done()
		if !strings.Contains(msg, "Advance on an instance with the real clock") {
			t.Errorf("the failure: %q", msg)
		}
	})

	t.Run("Call returns the instance's JSON error, and the test's cleanup stops the instance", func(t *testing.T) {
		t.Parallel()
		ft := new(fakeT)
		var url string
		ft.run(func(ft *fakeT) {
			app := switchyardtest.Start(ft, switchyardtest.Options{})
			url = app.URL
			err := app.Call(t.Context(), http.MethodPost, "/admin/api/clock/advance", map[string]string{"by": "-1m"}, nil)
			e, ok := errors.AsType[*switchyardtest.APIError](err)
			if !ok || e.Status != http.StatusBadRequest || e.Code != "bad_request" || !strings.Contains(e.Message, "only goes forward") {
				t.Errorf("a move backwards: %#v, want the 400's JSON error", err)
			}
		})
		if failures := ft.done(); len(failures) != 0 {
			t.Errorf("failures: %q", failures)
		}
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			t.Errorf("the instance still answers at %s after the cleanup", url)
		}
	})
}
