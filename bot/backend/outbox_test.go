package backend

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard/bot/contract"
	"switchyard/migrations"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// emitMany writes n events of one target in one transaction.
func emitMany(t testing.TB, o *Outbox, n int, target Target) []contract.EventID {
	t.Helper()
	ids := make([]contract.EventID, 0, n)
	err := o.Tx(context.Background(), func(tx *sql.Tx) error {
		ids = ids[:0] // a transaction run again (PostgreSQL) starts over
		for range n {
			id, err := o.EmitTx(context.Background(), tx, NewEvent{Type: contract.EventStatusNftActivated, Target: target, Payload: json.RawMessage(`{"level":"lp1"}`)})
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (e *backendEnv) pending(t testing.TB, query string) []contract.Event {
	t.Helper()
	var res contract.PendingResponse
	e.call(t, "GET", "/bot/events/pending"+query, nil, 200, &res)
	return res.Events
}

func (e *backendEnv) ack(t testing.TB, req contract.AckRequest) contract.AckResult {
	t.Helper()
	var res contract.AckResult
	e.call(t, "POST", "/bot/events/ack", req, 200, &res)
	return res
}

func eventIDs(events []contract.Event) []contract.EventID {
	ids := make([]contract.EventID, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func TestPendingOrder(t *testing.T) {
	t.Parallel()

	t.Run("groups each user's events together in id order with a mix of uid and telegram-only users", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		ctx := context.Background()
		// Interleaved emits. uid 5 and Telegram id 5 are different users, as are
		// uid 10 and uid 9 (numeric order, not text order); an event with both a
		// uid and a Telegram id belongs to the uid.
		targets := []struct {
			name   string
			target Target
		}{
			{"uid:10", Target{MagnetUID: 10}},
			{"tg:5", Target{TelegramID: "5"}},
			{"uid:5", Target{MagnetUID: 5, TelegramID: "777"}},
			{"uid:9", Target{MagnetUID: 9}},
			{"tg:123456789012345678", Target{TelegramID: "123456789012345678"}},
			{"uid:5", Target{MagnetUID: 5}},
			{"tg:5", Target{TelegramID: "5"}},
			{"uid:10", Target{MagnetUID: 10}},
			{"tg:777", Target{TelegramID: "777"}},
			{"uid:9", Target{MagnetUID: 9, TelegramID: "5"}},
			{"uid:5", Target{MagnetUID: 5}},
			{"tg:5", Target{TelegramID: "5"}},
		}
		byUser := map[string][]contract.EventID{}
		for i, tt := range targets {
			id, err := e.b.Outbox().Emit(ctx, NewEvent{Type: contract.EventTypes[i%len(contract.EventTypes)], Target: tt.target})
			if err != nil {
				t.Fatal(err)
			}
			byUser[tt.name] = append(byUser[tt.name], id)
		}
		var want []contract.EventID
		for _, key := range []string{"tg:5", "tg:777", "tg:123456789012345678", "uid:5", "uid:9", "uid:10"} {
			want = append(want, byUser[key]...)
		}
		events := e.pending(t, "")
		if got := eventIDs(events); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("order %v, want %v", got, want)
		}
		// Each user's events are adjacent: a key, once left, never comes back.
		seen, prev := map[string]bool{}, ""
		for _, ev := range events {
			if k := ev.UserKey(); k != prev {
				if seen[k] {
					t.Fatalf("user %s comes back after another user", k)
				}
				seen[k], prev = true, k
			}
		}
	})

	t.Run("answers the contract's fields, telegram ids as text with full precision", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		id, err := e.b.Outbox().EmitWalletConnected(context.Background(),
			Target{MagnetUID: 42, TelegramID: "9007199254740993"}, contract.WalletConnectedPayload{Addr: "EQx"})
		if err != nil {
			t.Fatal(err)
		}
		body := e.call(t, "GET", "/bot/events/pending", nil, 200, nil)
		want := fmt.Sprintf(`{"events":[{"id":%d,"eventType":"wallet_connected","telegramId":"9007199254740993","magnetUid":42,"payload":{"addr":"EQx"},"createdAt":"2026-01-15T12:00:00.000000Z","attempts":0}]}`, id)
		if strings.TrimSpace(string(body)) != want {
			t.Fatalf("body\n%s\nwant\n%s", body, want)
		}
	})
}

func TestPendingHoldsUserBehindRetry(t *testing.T) {
	t.Parallel()
	t.Run("a user's later events wait while an earlier one waits for its retry; other users go on", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		first := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 1})[0]
		later := emitMany(t, e.b.Outbox(), 2, Target{MagnetUID: 1})
		other := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 2})[0]
		e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{first}})
		if got := eventIDs(e.pending(t, "")); fmt.Sprint(got) != fmt.Sprint([]contract.EventID{other}) {
			t.Fatalf("pending while user 1 waits for a retry: %v, want only %d", got, other)
		}
		e.clock.Advance(2 * time.Minute)
		want := append([]contract.EventID{first}, later...)
		want = append(want, other)
		if got := eventIDs(e.pending(t, "")); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pending once the retry is due: %v, want %v", got, want)
		}
	})
}

