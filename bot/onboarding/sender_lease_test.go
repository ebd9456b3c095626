package onboarding

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/bot/contract"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

// TestSenderAsTwoProcesses runs the onboarding bot twice on two handles of
// one database file, as two processes would, against one fake Bot API that
// enforces Telegram's limits (30 a second per bot, 1 a second per chat). 180 DMs over 60 chats, three to each
// in a row, would break the chats' limit if both senders sent, each
// unaware of the other's last call; the bot's sender lease keeps them to
// one at a time. A third of the way the holder stops, and the other sends
// the rest.
//
// The fake forgives 250 ms of timing jitter: on a loaded two-core machine
// under -race its own goroutines stall now and then and serve a few paced
// sends within a millisecond of each other, which says nothing about the
// lease.
func TestSenderAsTwoProcesses(t *testing.T) {
	t.Parallel()
	const (
		users, perUser = 60, 3
		slack          = 250 * time.Millisecond
	)
	limits := telegram.DefaultLimits()
	e := newOnbEnv(t, func(o *onbEnvOpts) { o.fakeLimits, o.fakeSlack = &limits, slack })
	// Webhook mode without a webhook: the users' /start updates stay with
	// the fake, so the only calls are the DMs below.
	quiet := func(o *Opts) {
		o.Updates, o.WebhookSecret, o.Limits = UpdatesWebhook, testWebhookSecret, limits
	}
	a := e.newBot(e.db, quiet, func(o *Opts) { o.Instance = "a" })
	b := e.newBot(storetest.NewWith(t, store.Options{Path: e.db.Path()}), quiet, func(o *Opts) { o.Instance = "b" })
	for i := range users {
		if _, err := e.tgBot().Start(telego.User{ID: int64(5000 + i), FirstName: "U"}, ""); err != nil {
			t.Fatal(err)
		}
	}
	ra, rb := e.start(a), e.start(b)
	leaseName := telegram.SenderLeaseName(onboardingTestBotID)

	// A user's DMs are recorded one after another: a sender that did not
	// make the first call to a chat finds the next one due at once.
	var msgs []outgoingMessage
	for i := range users {
		for round := range perUser {
			msgs = append(msgs, outgoingMessage{
				Key: fmt.Sprintf("%d:%d", i, round), Method: methodSendMessage,
				ChatID: contract.TelegramID(strconv.Itoa(5000 + i)), Params: outParams{Text: fmt.Sprintf("dm %d", round)},
			})
		}
	}
	if err := e.db.Tx(context.Background(), func(tx *sql.Tx) error {
		_, err := a.recordDMs(context.Background(), tx, "test", msgs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sent := func() int { return e.count(`select count(*) from bot_deliveries where outcome = 'sent'`) }

	e.waitDB("a third of the DMs sent", func() bool { return sent() >= len(msgs)/3 })
	holder, _, err := e.db.Lease(context.Background(), leaseName)
	if err != nil {
		t.Fatal(err)
	}
	standby, stoppedAt := "b", time.Now()
	switch holder.Owner {
	case "b":
		standby = "a"
		rb.stop()
	default:
		if holder.Owner != "a" {
			t.Errorf("lease %s held by %q, neither bot", leaseName, holder.Owner)
		}
		ra.stop()
	}
	sentByHolder := sent()
	e.waitDB("every DM sent", func() bool { return sent() == len(msgs) })
	if l, _, err := e.db.Lease(context.Background(), leaseName); err != nil || l.Owner != standby {
		t.Errorf("lease after the holder stopped = %+v (%v), want the standby %s", l, err, standby)
	}
	if sentByHolder >= len(msgs) {
		t.Fatalf("the holder sent all %d DMs before it stopped: the takeover was not tested", sentByHolder)
	}

	if n := e.fake.RateLimited(); n != 0 {
		t.Errorf("the fake Bot API answered %d sends with 429", n)
	}
	calls := e.fake.CallsTo("sendMessage")
	perDM := map[string]int{}
	for _, c := range calls {
		if !c.OK {
			t.Errorf("sendMessage to %s %s after the holder was told to stop failed: %d %s",
				c.Params["chat_id"], c.At.Sub(stoppedAt), c.ErrorCode, c.Description)
			continue
		}
		perDM[c.Params["chat_id"]+"/"+c.Params["text"]]++
	}
	if len(perDM) != len(msgs) {
		t.Errorf("%d distinct DMs delivered, want %d", len(perDM), len(msgs))
	}
	for k, n := range perDM {
		if n != 1 {
			t.Errorf("DM %s sent %d times", k, n)
		}
	}
	// Every call counted, in any window of one and of five seconds: the
	// bot's 30 a second plus what the fake's slack lets through.
	for _, window := range []time.Duration{time.Second, 5 * time.Second} {
		allowed := int(float64(limits.Bot.Rate)*(window+slack).Seconds()) + 1
		if peak, at := fakebot.PeakCalls(calls, window); peak > allowed {
			t.Errorf("%d sendMessage calls in the %s from %s, want at most %d", peak, window, at.Format(time.StampMilli), allowed)
		}
	}
}
