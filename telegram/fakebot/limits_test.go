package fakebot_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	"golang.org/x/time/rate"

	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

// limitsEnv is a fake that enforces limits on a manual clock, with no
// slack, and a bot on it whose users have all started it.
type limitsEnv struct {
	fake  *fakebot.Server
	fb    *fakebot.Bot
	bot   *telego.Bot
	clock *manualClock
}

func newLimitsEnv(t *testing.T, limits telegram.Limits, botID int64, users int) limitsEnv {
	t.Helper()
	clock := &manualClock{now: time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)}
	fake, url := start(t, fakebot.Opts{Now: clock.Now, Limits: &limits, LimitSlack: -1})
	fb := fake.Bot(fakebot.Token(botID))
	for i := range users {
		if _, err := fb.Start(user(i), ""); err != nil {
			t.Fatal(err)
		}
	}
	return limitsEnv{fake: fake, fb: fb, bot: client(t, url, botID), clock: clock}
}

func user(i int) telego.User {
	return telego.User{ID: int64(5000 + i), FirstName: fmt.Sprintf("User %d", i)}
}

// want429 checks that err is Telegram's 429 with parameters.retry_after.
func want429(t *testing.T, err error, retryAfter int) {
	t.Helper()
	e := apiErr(t, err)
	if e.ErrorCode != 429 || e.Parameters == nil || e.Parameters.RetryAfter != retryAfter ||
		e.Description != fmt.Sprintf("Too Many Requests: retry after %d", retryAfter) {
		t.Fatalf("got %d %q %+v, want 429 with retry_after %d", e.ErrorCode, e.Description, e.Parameters, retryAfter)
	}
}