func TestPendingLimit(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t)
	emitMany(t, e.b.Outbox(), 600, Target{MagnetUID: 1})

	tests := []struct {
		query string
		want  int // events; 0 means a 400
	}{
		{"", contract.BOT_OUTBOX_DEFAULT_PENDING_LIMIT},
		{"?limit=1", 1},
		{"?limit=250", 250},
		{"?limit=500", 500},
		{"?limit=501", contract.BOT_OUTBOX_MAX_PENDING_LIMIT},
		{"?limit=100000", contract.BOT_OUTBOX_MAX_PENDING_LIMIT},
		{"?limit=99999999999999999999999", contract.BOT_OUTBOX_MAX_PENDING_LIMIT},
		{"?limit=0", 0},
		{"?limit=-1", 0},
		{"?limit=-99999999999999999999999", 0},
		{"?limit=abc", 0},
		{"?limit=1.5", 0},
		{"?limit=", 0},
		{"?limit=%201", 0},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("limit %q answers %d events", tt.query, tt.want)
		if tt.want == 0 {
			name = fmt.Sprintf("limit %q is refused with 400", tt.query)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if tt.want == 0 {
				body := e.call(t, "GET", "/bot/events/pending"+tt.query, nil, 400, nil)
				if errorCode(t, body) != "bad_request" {
					t.Fatalf("body %s", body)
				}
				return
			}
			if got := len(e.pending(t, tt.query)); got != tt.want {
				t.Fatalf("%d events, want %d", got, tt.want)
			}
		})
	}
}

