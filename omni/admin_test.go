package omni

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"switchyard/store/storetest"
)

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	admin := NewAdmin(AdminOpts{DB: db, AutoAckText: "default text"})
	p := &platform{db: db, admin: admin, base: serve(t, adminRoutes(admin))}

	// Two threads, through the chat transaction with its real sender.flow.
	domain := newChatDomain(db, AutoAckRule{})
	var threads []ThreadID
	for i, body := range [][]byte{
		update(1, "message", privateMessage(42, 1, "older", t0)),
		update(2, "message", privateMessage(43, 1, "newer", t0+60)),
	} {
		env := envelopeOf(t, body, db.Now())
		var res applied
		err := db.Tx(context.Background(), func(tx *sql.Tx) error {
			var err error
			res, err = domain.applyTx(context.Background(), tx, env) // assigned, not appended: Tx may run it again
			return err
		})
		if err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
		threads = append(threads, res.Thread)
	}

	t.Run("threads list the latest activity first in the documented shape", func(t *testing.T) {
		var raw map[string][]map[string]any
		if status := p.api(t, http.MethodGet, "/omni/threads", nil, &raw); status != http.StatusOK {
			t.Fatalf("status %d", status)
		}
		list := raw["threads"]
		if len(list) != 2 {
			t.Fatalf("threads = %v", list)
		}
		for _, field := range []string{"id", "channel", "businessConnectionId", "contact", "state", "unread", "lastMessageAt"} {
			if _, ok := list[0][field]; !ok {
				t.Errorf("thread lacks %q: %v", field, list[0])
			}
		}
		contact := list[0]["contact"].(map[string]any)
		for _, field := range []string{"id", "provider", "providerUserId", "name", "reachable"} {
			if _, ok := contact[field]; !ok {
				t.Errorf("contact lacks %q: %v", field, contact)
			}
		}
		if contact["providerUserId"] != "43" {
			t.Errorf("first thread is %v, want the newer one (43)", contact["providerUserId"])
		}
	})

	t.Run("threads can be filtered by state, and a bad filter is 400", func(t *testing.T) {
		if err := admin.CloseThread(context.Background(), threads[0]); err != nil {
			t.Fatal(err)
		}
		var list struct {
			Threads []Thread `json:"threads"`
		}
		p.api(t, http.MethodGet, "/omni/threads?state=closed", nil, &list)
		if len(list.Threads) != 1 || list.Threads[0].ID != threads[0] || list.Threads[0].State != ThreadClosed {
			t.Errorf("closed threads = %+v", list.Threads)
		}
		if status := p.api(t, http.MethodGet, "/omni/threads?state=lost", nil, nil); status != http.StatusBadRequest {
			t.Errorf("state=lost: %d, want 400", status)
		}
	})

	t.Run("a reply is 202 queued, appears in thread order and on sender.flow", func(t *testing.T) {
		id := p.reply(t, threads[1], "hello back")
		var raw map[string][]map[string]any
		p.api(t, http.MethodGet, fmt.Sprintf("/omni/threads/%d/messages", threads[1]), nil, &raw)
		msgs := raw["messages"]
		if len(msgs) != 2 || msgs[1]["text"] != "hello back" || msgs[1]["status"] != "queued" || msgs[1]["providerMessageId"] != nil {
			t.Fatalf("messages = %v", msgs)
		}
		for _, field := range []string{"id", "direction", "text", "status", "providerMessageId", "createdAt"} {
			if _, ok := msgs[0][field]; !ok {
				t.Errorf("message lacks %q: %v", field, msgs[0])
			}
		}
		bodies := queuedBodies(t, db, QueueSenderFlow)
		if len(bodies) != 1 {
			t.Fatalf("sender.flow holds %d commands, want 1", len(bodies))
		}
		var cmd SendCommand
		if err := json.Unmarshal(bodies[0], &cmd); err != nil || cmd.MessageID != id || cmd.ChatID != "43" || cmd.Text != "hello back" {
			t.Errorf("command = %+v (%v)", cmd, err)
		}
		if m := p.message(t, id); m.Direction != DirectionOutbound || m.Origin != OriginOperator || m.Status != StatusQueued {
			t.Errorf("message = %+v", m)
		}
	})

	t.Run("bad replies are 400 and queue nothing", func(t *testing.T) {
		before := len(queuedBodies(t, db, QueueSenderFlow))
		for _, body := range []any{
			map[string]string{"text": "   "},
			map[string]string{"text": strings.Repeat("я", MaxReplyRunes+1)},
			map[string]any{"text": "hi", "extra": 1},
			"not an object",
		} {
			if status := p.api(t, http.MethodPost, fmt.Sprintf("/omni/threads/%d/messages", threads[1]), body, nil); status != http.StatusBadRequest {
				t.Errorf("reply %v: %d, want 400", body, status)
			}
		}
		if after := len(queuedBodies(t, db, QueueSenderFlow)); after != before {
			t.Errorf("sender.flow went from %d to %d commands", before, after)
		}
	})

	t.Run("unknown threads and messages are 404", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{http.MethodGet, "/omni/threads/999/messages"},
			{http.MethodPost, "/omni/threads/999/messages"},
			{http.MethodPost, "/omni/threads/999/close"},
			{http.MethodGet, "/omni/messages/999"},
		} {
			var body any
			if c.method == http.MethodPost {
				body = map[string]string{"text": "hi"}
			}
			var answer map[string]map[string]string
			if status := p.api(t, c.method, c.path, body, &answer); status != http.StatusNotFound || answer["error"]["code"] != "not_found" {
				t.Errorf("%s %s: %d %v, want 404 not_found", c.method, c.path, status, answer)
			}
		}
	})

	t.Run("the acknowledgement rule shows its default until an operator changes it", func(t *testing.T) {
		var rule AutoAckRule
		p.api(t, http.MethodGet, "/omni/rules/auto-ack", nil, &rule)
		if !rule.Enabled || rule.Text != "default text" {
			t.Errorf("rule = %+v, want the default", rule)
		}
		if status := p.api(t, http.MethodPut, "/omni/rules/auto-ack", AutoAckRule{Enabled: true}, nil); status != http.StatusBadRequest {
			t.Errorf("an enabled rule without text: %d, want 400", status)
		}
		if status := p.api(t, http.MethodPut, "/omni/rules/auto-ack", AutoAckRule{Enabled: false, Text: "off"}, nil); status != http.StatusOK {
			t.Fatalf("put: %d", status)
		}
		p.api(t, http.MethodGet, "/omni/rules/auto-ack", nil, &rule)
		if rule.Enabled || rule.Text != "off" {
			t.Errorf("rule = %+v after the change", rule)
		}
	})

	t.Run("marking a thread read clears its unread count", func(t *testing.T) {
		if status := p.api(t, http.MethodPost, fmt.Sprintf("/omni/threads/%d/read", threads[0]), nil, nil); status != http.StatusNoContent {
			t.Fatalf("read: %d", status)
		}
		list, err := admin.ListThreads(context.Background(), ThreadFilter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, th := range list {
			if th.ID == threads[0] && th.Unread != 0 {
				t.Errorf("unread = %d", th.Unread)
			}
		}
	})
}
