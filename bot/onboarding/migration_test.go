package onboarding

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/store"
	"switchyard/store/storetest"
)

// Migration 00011 carries the records of bot_outgoing, the bot's own
// outgoing calls before onboarding.dm, into the queue: a database a binary
// of version 10 left with a record in each status migrates up, and the bot
// then delivers the unsent calls exactly once, in each chat's order.
func TestMigrationCarriesOutgoingIntoTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newOnbEnv(t)
	db, err := store.Open(ctx, store.Options{Path: storetest.Source(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.MigrateTo(ctx, 10); err != nil {
		t.Fatal(err)
	}
	past, now := store.TS(db.Now().Add(-10*time.Minute)), store.TS(db.Now())
	records := []struct {
		key, chat, status, text, lastErr string
		attempts                         int
	}{
		{"event:1:prompt", "9001", "pending", "first to 9001", "", 0},
		{"event:2:prompt", "9001", "pending", "second to 9001", "", 0},
		{"event:3:prompt", "9002", "sending", "was in hand for 9002", "", 2},
		{"event:4:prompt", "9003", "failed", "failed for 9003", "telegram 400: Bad Request: chat not found", 7},
		{"event:5:prompt", "9004", "sent", "sent to 9004", "", 1},
		{"event:6:prompt", "9005", "notified", "telegram text for 9005", "", 3},
	}
	// A DM only its fallback could deliver (the user has no Telegram): no
	// chat, ordered with the account's notifications.
	webOnly := e.createUser("web-only", "Вера", "")
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`insert into bot_outgoing (dedup_key, method, chat_id, order_key, params, fallback, status, phase,
			attempts, next_attempt_at, created_at, updated_at)
			values ('event:7:new_partner', 'sendMessage', '', ?, ?, ?, 'pending', 'fallback', 0, ?, ?, ?)`,
			fmt.Sprintf("uid:%d", webOnly.UID), textParams("unused"), fmt.Sprintf(`{"uid":%d,"kind":"new_partner","text":"web only for Вера"}`, webOnly.UID),
			past, past, past); err != nil {
			return err
		}
		for _, r := range records {
			var fallback, done, lastErr any
			if r.status == "notified" {
				fallback = `{"uid":5,"kind":"prompt","text":"web text for 9005"}`
			}
			if r.status == "sent" || r.status == "notified" {
				done = now
			}
			if r.lastErr != "" {
				lastErr = r.lastErr
			}
			if _, err := tx.Exec(`insert into bot_outgoing (dedup_key, method, chat_id, order_key, params, fallback, status, phase,
				attempts, next_attempt_at, last_error, created_at, updated_at, done_at)
				values (?, 'sendMessage', ?, ?, ?, ?, ?, 'telegram', ?, ?, ?, ?, ?, ?)`,
				r.key, r.chat, "chat:"+r.chat, textParams(r.text), fallback, r.status, r.attempts, past, lastErr, past, past, done); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.Read.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	tables := `select count(*) from sqlite_master where name = 'bot_outgoing'`
	if db.Postgres() {
		tables = `select count(*) from pg_tables where schemaname = current_schema() and tablename = 'bot_outgoing'`
	}
	if n := count(tables); n != 0 {
		t.Fatal("bot_outgoing is still there")
	}
	b := e.newBot(db)
	st := dmQueueOn(t, db)
	if live := st.Ready + st.InFlight + st.Delayed + st.Held; live != 4 || st.Dead != 1 {
		t.Fatalf("onboarding.dm after the migration: %+v; want 4 live messages and 1 dead letter", st)
	}
	dead, err := b.ListDMs(ctx, DMFilter{Status: DMFailed})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].Key != "event:4:prompt" || dead[0].Attempts != 7 || !strings.Contains(dead[0].LastError, "chat not found") {
		t.Fatalf("dead letters %+v", dead)
	}
	for key, want := range map[string]string{"event:5:prompt": "sent sent to 9004", "event:6:prompt": "notified web text for 9005"} {
		var outcome, text string
		if err := db.Read.QueryRowContext(ctx, `select outcome, text from bot_deliveries where dm_key = ?`, key).Scan(&outcome, &text); err != nil {
			t.Fatalf("delivery %s: %v", key, err)
		}
		if outcome+" "+text != want {
			t.Fatalf("delivery %s: %s %s, want %s", key, outcome, text, want)
		}
	}

	// The users have chats with the bot; the bot delivers what was unsent.
	for _, id := range []int64{9001, 9002, 9003, 9004} {
		if _, err := e.tgBot().Send(telego.User{ID: id, FirstName: "U"}, "привет"); err != nil {
			t.Fatal(err)
		}
	}
	e.run(b)
	e.waitMessage(9001, "second to 9001")
	e.waitMessage(9002, "was in hand for 9002")
	e.waitDB("the carried-over DMs delivered", func() bool {
		return count(`select count(*) from bot_deliveries where dm_key in ('event:1:prompt', 'event:2:prompt', 'event:3:prompt')`) == 3
	})
	e.waitDB("the carried-over fallback notified", func() bool {
		return count(`select count(*) from bot_deliveries where dm_key = 'event:7:new_partner' and outcome = 'notified'`) == 1
	})
	if notes, err := e.be.ListNotifications(ctx, webOnly.UID); err != nil || len(notes) != 1 || notes[0].Text != "web only for Вера" {
		t.Fatalf("the web-only user's notifications %+v, %v; want the carried-over one", notes, err)
	}
	for _, c := range []struct {
		chat int64
		text string
		want int
	}{{9001, "first to 9001", 1}, {9001, "second to 9001", 1}, {9002, "was in hand for 9002", 1},
		{9003, "failed for 9003", 0}, {9004, "sent to 9004", 0}} {
		if n := e.countBotMessages(c.chat, c.text); n != c.want {
			t.Errorf("chat %d got %q %d times, want %d", c.chat, c.text, n, c.want)
		}
	}
	var order []string
	for _, m := range e.messages(9001) {
		if strings.Contains(m.Text, "to 9001") {
			order = append(order, m.Text)
		}
	}
	if strings.Join(order, ", ") != "first to 9001, second to 9001" {
		t.Fatalf("chat 9001 got %v: the chat's order is lost", order)
	}
	if st := dmQueueOn(t, db); st.Dead != 1 {
		t.Fatalf("onboarding.dm dead letters %d, want the one carried over", st.Dead)
	}
}

// textParams is a bot_outgoing params value of version 10: the call's text.
func textParams(text string) string {
	b, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		panic(err)
	}
	return string(b)
}