func TestPendingWait(t *testing.T) {
	t.Parallel()

	t.Run("a long-poll returns within moments of an emit in this process", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t, func(o *Opts) { o.PollInterval = time.Hour }) // only the notifier can wake it
		got := make(chan []contract.Event, 1)
		go func() {
			var res contract.PendingResponse
			e.call(t, "GET", "/bot/events/pending?wait=20", nil, 200, &res)
			got <- res.Events
		}()
		testwait.Until(t, 10*time.Second, "the long poll to sleep", func() bool { return waiters(e) == 1 })
		start := time.Now()
		id, err := e.b.Outbox().EmitRegistered(context.Background(), Target{MagnetUID: 3}, contract.RegisteredPayload{})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case events := <-got:
			if len(events) != 1 || events[0].ID != id {
				t.Fatalf("long-poll answered %+v", events)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("woke %v after the emit", d)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the long-poll did not wake on the emit")
		}
	})

	t.Run("a long-poll sees an event written without a notify at the next poll", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t) // polls every 50 ms
		got := make(chan []contract.Event, 1)
		go func() {
			var res contract.PendingResponse
			e.call(t, "GET", "/bot/events/pending?wait=20", nil, 200, &res)
			got <- res.Events
		}()
		testwait.Until(t, 10*time.Second, "the long poll to sleep", func() bool { return waiters(e) == 1 })
		// Another process's emit: committed without this process's notifier.
		err := e.db.Tx(context.Background(), func(tx *sql.Tx) error {
			_, err := e.b.Outbox().EmitTx(context.Background(), tx, NewEvent{Type: contract.EventNewPartner, Target: Target{MagnetUID: 4}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case events := <-got:
			if len(events) != 1 {
				t.Fatalf("long-poll answered %+v", events)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("the long-poll did not see the event")
		}
	})

	t.Run("a long-poll with nothing to send answers an empty list when the wait ends", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		start := time.Now()
		events := e.pending(t, "?wait=1")
		if len(events) != 0 {
			t.Fatalf("events %+v", events)
		}
		if d := time.Since(start); d < 900*time.Millisecond {
			t.Fatalf("returned after %v, before the wait ended", d)
		}
	})

	t.Run("a long-poll returns at once when an event is already pending", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		emitMany(t, e.b.Outbox(), 2, Target{MagnetUID: 1})
		start := time.Now()
		if events := e.pending(t, "?wait=30"); len(events) != 2 {
			t.Fatalf("events %+v", events)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("took %v", d)
		}
	})

	t.Run("a long-poll ends when its caller goes away", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := e.b.Outbox().WaitPending(ctx, 10, 30*time.Second)
			done <- err
		}()
		testwait.Until(t, 10*time.Second, "the long poll to sleep", func() bool { return waiters(e) == 1 })
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the long-poll ignored its context")
		}
	})

	t.Run("shutting down ends the long-polls at once", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		got := make(chan []contract.Event, 1)
		go func() {
			var res contract.PendingResponse
			e.call(t, "GET", "/bot/events/pending?wait=30", nil, 200, &res)
			got <- res.Events
		}()
		testwait.Until(t, 10*time.Second, "the long poll to sleep", func() bool { return waiters(e) == 1 })
		e.b.Shutdown()
		select {
		case events := <-got:
			if len(events) != 0 {
				t.Fatalf("events %+v", events)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the long-poll outlived the shutdown")
		}
		start := time.Now()
		e.pending(t, "?wait=30")
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("a long-poll after the shutdown waited %v", d)
		}
	})

	for _, q := range []string{"?wait=-1", "?wait=abc", "?wait=1.5", "?wait="} {
		t.Run(fmt.Sprintf("wait %q is refused with 400", q), func(t *testing.T) {
			t.Parallel()
			e := newBackendEnv(t)
			e.call(t, "GET", "/bot/events/pending"+q, nil, 400, nil)
		})
	}
}

// waiters counts the long-polls of e that found nothing and sleep.
func waiters(e *backendEnv) int { return int(e.b.outbox.idle.Load()) }

func TestDecideRetry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	for attempts := 1; attempts <= 9; attempts++ {
		t.Run(fmt.Sprintf("attempt %d is due again after 60 s times 2^%d", attempts, attempts), func(t *testing.T) {
			d := decideRetry(contract.EventRegistered, attempts-1, now)
			want := now.Add(time.Duration(60*(1<<attempts)) * time.Second)
			if d.Attempts != attempts || !d.NextRetryAt.Equal(want) || d.DeadLetter || d.Close {
				t.Fatalf("decideRetry = %+v, want attempts %d due %v", d, attempts, want)
			}
		})
	}
	t.Run("the tenth attempt dead-letters registered", func(t *testing.T) {
		d := decideRetry(contract.EventRegistered, 9, now)
		if d.Attempts != 10 || !d.DeadLetter || d.Close || !d.NextRetryAt.IsZero() {
			t.Fatalf("decideRetry = %+v", d)
		}
	})
	for _, typ := range contract.EventTypes {
		if typ == contract.EventRegistered {
			continue
		}
		t.Run(fmt.Sprintf("the tenth attempt closes %s", typ), func(t *testing.T) {
			d := decideRetry(typ, 9, now)
			if d.Attempts != 10 || d.DeadLetter || !d.Close || !d.NextRetryAt.IsZero() {
				t.Fatalf("decideRetry = %+v", d)
			}
		})
	}
}

