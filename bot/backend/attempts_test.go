package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"switchyard/bot/contract"
	"switchyard/queue"
)

// historyOf lists "attempt:outcome" of each line of id's history.
func historyOf(t testing.TB, o *Outbox, id contract.EventID) ([]EventAttempt, []string) {
	t.Helper()
	attempts, err := o.EventAttempts(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, 0, len(attempts))
	for _, a := range attempts {
		lines = append(lines, fmt.Sprintf("%d:%s", a.Attempt, a.Outcome))
	}
	return attempts, lines
}

// ackAs acknowledges over HTTP with the consumer's instance header.
func (e *backendEnv) ackAs(t testing.TB, instance string, req contract.AckRequest) {
	t.Helper()
	body, _ := json.Marshal(req)
	r, err := http.NewRequest(http.MethodPost, e.srv.URL+"/bot/events/ack", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+backendTestSecret)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(contract.InstanceHeader, instance)
	resp, err := e.srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ack: status %d", resp.StatusCode)
	}
}

func TestEventAttempts(t *testing.T) {
	t.Parallel()

	t.Run("an event retried twice and then processed has three attempts with errors and the consumer's instance", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		o := e.b.Outbox()
		id := emitMany(t, o, 1, Target{MagnetUID: 7})[0]
		e.ackAs(t, "bot-a:41", contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{fmt.Sprint(id): "telegram 502"}})
		e.clock.Advance(24 * time.Hour)
		e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{fmt.Sprint(id): "telegram 429"}})
		e.clock.Advance(24 * time.Hour)
		e.ackAs(t, "bot-b:42", contract.AckRequest{ProcessedIDs: []contract.EventID{id}})
		// A repeated ack changes nothing, and records nothing.
		e.ackAs(t, "bot-b:42", contract.AckRequest{ProcessedIDs: []contract.EventID{id}})

		attempts, lines := historyOf(t, o, id)
		if want := []string{"1:retry", "2:retry", "3:processed"}; !slices.Equal(lines, want) {
			t.Fatalf("history %v, want %v", lines, want)
		}
		if attempts[0].Error != "telegram 502" || attempts[1].Error != "telegram 429" || attempts[2].Error != "" {
			t.Errorf("errors %q %q %q", attempts[0].Error, attempts[1].Error, attempts[2].Error)
		}
		if attempts[0].Instance != "bot-a:41" || attempts[1].Instance != queue.Instance() || attempts[2].Instance != "bot-b:42" {
			t.Errorf("instances %q %q %q: want the header's, else this process's", attempts[0].Instance, attempts[1].Instance, attempts[2].Instance)
		}
		if !attempts[1].At.Equal(attempts[0].At.Add(24*time.Hour)) || attempts[0].At.IsZero() {
			t.Errorf("times %s, %s: want the store's clock", attempts[0].At, attempts[1].At)
		}
	})

	t.Run("a first-try success adds no line", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		id := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 7})[0]
		e.ack(t, contract.AckRequest{ProcessedIDs: []contract.EventID{id}})
		if _, lines := historyOf(t, e.b.Outbox(), id); len(lines) != 0 {
			t.Errorf("history %v, want none", lines)
		}
	})

	t.Run("a dead-lettered registered event keeps its history through a redrive, and the admin API shows it", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		o := e.b.Outbox()
		id, err := o.EmitRegistered(context.Background(), Target{MagnetUID: 3}, contract.RegisteredPayload{})
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for n := 1; n <= contract.BOT_OUTBOX_MAX_ATTEMPTS; n++ {
			e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{fmt.Sprint(id): fmt.Sprintf("fail %d", n)}})
			e.clock.Advance(24 * time.Hour)
			want = append(want, fmt.Sprintf("%d:retry", n))
		}
		want[len(want)-1] = fmt.Sprintf("%d:dead_letter", contract.BOT_OUTBOX_MAX_ATTEMPTS)
		if _, lines := historyOf(t, o, id); !slices.Equal(lines, want) {
			t.Fatalf("history %v, want %v", lines, want)
		}
		if _, err := o.Redrive(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		e.ack(t, contract.AckRequest{ProcessedIDs: []contract.EventID{id}})
		want = append(want, "0:redriven", "1:processed")
		if _, lines := historyOf(t, o, id); !slices.Equal(lines, want) {
			t.Fatalf("history after the redrive %v, want %v", lines, want)
		}

		var got struct {
			Attempts       int            `json:"attempts"`
			AttemptHistory []EventAttempt `json:"attemptHistory"`
		}
		e.call(t, http.MethodGet, fmt.Sprintf("/admin/api/bot/events/%d", id), nil, http.StatusOK, &got)
		if len(got.AttemptHistory) != len(want) || got.AttemptHistory[0].Error != "fail 1" || got.AttemptHistory[len(want)-1].Outcome != AttemptProcessed {
			t.Errorf("admin API history %+v", got.AttemptHistory)
		}
	})

	t.Run("retention prunes an event's history with the event", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		o := e.b.Outbox()
		ids := emitMany(t, o, 2, Target{MagnetUID: 9})
		e.ack(t, contract.AckRequest{RetryIDs: ids})
		e.clock.Advance(24 * time.Hour)
		e.ack(t, contract.AckRequest{ProcessedIDs: ids[:1]})
		e.clock.Advance(time.Hour)
		if n, err := o.PruneProcessed(context.Background(), e.clock.Now(), 100); err != nil || n != 1 {
			t.Fatalf("pruned %d, %v; want the processed event", n, err)
		}
		if _, lines := historyOf(t, o, ids[0]); len(lines) != 0 {
			t.Errorf("the pruned event's history %v, want none", lines)
		}
		if _, lines := historyOf(t, o, ids[1]); !slices.Equal(lines, []string{"1:retry"}) {
			t.Errorf("the kept event's history %v, want its retry", lines)
		}
	})
}
