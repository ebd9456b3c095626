package onboarding

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/bot/contract"
	"switchyard/telegram"
)

// TestSenderKeepsTheBotsPace checks that the sender takes a message for
// every free worker and that the calls then keep Telegram's limits by
// themselves: when the limits were taken at one instant per round of the
// sender, a bot whose burst is one sent a single message per round (a few a
// second under load, where the limit is 30) and its users waited seconds for
// every answer. Here the messages, to as many chats as there are workers,
// all go at the bot's pace, and none is put back in the queue to wait for
// the limits (no attempt counted against it).
func TestSenderKeepsTheBotsPace(t *testing.T) {
	t.Parallel()
	e := newOnbEnv(t)
	// Telegram's limits: 30 a second, 1 a chat; webhook mode without a
	// webhook keeps the users' /start updates with the fake.
	b := e.newBot(e.db, func(o *Opts) {
		o.Limits, o.Updates, o.WebhookSecret = telegram.Limits{}, UpdatesWebhook, testWebhookSecret
	})
	ctx := context.Background()
	const chats = senderWorkers
	var ids []contract.TelegramID
	for i := range chats {
		id := int64(9100 + i)
		if _, err := e.tgBot().Start(telego.User{ID: id, FirstName: "U" + strconv.Itoa(i)}, ""); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, contract.TelegramID(strconv.FormatInt(id, 10)))
	}
	err := e.db.Tx(ctx, func(tx *sql.Tx) error {
		for i, id := range ids {
			if _, err := b.recordDMs(ctx, tx, "pace-test", []outgoingMessage{{
				Key: strconv.Itoa(i), Method: methodSendMessage, ChatID: id, Params: outParams{Text: "hello " + string(id)},
			}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	e.run(b)
	e.waitDB("every message sent", func() bool {
		return e.count(`select count(*) from bot_deliveries where dm_key like 'pace-test:%'`) == chats
	})

	calls := e.fake.CallsTo("sendMessage")
	if len(calls) != chats {
		t.Fatalf("%d sendMessage calls, want %d", len(calls), chats)
	}
	at := make([]time.Time, 0, len(calls))
	for _, c := range calls {
		if !c.OK {
			t.Errorf("a call failed: %d %s", c.ErrorCode, c.Description)
		}
		at = append(at, c.At)
	}
	slices.SortFunc(at, time.Time.Compare)
	// The k-th call can come no sooner than the k-th slot of the bot's limit:
	// a call may be late on a busy machine, never early.
	interval := time.Second / 30
	for k, a := range at {
		if earliest := start.Add(time.Duration(k) * interval); a.Before(earliest.Add(-2 * time.Millisecond)) {
			t.Errorf("call %d answered %s after the round began, before its slot at %s", k, a.Sub(start), time.Duration(k)*interval)
		}
	}
	if n := e.count(`select count(*) from bot_deliveries where dm_key like 'pace-test:%' and outcome = 'sent' and attempts = 0`); n != chats {
		t.Errorf("%d of %d messages sent with no attempt counted against them", n, chats)
	}
}
