package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// fastRetry retries at once, so a test's attempts follow each other.
var fastRetry = queue.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}

// outcomesOf lists "attempt:outcome" of each attempt, oldest first.
func outcomesOf(attempts []queue.Attempt) []string {
	out := make([]string, 0, len(attempts))
	for _, a := range attempts {
		out = append(out, fmt.Sprintf("%d:%s", a.Attempt, a.Outcome))
	}
	return out
}

// waitAttempts waits until the history of id reads want.
func waitAttempts(t *testing.T, admin *queue.Admin, q, group, id string, want ...string) []queue.Attempt {
	t.Helper()
	var got []queue.Attempt
	testwait.Until(t, 10*time.Second, "attempts "+strings.Join(want, " "), func() bool {
		var err error
		got, err = admin.Attempts(t.Context(), q, group, id)
		return err == nil && slices.Equal(outcomesOf(got), want)
	}, func() string { return fmt.Sprint(outcomesOf(got)) })
	return got
}

func TestAttemptHistory(t *testing.T) {
	t.Parallel()

	t.Run("a message that fails twice and then succeeds has three attempts with outcome, error, duration and instance", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: fastRetry})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			time.Sleep(2 * time.Millisecond) // the handler's work, which the history times
			if m.Attempt < 3 {
				return fmt.Errorf("provider 500 on attempt %d", m.Attempt)
			}
			return nil
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		got := waitAttempts(t, admin, "q", "", string(sent.ID), "1:retry", "2:retry", "3:done")
		for i, a := range got {
			wantErr := ""
			if i < 2 {
				wantErr = fmt.Sprintf("provider 500 on attempt %d", i+1)
			}
			if a.Error != wantErr {
				t.Errorf("attempt %d error %q, want %q", i+1, a.Error, wantErr)
			}
			if !a.DurationKnown || a.Duration < 2*time.Millisecond || a.Duration > 10*time.Second {
				t.Errorf("attempt %d ran %s (known %v), want the handler's 2 ms or more", i+1, a.Duration, a.DurationKnown)
			}
			if a.Instance != queue.Instance() || !strings.Contains(a.Instance, ":") {
				t.Errorf("attempt %d ran on %q, want this process, %q", i+1, a.Instance, queue.Instance())
			}
			if a.At.IsZero() || (i > 0 && a.At.Before(got[i-1].At)) {
				t.Errorf("attempt %d at %s, after attempt %d at %s: want times in order", i+1, a.At, i, got[i-1].At)
			}
		}
	})

	t.Run("a first-try success is not recorded unless the queue records every success", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		quiet := queue.New(queue.NewOpts{DB: db, Name: "quiet"})
		all := queue.New(queue.NewOpts{DB: db, Name: "all", RecordSuccesses: true})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var handled atomic.Int32
		h := func(ctx context.Context, m queue.Message) error { handled.Add(1); return nil }
		start(t, quiet, queue.WorkerOpts{Handler: h})
		start(t, all, queue.WorkerOpts{Handler: h})
		a, err := quiet.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		b, err := all.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		waitAttempts(t, admin, "all", "", string(b.ID), "1:done")
		testwait.Until(t, 5*time.Second, "both handled", func() bool { return liveMessages(t, db, "quiet") == 0 && handled.Load() == 2 })
		if got, err := admin.Attempts(t.Context(), "quiet", "", string(a.ID)); err != nil || len(got) != 0 {
			t.Errorf("attempts of a first-try success %v, %v; want none recorded", outcomesOf(got), err)
		}
	})

	t.Run("a dead letter keeps its full history, and a redrive carries it on", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: fastRetry})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var healed atomic.Bool
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			if healed.Load() && m.Attempt >= 2 {
				return nil
			}
			return fmt.Errorf("chat blocked (attempt %d)", m.Attempt)
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte(`{"chat":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		id := string(sent.ID)
		waitAttempts(t, admin, "q", "", id, "1:retry", "2:retry", "3:dead")
		d, attempts, err := admin.DeadLetterDetail(t.Context(), queue.DeadFilter{Queue: "q", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if d.ID != id || d.Attempts != 3 || !slices.Equal(outcomesOf(attempts), []string{"1:retry", "2:retry", "3:dead"}) {
			t.Fatalf("dead letter %s with %d attempts, history %v; want %s, 3, retry retry dead", d.ID, d.Attempts, outcomesOf(attempts), id)
		}
		if attempts[2].Error != "chat blocked (attempt 3)" || attempts[2].Error != d.LastError {
			t.Errorf("the dead attempt's error %q, the dead letter's %q; want both the third failure", attempts[2].Error, d.LastError)
		}

		healed.Store(true)
		if n, err := admin.Redrive(t.Context(), queue.DeadFilter{Queue: "q", ID: id}); err != nil || n != 1 {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		got := waitAttempts(t, admin, "q", "", id, "1:retry", "2:retry", "3:dead", "0:redriven", "1:retry", "2:done")
		if got[3].Instance != queue.Instance() || got[3].DurationKnown {
			t.Errorf("the redrive's line %+v: want this instance and no duration", got[3])
		}
	})

	t.Run("a redriven message that succeeds at once records its success", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: queue.RetryPolicy{MaxAttempts: 1}})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var healed atomic.Bool
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			if healed.Load() {
				return nil
			}
			return errors.New("down")
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		waitAttempts(t, admin, "q", "", string(sent.ID), "1:dead")
		healed.Store(true)
		if _, err := admin.Redrive(t.Context(), queue.DeadFilter{Queue: "q", ID: string(sent.ID)}); err != nil {
			t.Fatal(err)
		}
		waitAttempts(t, admin, "q", "", string(sent.ID), "1:dead", "0:redriven", "1:done")
	})

	t.Run("a success acknowledged with AckTx after a failure is recorded once, in the handler's transaction", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: fastRetry})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var handled atomic.Int32
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			if m.Attempt == 1 {
				return errors.New("first try fails")
			}
			err := db.Tx(ctx, func(tx *sql.Tx) error { return q.AckTx(ctx, tx, m) })
			handled.Add(1)
			return err
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		got := waitAttempts(t, admin, "q", "", string(sent.ID), "1:retry", "2:done")
		testwait.Until(t, 5*time.Second, "the handler's result committed", func() bool { return handled.Load() == 1 && liveMessages(t, db, "q") == 0 })
		if !got[1].DurationKnown {
			t.Errorf("the acknowledged attempt has no duration: %+v", got[1])
		}
		// The worker's own commit of the result found the message gone and
		// added nothing: still two lines.
		if n := count(t, db, `select count(*) from queue_failures where message_id = ?`, string(sent.ID)); n != 2 {
			t.Errorf("%d attempt rows, want 2", n)
		}
	})

	t.Run("retention prunes the history by age, the newest kept", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: queue.RetryPolicy{MaxAttempts: 1}})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			return errors.New("down")
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		got := waitAttempts(t, admin, "q", "", string(sent.ID), "1:dead")
		if n, err := admin.PruneFailures(t.Context(), got[0].At, 100); err != nil || n != 0 {
			t.Fatalf("pruning before the attempt removed %d, %v; want 0", n, err)
		}
		if n, err := admin.PruneFailures(t.Context(), got[0].At.Add(time.Second), 100); err != nil || n != 1 {
			t.Fatalf("pruning after the attempt removed %d, %v; want 1", n, err)
		}
		if got, _ := admin.Attempts(t.Context(), "q", "", string(sent.ID)); len(got) != 0 {
			t.Errorf("history after retention %v, want empty", outcomesOf(got))
		}
		// The dead letter itself follows its own rule.
		if _, _, err := admin.DeadLetterDetail(t.Context(), queue.DeadFilter{Queue: "q", ID: string(sent.ID)}); err != nil {
			t.Errorf("dead letter after the history's retention: %v", err)
		}
	})

	t.Run("a topic record that fails twice and then succeeds has three attempts, and a dead record its history", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 2)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Retry: fastRetry, PollInterval: 5 * time.Millisecond,
			Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
				time.Sleep(time.Millisecond) // the handler's work
				switch {
				case string(r.Value) == "poison":
					return fmt.Errorf("bad record (attempt %d)", r.Attempt)
				case r.Attempt < 3:
					return fmt.Errorf("busy (attempt %d)", r.Attempt)
				}
				return nil
			}})
		ok, err := topic.Publish(t.Context(), "a", []byte("fine"))
		if err != nil {
			t.Fatal(err)
		}
		bad, err := topic.Publish(t.Context(), "b", []byte("poison"))
		if err != nil {
			t.Fatal(err)
		}
		got := waitAttempts(t, admin, "t", "g", queue.RecordAttemptsID(ok.Partition, ok.Offset), "1:retry", "2:retry", "3:done")
		for i, a := range got {
			if !a.DurationKnown || a.Duration < time.Millisecond || a.Instance != queue.Instance() {
				t.Errorf("record attempt %d: %+v; want the handler's time and this instance", i+1, a)
			}
		}
		waitAttempts(t, admin, "t", "g", queue.RecordAttemptsID(bad.Partition, bad.Offset), "1:retry", "2:retry", "3:dead")
		dead, err := admin.ListDead(t.Context(), queue.DeadFilter{Queue: "t", Group: "g"})
		if err != nil || len(dead) != 1 {
			t.Fatalf("dead letters %v, %v", dead, err)
		}
		_, attempts, err := admin.DeadLetterDetail(t.Context(), queue.DeadFilter{Queue: "t", Group: "g", ID: dead[0].ID})
		if err != nil || !slices.Equal(outcomesOf(attempts), []string{"1:retry", "2:retry", "3:dead"}) || attempts[2].Error != "bad record (attempt 3)" {
			t.Errorf("dead record's history %v, %v", outcomesOf(attempts), err)
		}
	})

	t.Run("the admin API answers a dead letter with its attempts, and a message's attempts", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "sender.flow", Retry: queue.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			return fmt.Errorf("429 on attempt %d", m.Attempt)
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte(`{"chat":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		waitAttempts(t, admin, "sender.flow", "", string(sent.ID), "1:retry", "2:dead")
		api := adminAPI(t, db)
		r := call(t, http.MethodGet, api+"/queues/sender.flow/dlq/"+url.PathEscape(string(sent.ID)), "")
		if r.status != http.StatusOK {
			t.Fatalf("dead letter detail: %d %s", r.status, r.raw)
		}
		dl, _ := r.body["deadLetter"].(map[string]any)
		attempts := r.list("attempts")
		if dl["id"] != string(sent.ID) || len(attempts) != 2 || attempts[0]["outcome"] != "retry" || attempts[1]["outcome"] != "dead" ||
			attempts[1]["error"] != "429 on attempt 2" || attempts[1]["instance"] != queue.Instance() || attempts[1]["durationMs"] == nil {
			t.Errorf("dead letter detail %s", r.raw)
		}
		r = call(t, http.MethodGet, api+"/queues/sender.flow/messages/"+url.PathEscape(string(sent.ID))+"/attempts", "")
		if r.status != http.StatusOK || len(r.list("attempts")) != 2 {
			t.Errorf("message attempts: %d %s", r.status, r.raw)
		}
		if r := call(t, http.MethodGet, api+"/queues/sender.flow/dlq/m_nope", ""); r.status != http.StatusNotFound {
			t.Errorf("an unknown dead letter answered %d %s, want 404", r.status, r.raw)
		}
	})
}