func TestAckRetry(t *testing.T) {
	t.Parallel()

	t.Run("next_retry_at for attempts 1 to 9 is now plus 60 s times 2^attempts", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		id := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 1})[0]
		for attempts := 1; attempts <= 9; attempts++ {
			now := e.clock.Now()
			res := e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{fmt.Sprint(id): fmt.Sprintf("fail %d", attempts)}})
			if res.Retried != 1 {
				t.Fatalf("attempt %d: ack %+v", attempts, res)
			}
			rec := e.event(t, id)
			want := now.Add(time.Duration(contract.BOT_OUTBOX_BACKOFF_BASE_SECONDS<<attempts) * time.Second)
			if rec.Attempts != attempts || rec.NextRetryAt == nil || !rec.NextRetryAt.Equal(want) ||
				rec.LastAttemptAt == nil || !rec.LastAttemptAt.Equal(now) ||
				rec.LastError == nil || *rec.LastError != fmt.Sprintf("fail %d", attempts) || rec.State != StateRetrying {
				t.Fatalf("attempt %d: %+v, want next retry %v", attempts, rec, want)
			}
			e.clock.Set(want.Add(-time.Second))
			if events := e.pending(t, ""); len(events) != 0 {
				t.Fatalf("attempt %d: pending a second before it is due: %+v", attempts, events)
			}
			e.clock.Set(want)
			if events := e.pending(t, ""); len(events) != 1 || events[0].Attempts != attempts {
				t.Fatalf("attempt %d: not pending when due: %+v", attempts, events)
			}
		}
	})

	t.Run("the tenth retry dead-letters registered and logs it", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		id, err := e.b.Outbox().EmitRegistered(context.Background(), Target{MagnetUID: 8}, contract.RegisteredPayload{})
		if err != nil {
			t.Fatal(err)
		}
		var last contract.AckResult
		for range contract.BOT_OUTBOX_MAX_ATTEMPTS {
			last = e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{fmt.Sprint(id): "telegram 500"}})
			e.clock.Advance(24 * time.Hour)
		}
		if last != (contract.AckResult{DeadLettered: 1}) {
			t.Fatalf("last ack %+v", last)
		}
		rec := e.event(t, id)
		if rec.ProcessedAt != nil || !rec.DeadLettered || rec.DeadLetteredAt == nil || rec.State != StateDead || rec.Attempts != 10 {
			t.Fatalf("dead-lettered event %+v", rec)
		}
		// The dead-letter alert's count: in the minute it died, not after.
		deadAt := *rec.DeadLetteredAt
		for _, c := range []struct {
			from time.Time
			want int64
		}{{deadAt.Add(-time.Minute), 1}, {deadAt, 1}, {deadAt.Add(time.Microsecond), 0}} {
			if n, err := e.b.Outbox().CountDeadLettered(context.Background(), c.from, time.Time{}); err != nil || n != c.want {
				t.Fatalf("dead-lettered since %v (it died at %v) = %d, %v; want %d", c.from, deadAt, n, err, c.want)
			}
		}
		e.clock.Advance(365 * 24 * time.Hour)
		if events := e.pending(t, ""); len(events) != 0 {
			t.Fatalf("a dead-lettered event is pending: %+v", events)
		}
		line := ""
		for _, l := range strings.Split(e.logs.String(), "\n") {
			if strings.Contains(l, "[bot-outbox][DEAD-LETTER]") {
				line = l
			}
		}
		if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, fmt.Sprintf("event_id=%d", id)) ||
			!strings.Contains(line, fmt.Sprintf("registered event %d ", id)) {
			t.Fatalf("no ERROR dead-letter line with the event id in:\n%s", e.logs.String())
		}
		var list EventsResponse
		e.call(t, "GET", "/admin/api/bot/events?state=dead", nil, 200, &list)
		if len(list.Events) != 1 || list.Events[0].ID != id || !list.Events[0].DeadLettered {
			t.Fatalf("dead list %+v", list)
		}
		// A retry ack for a dead-lettered event changes nothing.
		if res := e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}}); res != (contract.AckResult{}) {
			t.Fatalf("retrying a dead letter: %+v", res)
		}

		var redriven EventRecord
		e.call(t, "POST", fmt.Sprintf("/admin/api/bot/events/%d/redrive", id), nil, 200, &redriven)
		if redriven.Attempts != 0 || redriven.NextRetryAt != nil || redriven.DeadLettered || redriven.State != StatePending {
			t.Fatalf("redriven %+v", redriven)
		}
		if events := e.pending(t, ""); len(events) != 1 || events[0].ID != id || events[0].Attempts != 0 {
			t.Fatalf("redriven event not pending: %+v", events)
		}
		if n, err := e.b.Outbox().CountDeadLettered(context.Background(), deadAt.Add(-time.Minute), time.Time{}); err != nil || n != 0 {
			t.Fatalf("dead-lettered after the redrive = %d, %v; want 0", n, err)
		}
		e.ack(t, contract.AckRequest{ProcessedIDs: []contract.EventID{id}})
		body := e.call(t, "POST", fmt.Sprintf("/admin/api/bot/events/%d/redrive", id), nil, 409, nil)
		if errorCode(t, body) != "event_processed" {
			t.Fatalf("redrive of a processed event: %s", body)
		}
		e.call(t, "POST", "/admin/api/bot/events/999999/redrive", nil, 404, nil)
	})

	for _, typ := range contract.EventTypes {
		if typ == contract.EventRegistered {
			continue
		}
		t.Run(fmt.Sprintf("the tenth retry closes %s", typ), func(t *testing.T) {
			t.Parallel()
			e := newBackendEnv(t)
			id, err := e.b.Outbox().Emit(context.Background(), NewEvent{Type: typ, Target: Target{TelegramID: "55"}})
			if err != nil {
				t.Fatal(err)
			}
			for range contract.BOT_OUTBOX_MAX_ATTEMPTS - 1 {
				e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}})
				e.clock.Advance(24 * time.Hour)
			}
			closedAt := e.clock.Now()
			if res := e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}}); res != (contract.AckResult{Closed: 1}) {
				t.Fatalf("tenth ack %+v", res)
			}
			rec := e.event(t, id)
			if rec.ProcessedAt == nil || !rec.ProcessedAt.Equal(closedAt) || rec.DeadLettered || rec.Attempts != 10 || rec.State != StateProcessed {
				t.Fatalf("closed event %+v", rec)
			}
			if strings.Contains(e.logs.String(), "DEAD-LETTER") {
				t.Fatalf("closing %s logged a dead letter", typ)
			}
		})
	}
}

