package telegram_test

import (
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
)

// A Bot API call is a client span named by its method, a child of the
// caller's span, with the answer's outcome and nothing of the token, the URL
// or the message.
func TestBotAPICallIsAClientSpan(t *testing.T) {
	rec := telemetrytest.Record(t)
	fake, url := startFake(t)
	token := fakebot.Token(78)
	bot, err := telegram.NewBot(token, url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fake.Bot(token).Start(alice, ""); err != nil {
		t.Fatal(err)
	}
	blocked := telego.User{ID: 1003, FirstName: "Carol"}
	if _, err := fake.Bot(token).Start(blocked, ""); err != nil {
		t.Fatal(err)
	}
	if err := fake.Bot(token).Block(blocked); err != nil {
		t.Fatal(err)
	}

	ctx, parent := telemetry.Start(ctxFor(t, 10*time.Second), "deliver")
	const text = "call me at +7 999 123-45-67"
	if _, err := bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: text}); err != nil {
		t.Fatal(err)
	}
	if _, err := bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: blocked.ID}, Text: text}); err == nil {
		t.Fatal("sending to a user who blocked the bot succeeded")
	}
	parent.End()

	calls := rec.Named("telegram sendMessage")
	if len(calls) != 2 {
		t.Fatalf("%d sendMessage spans, want 2", len(calls))
	}
	for _, s := range calls {
		if !telemetrytest.ChildOf(s, rec.Named("deliver")[0]) {
			t.Error("a Bot API call span is not a child of the caller's span")
		}
	}
	if got := telemetrytest.Attr(calls[0], "telegram.ok"); got != "true" {
		t.Errorf("first call telegram.ok = %q, want true", got)
	}
	if got := telemetrytest.Attr(calls[1], "telegram.error_code"); got != "403" {
		t.Errorf("blocked call telegram.error_code = %q, want 403", got)
	}
	telemetrytest.AssertClean(t, rec.Spans(), token, url, "123-45-67", "call me")
}