func TestRateLimits(t *testing.T) {
	t.Parallel()

	t.Run("the defaults model Telegram: a short burst to a chat, then one a second", func(t *testing.T) {
		t.Parallel()
		e := newLimitsEnv(t, telegram.Limits{}, 60, 2)
		ctx := ctxFor(t, 5*time.Second)
		for i := range 3 {
			if _, err := send(ctx, e.bot, user(0).ID, fmt.Sprint("burst ", i)); err != nil {
				t.Fatalf("message %d of a short burst: %v", i+1, err)
			}
		}
		_, err := send(ctx, e.bot, user(0).ID, "one too many")
		want429(t, err, 1)
		if _, err := send(ctx, e.bot, user(1).ID, "another chat"); err != nil {
			t.Fatalf("another chat was limited: %v", err)
		}
		e.clock.Advance(time.Second)
		if _, err := send(ctx, e.bot, user(0).ID, "a second later"); err != nil {
			t.Fatalf("a second later: %v", err)
		}
		_, err = send(ctx, e.bot, user(0).ID, "again at once")
		want429(t, err, 1)
		if n := e.fake.RateLimited(); n != 2 {
			t.Fatalf("RateLimited = %d, want 2", n)
		}
	})

	t.Run("a chat sent to once a second is never limited", func(t *testing.T) {
		t.Parallel()
		e := newLimitsEnv(t, telegram.Limits{}, 61, 1)
		ctx := ctxFor(t, 10*time.Second)
		for i := range 120 {
			if _, err := send(ctx, e.bot, user(0).ID, fmt.Sprint(i)); err != nil {
				t.Fatalf("message %d at one a second: %v", i+1, err)
			}
			e.clock.Advance(time.Second)
		}
	})

	t.Run("the bot takes 30 chats at once, the 31st waits, and 30 a second go on", func(t *testing.T) {
		t.Parallel()
		e := newLimitsEnv(t, telegram.Limits{}, 62, 61)
		ctx := ctxFor(t, 10*time.Second)
		for i := range 30 {
			if _, err := send(ctx, e.bot, user(i).ID, "hello"); err != nil {
				t.Fatalf("chat %d of the bot's burst: %v", i+1, err)
			}
		}
		_, err := send(ctx, e.bot, user(30).ID, "hello")
		want429(t, err, 1)
		// At the published rate (a hair under 30 a second), every send passes.
		for i := 30; i < 61; i++ {
			e.clock.Advance(34 * time.Millisecond)
			if _, err := send(ctx, e.bot, user(i).ID, "hello"); err != nil {
				t.Fatalf("chat %d at 30 a second: %v", i+1, err)
			}
		}
	})

	t.Run("a group takes 20 at once, then one every 3 seconds", func(t *testing.T) {
		t.Parallel()
		// The chat limit off, to see the group's own.
		e := newLimitsEnv(t, telegram.Limits{Chat: telegram.Limit{Rate: rate.Inf}}, 63, 0)
		const group = -100200
		if err := e.fb.AddGroup(group, "Team"); err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t, 10*time.Second)
		for i := range 20 {
			if _, err := send(ctx, e.bot, group, fmt.Sprint(i)); err != nil {
				t.Fatalf("group message %d: %v", i+1, err)
			}
		}
		_, err := send(ctx, e.bot, group, "21st")
		want429(t, err, 3)
		e.clock.Advance(3 * time.Second)
		if _, err := send(ctx, e.bot, group, "21st"); err != nil {
			t.Fatalf("after 3 s: %v", err)
		}
	})

	t.Run("a chat's limit applies in groups too", func(t *testing.T) {
		t.Parallel()
		e := newLimitsEnv(t, telegram.Limits{}, 64, 0)
		const group = -100201
		if err := e.fb.AddGroup(group, "Team"); err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t, 5*time.Second)
		for i := range 3 {
			if _, err := send(ctx, e.bot, group, fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		_, err := send(ctx, e.bot, group, "4th")
		want429(t, err, 1)
	})

	t.Run("a wrong send gets its own error, not 429, and spends nothing", func(t *testing.T) {
		t.Parallel()
		e := newLimitsEnv(t, telegram.Limits{}, 65, 2)
		ctx := ctxFor(t, 5*time.Second)
		for range 3 {
			if _, err := send(ctx, e.bot, user(0).ID, "spend the burst"); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.fb.Block(user(1)); err != nil {
			t.Fatal(err)
		}
		for range 2 { // over the limit, every one is still judged on what it is
			_, err := send(ctx, e.bot, user(0).ID, "")
			wantAPIError(t, err, 400, "Bad Request: message text is empty")
			_, err = send(ctx, e.bot, 999_999, "to nobody")
			wantAPIError(t, err, 400, "Bad Request: chat not found")
			_, err = send(ctx, e.bot, user(1).ID, "to a user who blocked the bot")
			wantAPIError(t, err, 403, "Forbidden: bot was blocked by the user")
			_, err = e.bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: user(0).ID}, Text: "<b>x", ParseMode: "HTML"})
			wantAPIError(t, err, 400, `Bad Request: can't parse entities: Can't find end tag corresponding to start tag "b"`)
			_, err = e.bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: user(0).ID}, Text: "x",
				ReplyMarkup: keyboard([]telego.InlineKeyboardButton{{Text: "plain"}})})
			wantAPIError(t, err, 400, "Bad Request: text buttons are unallowed in the inline keyboard")
		}
		if n := e.fake.RateLimited(); n != 0 {
			t.Fatalf("RateLimited = %d after wrong sends, want 0", n)
		}
		// One second refills one message; had the wrong sends spent any,
		// this one would be refused.
		e.clock.Advance(time.Second)
		if _, err := send(ctx, e.bot, user(0).ID, "the refilled one"); err != nil {
			t.Fatalf("the wrong sends spent the limit: %v", err)
		}
	})

	t.Run("limits given in full are enforced as given", func(t *testing.T) {
		t.Parallel()
		// The senders' own limits: a burst of one.
		e := newLimitsEnv(t, telegram.DefaultLimits(), 66, 2)
		ctx := ctxFor(t, 5*time.Second)
		if _, err := send(ctx, e.bot, user(0).ID, "1"); err != nil {
			t.Fatal(err)
		}
		_, err := send(ctx, e.bot, user(0).ID, "2")
		want429(t, err, 1)
		_, err = send(ctx, e.bot, user(1).ID, "another chat in the same instant")
		want429(t, err, 1) // the bot's 30 a second, burst 1
		e.clock.Advance(34 * time.Millisecond)
		if _, err := send(ctx, e.bot, user(1).ID, "a thirtieth later"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Second)
		if _, err := send(ctx, e.bot, user(0).ID, "a second later"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a zero burst takes the model's and a zero rate the whole bucket", func(t *testing.T) {
		t.Parallel()
		e := newLimitsEnv(t, telegram.Limits{Chat: telegram.Limit{Rate: 2}}, 67, 1) // 2 a second, burst 3
		ctx := ctxFor(t, 5*time.Second)
		for range 3 {
			if _, err := send(ctx, e.bot, user(0).ID, "x"); err != nil {
				t.Fatal(err)
			}
		}
		_, err := send(ctx, e.bot, user(0).ID, "x")
		want429(t, err, 1)
		e.clock.Advance(time.Second / 2)
		if _, err := send(ctx, e.bot, user(0).ID, "half a second later at 2 a second"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("without Limits nothing is limited", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		if _, err := fake.Bot(fakebot.Token(68)).Start(alice, ""); err != nil {
			t.Fatal(err)
		}
		bot := client(t, url, 68)
		ctx := ctxFor(t, 10*time.Second)
		for i := range 50 {
			if _, err := send(ctx, bot, alice.ID, fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("the slack forgives a client's clock running a little ahead", func(t *testing.T) {
		t.Parallel()
		clock := &manualClock{now: time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)}
		limits := telegram.DefaultLimits()
		fake, url := start(t, fakebot.Opts{Now: clock.Now, Limits: &limits, LimitSlack: 100 * time.Millisecond})
		if _, err := fake.Bot(fakebot.Token(69)).Start(alice, ""); err != nil {
			t.Fatal(err)
		}
		bot := client(t, url, 69)
		ctx := ctxFor(t, 5*time.Second)
		if _, err := send(ctx, bot, alice.ID, "1"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(950 * time.Millisecond)
		if _, err := send(ctx, bot, alice.ID, "50 ms early"); err != nil {
			t.Fatalf("within the slack: %v", err)
		}
		clock.Advance(800 * time.Millisecond) // 250 ms early for the third
		_, err := send(ctx, bot, alice.ID, "250 ms early")
		want429(t, err, 1)
	})
}

// TestTelegramLimits pins the model the fake enforces.
func TestTelegramLimits(t *testing.T) {
	t.Parallel()
	l := fakebot.TelegramLimits()
	want := telegram.Limits{
		Chat:  telegram.Limit{Rate: 1, Burst: 3},
		Group: telegram.Limit{Rate: rate.Limit(20.0 / 60.0), Burst: 20},
		Bot:   telegram.Limit{Rate: 30, Burst: 30},
	}
	if l != want {
		t.Fatalf("TelegramLimits = %+v, want %+v", l, want)
	}
	// Never stricter than what the senders keep to.
	d := telegram.DefaultLimits()
	for _, p := range [][2]telegram.Limit{{l.Chat, d.Chat}, {l.Group, d.Group}, {l.Bot, d.Bot}} {
		if p[0].Rate < p[1].Rate || p[0].Burst < p[1].Burst {
			t.Errorf("the fake's %+v is stricter than the senders' %+v", p[0], p[1])
		}
	}
}
