package omni

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/store/storetest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

func TestRegisterWebhook(t *testing.T) {
	t.Parallel()
	// setup is an inbound role and its bot's client on a fake Bot API.
	// setup is an inbound role logging to logs, and its bot's client on a
	// fake Bot API.
	setup := func(t *testing.T) (in *Inbound, bot *telego.Bot, fake *fakebot.Server, logs *lockedLog) {
		t.Helper()
		fake, fakeURL := newFakeBotAPI(t, fakebot.Opts{})
		bot, err := telegram.NewBot(inboxToken, fakeURL)
		if err != nil {
			t.Fatal(err)
		}
		logs = &lockedLog{}
		in = NewInbound(InboundOpts{DB: storetest.New(t), Token: inboxToken, WebhookSecret: testSecret,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		return in, bot, fake, logs
	}
	const base = "https://switchyard.example/"

	t.Run("a setWebhook Telegram refuses is tried again, each wait longer, until it takes it", func(t *testing.T) {
		t.Parallel()
		in, bot, fake, logs := setup(t)
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultServerError, Method: "setWebhook", Times: 2})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		const first = 100 * time.Millisecond
		if err := in.RegisterWebhook(ctx, RegisterOpts{Bot: bot, BaseURL: base, FirstRetry: first, MaxRetry: time.Second}); err != nil {
			t.Fatalf("RegisterWebhook: %v", err)
		}
		calls := fake.CallsTo("setWebhook")
		if len(calls) != 3 || calls[0].OK || calls[1].OK || !calls[2].OK {
			t.Fatalf("setWebhook calls: %+v; want two refused, then one taken", calls)
		}
		// The waits are at least what the backoff says; a loaded machine
		// only makes them longer.
		if gap := calls[1].At.Sub(calls[0].At); gap < first {
			t.Errorf("first retry after %s, want at least %s", gap, first)
		}
		if gap := calls[2].At.Sub(calls[1].At); gap < 2*first {
			t.Errorf("second retry after %s, want at least %s (the wait doubles)", gap, 2*first)
		}
		info, err := bot.GetWebhookInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.URL != "https://switchyard.example"+WebhookPath {
			t.Errorf("webhook URL %q", info.URL)
		}
		if n := strings.Count(logs.String(), "telegram webhook not set; retrying"); n != 2 {
			t.Errorf("%d warnings, want one per refusal:\n%s", n, logs.String())
		}
	})

	t.Run("a webhook taken at the first attempt ends the registration at once", func(t *testing.T) {
		t.Parallel()
		in, bot, fake, _ := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A first retry longer than the deadline: returning at all shows
		// that no retry was waited for.
		if err := in.RegisterWebhook(ctx, RegisterOpts{Bot: bot, BaseURL: base, FirstRetry: time.Hour}); err != nil {
			t.Fatalf("RegisterWebhook: %v", err)
		}
		if calls := fake.CallsTo("setWebhook"); len(calls) != 1 || !calls[0].OK {
			t.Fatalf("setWebhook calls: %+v; want one, taken", calls)
		}
	})

	t.Run("the end of ctx ends the retries, mid-wait", func(t *testing.T) {
		t.Parallel()
		in, bot, fake, logs := setup(t)
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultServerError, Method: "setWebhook"}) // refused for good
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			done <- in.RegisterWebhook(ctx, RegisterOpts{Bot: bot, BaseURL: base, FirstRetry: time.Hour})
		}()
		// The warning is logged just before the wait: cancel once it is.
		testwait.Until(t, 10*time.Second, "", func() bool { return strings.Contains(logs.String(), "retrying") }, func() string { return "no warning of the refused setWebhook:\n" + logs.String() })
		cancel()
		wait, stop := context.WithTimeout(context.Background(), 30*time.Second)
		defer stop()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("RegisterWebhook after cancel: %v, want context.Canceled", err)
			}
		case <-wait.Done():
			t.Fatal("RegisterWebhook did not return within 30 s of its context's end")
		}
		if calls := fake.CallsTo("setWebhook"); len(calls) != 1 {
			t.Fatalf("%d setWebhook calls; want the one before the wait", len(calls))
		}
	})
}
