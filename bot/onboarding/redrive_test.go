package onboarding

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/testwait"
)

// An operator's "Send again" of a failed DM is a real call to Telegram, as
// the bot's own redrive was before DMs were queue messages: it clears the
// user's unreachable mark first. The queue's generic redrive (the Queues
// page) leaves the mark, so the DM goes straight back to the dead letters.
func TestRedriveDM(t *testing.T) {
	t.Parallel()
	e := newOnbEnv(t)
	ob := e.newBot(e.db)
	admin := e.router.PathPrefix("/admin/api").Subrouter()
	ob.AdminRoutes(admin)
	e.run(ob)
	ctx := context.Background()
	u := e.createUser("dora", "Дора", "6004")
	if _, err := e.be.ConnectWallet(ctx, u.UID, "EQdora"); err != nil {
		t.Fatal(err)
	}
	calls := func() int {
		n := 0
		for _, c := range e.fake.CallsTo("sendMessage") {
			if c.Params["chat_id"] == "6004" {
				n++
			}
		}
		return n
	}
	deadID := func() string {
		var list DMsResponse
		e.adminGet(t, "/admin/api/bot/dms?chatId=6004&status=failed", &list)
		if len(list.DMs) != 1 {
			return ""
		}
		return list.DMs[0].MessageID
	}
	dead := func(id string) bool { return deadID() == id }
	testwait.Until(t, 10*time.Second, "the DM to a user who never started the bot failed", func() bool { return deadID() != "" })
	id, tried := deadID(), calls()
	if tried != 1 || !ob.markedUnreachable(t, "6004") {
		t.Fatalf("%d calls to her and marked %v before any redrive, want 1 call and the mark", tried, ob.markedUnreachable(t, "6004"))
	}

	t.Run("the Queues page's redrive leaves the mark: no call, dead again", func(t *testing.T) {
		if _, err := ob.queues.Redrive(ctx, queue.DeadFilter{Queue: DMQueue, ID: id}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "the DM dead again", func() bool { return dead(id) })
		if n := calls(); n != tried {
			t.Fatalf("%d calls to her, want still %d: a marked user is not called", n, tried)
		}
	})

	t.Run("Send again clears the mark and calls Telegram", func(t *testing.T) {
		resp, err := http.Post(fmt.Sprintf("%s/admin/api/bot/dms/%s/redrive", e.srv.URL, id), "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("redrive: %d, want 200", resp.StatusCode)
		}
		testwait.Until(t, 10*time.Second, "a second call to her", func() bool { return calls() == tried+1 })
		// Telegram still cannot reach her: the call fails, marks her, and
		// the DM is a dead letter again.
		testwait.Until(t, 10*time.Second, "the DM dead again", func() bool { return dead(id) })
	})

	t.Run("a DM that is no dead letter is 404", func(t *testing.T) {
		for _, missing := range []string{"o_nothing", "m_" + id} {
			resp, err := http.Post(fmt.Sprintf("%s/admin/api/bot/dms/%s/redrive", e.srv.URL, missing), "application/json", nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Fatalf("redrive of %s: %d, want 404", missing, resp.StatusCode)
			}
		}
	})
}

// markedUnreachable reports whether tg is in bot_unreachable.
func (o *Bot) markedUnreachable(t *testing.T, tg string) bool {
	t.Helper()
	var n int
	if err := o.db.Read.QueryRow(`select count(*) from bot_unreachable where telegram_id = ?`, tg).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}