func TestAckIdempotent(t *testing.T) {
	t.Parallel()

	t.Run("acking processed twice keeps the first processed_at", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		ids := emitMany(t, e.b.Outbox(), 3, Target{MagnetUID: 1})
		first := e.clock.Now()
		if res := e.ack(t, contract.AckRequest{ProcessedIDs: ids[:2]}); res.Processed != 2 {
			t.Fatalf("ack %+v", res)
		}
		e.clock.Advance(time.Minute)
		if res := e.ack(t, contract.AckRequest{ProcessedIDs: ids[:2]}); res != (contract.AckResult{}) {
			t.Fatalf("second ack %+v", res)
		}
		for _, id := range ids[:2] {
			if rec := e.event(t, id); rec.ProcessedAt == nil || !rec.ProcessedAt.Equal(first) {
				t.Fatalf("event %d processed at %v, want %v", id, rec.ProcessedAt, first)
			}
		}
		if events := e.pending(t, ""); len(events) != 1 || events[0].ID != ids[2] {
			t.Fatalf("pending %+v", events)
		}
	})

	t.Run("a repeated retry ack counts one attempt", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		id := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 1})[0]
		e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}})
		if res := e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}}); res != (contract.AckResult{}) {
			t.Fatalf("repeated retry ack %+v", res)
		}
		if rec := e.event(t, id); rec.Attempts != 1 {
			t.Fatalf("attempts %d", rec.Attempts)
		}
	})

	t.Run("a retry ack for a processed event changes nothing", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		id := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 1})[0]
		e.ack(t, contract.AckRequest{ProcessedIDs: []contract.EventID{id}})
		e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}})
		if rec := e.event(t, id); rec.Attempts != 0 || rec.ProcessedAt == nil {
			t.Fatalf("event %+v", rec)
		}
	})

	t.Run("unknown ids are ignored", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		if res := e.ack(t, contract.AckRequest{ProcessedIDs: []contract.EventID{12345}, RetryIDs: []contract.EventID{67890}}); res != (contract.AckResult{}) {
			t.Fatalf("ack %+v", res)
		}
		e.ack(t, contract.AckRequest{})
	})

	t.Run("an id in both lists is refused and changes nothing", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		ids := emitMany(t, e.b.Outbox(), 2, Target{MagnetUID: 1})
		body := e.call(t, "POST", "/bot/events/ack", contract.AckRequest{ProcessedIDs: ids, RetryIDs: ids[1:]}, 400, nil)
		if errorCode(t, body) != "bad_request" {
			t.Fatalf("body %s", body)
		}
		for _, id := range ids {
			if rec := e.event(t, id); rec.ProcessedAt != nil || rec.Attempts != 0 {
				t.Fatalf("event changed: %+v", rec)
			}
		}
	})

	for _, body := range []string{
		`{"processedIds":[1],"retryIds":[],"errors":{"x":"y"}}`,
		`{"processedIds":"1"}`,
		`{"processedIds":[1],"other":true}`,
		`not json`,
		``,
	} {
		t.Run(fmt.Sprintf("a malformed ack %q is refused with 400", body), func(t *testing.T) {
			t.Parallel()
			e := newBackendEnv(t)
			e.call(t, "POST", "/bot/events/ack", body, http.StatusBadRequest, nil)
		})
	}
}

