package telegram_test

import (
	"slices"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/metrictest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

// TestDeferralsExistFromTheStart: a limiter makes the deferral counter of
// each limit exist at 0, so an alert on deferrals sees 0, not "no data".
func TestDeferralsExistFromTheStart(t *testing.T) {
	telegram.NewLimiter(telegram.Limits{})
	have := metrictest.LabelValues(t, "switchyard_telegram_ratelimit_deferrals_total", "scope")
	for _, scope := range []string{"chat", "group", "bot", "pause"} {
		if !slices.Contains(have, scope) {
			t.Errorf("no deferrals series for scope %q (have %v)", scope, have)
		}
	}
}

// TestTooManyRequestsCounted: every 429 Telegram answers is counted under the
// bot's id, from 0 at NewBot on; other failures are not.
func TestTooManyRequestsCounted(t *testing.T) {
	t.Parallel()
	fake, url := startFake(t)
	token := fakebot.Token(7700000429)
	bot, err := telegram.NewBot(token, url)
	if err != nil {
		t.Fatal(err)
	}
	count := func() float64 {
		v, ok := metrictest.Value(t, "switchyard_telegram_too_many_requests_total", "bot", "7700000429")
		if !ok {
			t.Fatal("no 429 series for the bot")
		}
		return v
	}
	if n := count(); n != 0 {
		t.Fatalf("a new bot has %v 429s", n)
	}
	fb := fake.Bot(token)
	if _, err := fb.Start(alice, ""); err != nil {
		t.Fatal(err)
	}
	send := func() error {
		_, err := bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: "hi"})
		return err
	}
	fake.AddFault(fakebot.Fault{Kind: fakebot.FaultServerError, Token: token, Times: 1})
	fake.AddFault(fakebot.Fault{Kind: fakebot.FaultBlocked, Token: token, Times: 1})
	for range 2 {
		if err := send(); err == nil {
			t.Fatal("a faulted call succeeded")
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("a 500 and a 403 counted as %v 429s", n)
	}
	fake.AddFault(fakebot.Fault{Kind: fakebot.FaultTooManyRequests, Token: token, Times: 2, RetryAfter: time.Second})
	for range 2 {
		if f := telegram.Classify(send()); f.Class != telegram.ClassRetryAfter {
			t.Fatalf("a 429 classified %q", f.Class)
		}
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("two 429s counted as %v", n)
	}
}
