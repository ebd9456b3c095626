package bot

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram"
)

// TestSenderKeepsTheBotsPace checks that a sender round claims a message for
// every free worker and that the calls then keep Telegram's limits by
// themselves: a round is a read and a write, slow on a loaded machine, and
// when the limits were taken at the round's one instant a bot whose burst is
// one sent a single message per round (a few a second under load, where the
// limit is 30): its users waited seconds for every answer.
func TestSenderKeepsTheBotsPace(t *testing.T) {
	t.Parallel()
	e := newOnbEnv(t)
	b := e.newBot(e.db, func(o *OnboardingOpts) { o.Limits = telegram.Limits{} }) // Telegram's: 30 a second, 1 a chat
	ctx := context.Background()
	const chats = senderWorkers
	var ids []TelegramID
	for i := range chats {
		id := int64(9100 + i)
		if _, err := e.tgBot().Start(telego.User{ID: id, FirstName: "U" + strconv.Itoa(i)}, ""); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, TelegramID(strconv.FormatInt(id, 10)))
	}
	err := e.db.Tx(ctx, func(tx *sql.Tx) error {
		for i, id := range ids {
			if _, err := insertOutgoing(ctx, tx, e.db.Now(), "pace-test", []outgoingMessage{{
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
	var wg sync.WaitGroup
	sem := make(chan struct{}, senderWorkers)
	b.dispatch(ctx, &wg, sem)
	if n := e.count(`select count(*) from bot_outgoing where status <> 'pending'`); n != chats {
		t.Errorf("one round claimed %d of %d due messages to %d chats, with %d workers free", n, chats, chats, senderWorkers)
	}
	wg.Wait()

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
	if n := e.count(`select count(*) from bot_outgoing where status = 'sent' and attempts = 0`); n != chats {
		t.Errorf("%d of %d messages sent with no attempt counted against them", n, chats)
	}
}