func TestEmitInBusinessTransaction(t *testing.T) {
	t.Parallel()

	t.Run("an emit inside a transaction that rolls back leaves no event", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		ctx := context.Background()
		u := e.createUser(t, "alice", "")
		boom := errors.New("business rule failed after the emit")
		err := e.b.Outbox().Tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `update users set addr = 'EQrolled' where uid = ?`, u.UID); err != nil {
				return err
			}
			if _, err := e.b.Outbox().EmitWalletConnectedTx(ctx, tx, Target{MagnetUID: u.UID}, contract.WalletConnectedPayload{Addr: "EQrolled"}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err %v", err)
		}
		if n := e.countEvents(t); n != 0 {
			t.Fatalf("%d events after the rollback", n)
		}
		got, _ := e.b.GetUser(ctx, u.UID)
		if got.Addr != nil {
			t.Fatalf("business change survived: %+v", got)
		}
	})

	t.Run("an emit inside a transaction that commits is pending with its business change", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		ctx := context.Background()
		u := e.createUser(t, "alice", "")
		var id contract.EventID
		err := e.b.Outbox().Tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `update users set addr = 'EQkept' where uid = ?`, u.UID); err != nil {
				return err
			}
			var err error
			id, err = e.b.Outbox().EmitWalletConnectedTx(ctx, tx, Target{MagnetUID: u.UID}, contract.WalletConnectedPayload{Addr: "EQkept"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if events := e.pending(t, ""); len(events) != 1 || events[0].ID != id {
			t.Fatalf("pending %+v", events)
		}
	})
}

