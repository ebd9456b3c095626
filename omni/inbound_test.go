package omni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

const testSecret = "webhook-secret_1"

func newInboundServer(t *testing.T) (*store.DB, string) {
	t.Helper()
	db := storetest.New(t)
	in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret, MaxUpdateBytes: 512 << 10})
	return db, serve(t, in.Routes)
}

// postUpdate posts body to the webhook with secret and returns the status
// and the body of the answer.
func postUpdate(t testing.TB, base, secret string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+WebhookPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set(WebhookSecretHeader, secret)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw)
}

// queuedBodies lists the live messages of a queue, held ones included,
// through queue/'s operator API.
func queuedBodies(t testing.TB, db *store.DB, name string) [][]byte {
	t.Helper()
	msgs, err := queue.NewAdmin(queue.AdminOpts{DB: db}).ListMessages(context.Background(), queue.MessageFilter{Queue: name, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Body
	}
	return out
}

func flowBodies(t testing.TB, db *store.DB) [][]byte {
	t.Helper()
	return queuedBodies(t, db, QueueReceiverFlow)
}

func TestInboundWebhook(t *testing.T) {
	t.Parallel()

	t.Run("a wrong or missing secret is 401 and enqueues nothing", func(t *testing.T) {
		t.Parallel()
		db, base := newInboundServer(t)
		body := update(1, "message", privateMessage(42, 1, "hi", t0))
		for _, secret := range []string{"", "wrong", testSecret + "x", strings.ToUpper(testSecret)} {
			status, answer := postUpdate(t, base, secret, body)
			if status != http.StatusUnauthorized || !strings.Contains(answer, `"code":"unauthorized"`) {
				t.Errorf("secret %q: %d %s, want 401 with the error body", secret, status, answer)
			}
		}
		if n := len(flowBodies(t, db)); n != 0 {
			t.Errorf("%d jobs enqueued, want none", n)
		}
	})

	t.Run("an update not declared application/json is 415 and enqueues nothing", func(t *testing.T) {
		t.Parallel()
		db, base := newInboundServer(t)
		body := update(1, "message", privateMessage(42, 1, "hi", t0))
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "application/problem+json"} {
			req, err := http.NewRequest(http.MethodPost, base+WebhookPath, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set(WebhookSecretHeader, testSecret)
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(raw), `"code":"unsupported_media_type"`) {
				t.Errorf("Content-Type %q: %d %s, want 415", ct, res.StatusCode, raw)
			}
		}
		if n := len(flowBodies(t, db)); n != 0 {
			t.Errorf("%d jobs enqueued, want none", n)
		}
		if status, answer := postUpdate(t, base, testSecret, body); status != http.StatusOK {
			t.Fatalf("the same update as application/json: %d %s", status, answer)
		}
	})

	t.Run("a body that is not an update is 400 and enqueues nothing", func(t *testing.T) {
		t.Parallel()
		db, base := newInboundServer(t)
		for _, body := range []string{`{"update_id":`, `not json`, `[1,2]`, `{"message":{"text":"no update id"}}`, ``} {
			status, answer := postUpdate(t, base, testSecret, []byte(body))
			if status != http.StatusBadRequest || !strings.Contains(answer, `"code":"bad_request"`) {
				t.Errorf("body %q: %d %s, want 400", body, status, answer)
			}
		}
		if n := len(flowBodies(t, db)); n != 0 {
			t.Errorf("%d jobs enqueued, want none", n)
		}
	})

	t.Run("a body over the cap is 413", func(t *testing.T) {
		t.Parallel()
		_, base := newInboundServer(t)
		big := update(1, "message", privateMessage(42, 1, strings.Repeat("x", 600<<10), t0))
		if status, answer := postUpdate(t, base, testSecret, big); status != http.StatusRequestEntityTooLarge {
			t.Errorf("%d %s, want 413", status, answer)
		}
	})

	t.Run("a duplicate delivery of an update is 200 and one job, even when concurrent", func(t *testing.T) {
		t.Parallel()
		db, base := newInboundServer(t)
		body := update(77, "business_message", businessMessage("bc-1", 55, 55, 10, "hello", t0))
		var wg sync.WaitGroup
		statuses := make([]int, 16)
		for i := range statuses {
			wg.Go(func() { statuses[i], _ = postUpdate(t, base, testSecret, body) })
		}
		wg.Wait()
		for i, s := range statuses {
			if s != http.StatusOK {
				t.Errorf("request %d: status %d, want 200", i, s)
			}
		}
		if status, _ := postUpdate(t, base, testSecret, body); status != http.StatusOK {
			t.Errorf("a later duplicate: %d, want 200", status)
		}
		if bodies := flowBodies(t, db); len(bodies) != 1 {
			t.Fatalf("%d jobs on %s, want 1", len(bodies), QueueReceiverFlow)
		}
	})

	t.Run("every update type is enqueued as an envelope that matches the schema, unknown ones too", func(t *testing.T) {
		t.Parallel()
		db, base := newInboundServer(t)
		updates := [][]byte{
			update(1, "message", privateMessage(42, 1, "hi", t0)),
			update(2, "edited_message", func() map[string]any { m := privateMessage(42, 1, "hi!", t0); m["edit_date"] = t0 + 1; return m }()),
			update(3, "business_connection", businessConnection("bc-1", 900, true, true, t0)),
			update(4, "business_message", businessMessage("bc-1", 55, 55, 10, "hello", t0)),
			update(5, "edited_business_message", func() map[string]any {
				m := businessMessage("bc-1", 55, 55, 10, "hello!", t0)
				m["edit_date"] = t0 + 2
				return m
			}()),
			update(6, "deleted_business_messages", map[string]any{"business_connection_id": "bc-1", "chat": map[string]any{"id": 55, "type": "private"}, "message_ids": []int{10}}),
			update(7, "my_chat_member", map[string]any{"chat": map[string]any{"id": 42, "type": "private"}, "from": map[string]any{"id": 42, "is_bot": false, "first_name": "A"}, "date": t0, "old_chat_member": map[string]any{"status": "member"}, "new_chat_member": map[string]any{"status": "kicked"}}),
			update(8, "callback_query", map[string]any{"id": "q", "from": map[string]any{"id": 42, "is_bot": false, "first_name": "A"}, "chat_instance": "c", "data": "d"}),
			update(9, "message_reaction", map[string]any{"chat": map[string]any{"id": 42, "type": "private"}, "message_id": 1, "date": t0}),
		}
		for _, u := range updates {
			if status, answer := postUpdate(t, base, testSecret, u); status != http.StatusOK {
				t.Fatalf("%s: %d %s", u, status, answer)
			}
		}
		bodies := flowBodies(t, db)
		if len(bodies) != len(updates) {
			t.Fatalf("%d jobs, want %d", len(bodies), len(updates))
		}
		seen := map[EventType]int{}
		for _, b := range bodies {
			requireValidEnvelopeJSON(t, b)
			var env Envelope
			if err := json.Unmarshal(b, &env); err != nil {
				t.Fatal(err)
			}
			seen[env.EventType]++
		}
		want := map[EventType]int{EventMessageCreated: 2, EventMessageEdited: 2, EventConnectionUpdated: 1, EventMessageDeleted: 1,
			EventMembershipUpdated: 1, EventCallbackReceived: 1, EventUnknown: 1}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Errorf("event types = %v, want %v", seen, want)
		}
	})

	t.Run("a failure inside the enqueue is 503 and leaves nothing half-written", func(t *testing.T) {
		t.Parallel()
		db, base := newInboundServer(t)
		// The goqite insert fails after the idempotency key was written in
		// the same transaction.
		undo := failInsertsWhen(t, db, "goqite", "", "injected storage failure", "")
		body := update(5, "message", privateMessage(42, 1, "hi", t0))
		if status, answer := postUpdate(t, base, testSecret, body); status != http.StatusServiceUnavailable || !strings.Contains(answer, `"code":"unavailable"`) {
			t.Fatalf("%d %s, want 503", status, answer)
		}
		if jobs := len(flowBodies(t, db)); jobs != 0 {
			t.Fatalf("after the failure: %d jobs; want none", jobs)
		}
		undo()
		if status, _ := postUpdate(t, base, testSecret, body); status != http.StatusOK {
			t.Fatalf("Telegram's redelivery: %d, want 200", status)
		}
		if jobs := len(flowBodies(t, db)); jobs != 1 {
			t.Errorf("%d jobs after the redelivery, want 1", jobs)
		}
	})

	t.Run("a full database is 503, and the redelivery after space is freed is accepted", func(t *testing.T) {
		t.Parallel()
		db, base := newInboundServer(t)
		// SQLite: no free page is left in the file. PostgreSQL: the
		// server's disk cannot be filled from a test, so the insert fails
		// as it would on a full disk, with disk_full (53100).
		var makeRoom func()
		if db.Postgres() {
			makeRoom = failInsertsWhen(t, db, "goqite", "", "could not extend file: No space left on device", "53100")
		} else {
			makeRoom = storetest.FillUp(t, db, false)
		}
		body := update(6, "message", privateMessage(42, 1, strings.Repeat("long text ", 20_000), t0))
		if status, answer := postUpdate(t, base, testSecret, body); status != http.StatusServiceUnavailable {
			t.Fatalf("%d %s, want 503", status, answer)
		}
		if jobs := len(flowBodies(t, db)); jobs != 0 {
			t.Fatalf("after the failure: %d jobs; want none", jobs)
		}
		makeRoom()
		if status, _ := postUpdate(t, base, testSecret, body); status != http.StatusOK {
			t.Fatalf("redelivery: %d, want 200", status)
		}
		if jobs := len(flowBodies(t, db)); jobs != 1 {
			t.Errorf("%d jobs after the redelivery, want 1", jobs)
		}
	})
}