func TestAdminEvents(t *testing.T) {
	t.Parallel()

	t.Run("raw emit validates the type and answers 201 with the id", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		var res EmitResponse
		e.call(t, "POST", "/admin/api/bot/events",
			`{"eventType":"reactivation","telegramId":"123","magnetUid":null,"payload":{"days":30}}`, 201, &res)
		rec := e.event(t, res.ID)
		if rec.EventType != contract.EventReactivation || rec.TelegramID == nil || *rec.TelegramID != "123" || rec.MagnetUID != nil ||
			string(rec.Payload) != `{"days":30}` {
			t.Fatalf("event %+v payload %s", rec, rec.Payload)
		}
		for _, body := range []string{
			`{"eventType":"unknown","magnetUid":1}`,
			`{"eventType":"","magnetUid":1}`,
			`{"eventType":"registered"}`,
			`{"eventType":"registered","telegramId":"-5"}`,
			`{"eventType":"registered","telegramId":"12x"}`,
			`{"eventType":"registered","magnetUid":1,"payload":[1,2]}`,
			`{"eventType":"registered","magnetUid":1,"payload":"text"}`,
		} {
			e.call(t, "POST", "/admin/api/bot/events", body, 400, nil)
		}
		if n := e.countEvents(t); n != 1 {
			t.Fatalf("%d events after refused emits", n)
		}
	})

	t.Run("lists events by state and shows the whole row", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		ids := emitMany(t, e.b.Outbox(), 3, Target{MagnetUID: 1})
		e.ack(t, contract.AckRequest{ProcessedIDs: ids[:1], RetryIDs: ids[1:2], Errors: map[string]string{fmt.Sprint(ids[1]): "boom"}})
		states := map[string][]contract.EventID{
			"":          {ids[2], ids[1], ids[0]},
			"pending":   {ids[2]},
			"retrying":  {ids[1]},
			"processed": {ids[0]},
			"dead":      {},
		}
		for state, want := range states {
			var list EventsResponse
			e.call(t, "GET", "/admin/api/bot/events?state="+state, nil, 200, &list)
			var got []contract.EventID
			for _, r := range list.Events {
				got = append(got, r.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("state %q: %v, want %v", state, got, want)
			}
		}
		var page EventsResponse
		e.call(t, "GET", fmt.Sprintf("/admin/api/bot/events?limit=1&beforeId=%d", ids[2]), nil, 200, &page)
		if len(page.Events) != 1 || page.Events[0].ID != ids[1] {
			t.Fatalf("page %+v", page)
		}
		e.call(t, "GET", "/admin/api/bot/events?state=weird", nil, 400, nil)

		var raw map[string]any
		e.call(t, "GET", fmt.Sprintf("/admin/api/bot/events/%d", ids[1]), nil, 200, &raw)
		for _, k := range []string{"id", "eventType", "telegramId", "magnetUid", "payload", "createdAt", "processedAt", "attempts",
			"claimedAt", "lockedUntil", "lastError", "lastAttemptAt", "nextRetryAt", "deadLettered", "deadLetteredAt", "state"} {
			if _, ok := raw[k]; !ok {
				t.Fatalf("event detail lacks %q: %v", k, raw)
			}
		}
		if raw["lastError"] != "boom" || raw["attempts"] != float64(1) || raw["state"] != "retrying" || raw["deadLettered"] != false {
			t.Fatalf("event detail %v", raw)
		}
		e.call(t, "GET", "/admin/api/bot/events/999999", nil, 404, nil)
		e.call(t, "GET", "/admin/api/bot/events/x", nil, 400, nil)
	})
}

func TestMigrationRunsTwice(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t)
	emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 1})
	up := migrationUp(t)
	if _, err := e.db.Write.Exec(up); err != nil {
		t.Fatalf("running the migration again: %v", err)
	}
	if n := e.countEvents(t); n != 1 {
		t.Fatalf("%d events after re-running the migration", n)
	}
	indexes := `select count(*) from sqlite_master where type = 'index' and name = ?`
	if e.db.Postgres() {
		indexes = `select count(*) from pg_indexes where schemaname = current_schema() and indexname = ?`
	}
	for _, name := range []string{"idx_bot_event_outbox_processed_id", "idx_bot_event_outbox_pending"} {
		var idx int
		if err := e.db.Read.QueryRow(indexes, name).Scan(&idx); err != nil || idx != 1 {
			t.Fatalf("index %s: %d, %v", name, idx, err)
		}
	}
}

// migrationUp is the Up half of the outbox migration of the test run's
// backend, as goose runs it.
func migrationUp(t testing.TB) string {
	t.Helper()
	fsys, name := fs.FS(migrations.FS), "00004_bot_outbox.sql"
	if storetest.Postgres() {
		fsys, name = migrations.PostgresFS, "postgres/"+name
	}
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	up, _, ok := strings.Cut(string(b), "-- +goose Down")
	if !ok {
		t.Fatal("no Down section")
	}
	return up
}

func TestPendingQueryPlan(t *testing.T) {
	t.Parallel()
	t.Run("the pending query walks an index in its order instead of sorting the backlog", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		if e.db.Postgres() {
			pendingPlanPostgres(t, e)
			return
		}
		rows, err := e.db.Read.Query(`explain query plan `+pendingSQL, store.TS(e.clock.Now()), store.TS(e.clock.Now()), 100)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		joined := strings.Join(plan, "; ")
		if !strings.Contains(joined, "idx_bot_event_outbox_pending") || strings.Contains(joined, "TEMP B-TREE") {
			t.Fatalf("plan: %s", joined)
		}
	})
}

// pendingPlanPostgres checks the pending query's plan on PostgreSQL: over a
// backlog like production's (20,000 events of 500 users, the last 2,000
// unprocessed, the table analyzed) the planner walks
// idx_bot_event_outbox_pending for the outer rows and never sorts.
func pendingPlanPostgres(t *testing.T, e *backendEnv) {
	t.Helper()
	created := store.TS(e.clock.Now().Add(-time.Hour))
	if _, err := e.db.Write.Exec(`
		insert into bot_event_outbox (event_type, magnet_uid, created_at, attempts, user_key, processed_at)
		select 'registered', g % 500, ?, 0, 'uid:' || lpad(cast(g % 500 as text), 20, '0'),
		       case when g <= 18000 then ? end
		from generate_series(1, 20000) as g`, created, created); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Write.Exec(`analyze bot_event_outbox`); err != nil {
		t.Fatal(err)
	}
	now := store.TS(e.clock.Now())
	var doc string
	if err := e.db.Read.QueryRow(`explain (format json) `+pendingSQL, now, now, 100).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	var plan []struct{ Plan planNode }
	if err := json.Unmarshal([]byte(doc), &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", doc, err)
	}
	var outerByIndex bool
	var sorts []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.IndexName == "idx_bot_event_outbox_pending" && n.Alias == "o" {
			outerByIndex = true
		}
		if strings.Contains(n.NodeType, "Sort") {
			sorts = append(sorts, n.NodeType)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plan[0].Plan)
	if !outerByIndex || len(sorts) > 0 {
		t.Fatalf("the pending query: outer rows from idx_bot_event_outbox_pending %v, sorts %v; plan %s", outerByIndex, sorts, doc)
	}
}

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	IndexName string     `json:"Index Name"`
	Alias     string     `json:"Alias"`
	Plans     []planNode `json:"Plans"`
}
