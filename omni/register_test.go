package omni

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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

// TestRegisterWebhookAcrossInstances starts the inbound role's webhook
// registration on several handles of one database at once, as instances of
// a fleet (or processes on one SQLite file) do at a deploy, against one Bot
// API they share.
func TestRegisterWebhookAcrossInstances(t *testing.T) {
	t.Parallel()
	const base = "https://switchyard.example"
	type fleet struct {
		fake *fakebot.Server
		bot  *telego.Bot
		path string
		logs *lockedLog
	}
	newFleet := func(t *testing.T) *fleet {
		t.Helper()
		fake, fakeURL := newFakeBotAPI(t, fakebot.Opts{})
		bot, err := telegram.NewBot(inboxToken, fakeURL)
		if err != nil {
			t.Fatal(err)
		}
		return &fleet{fake: fake, bot: bot, path: storetest.MigratedSource(t), logs: &lockedLog{}}
	}
	// instance is the inbound role of one more instance on the fleet's database.
	instance := func(t *testing.T, f *fleet, secret string) *Inbound {
		t.Helper()
		return NewInbound(InboundOpts{DB: openProcessDB(t, f.path), Token: inboxToken, WebhookSecret: secret,
			Logger: slog.New(slog.NewTextHandler(f.logs, nil))})
	}
	register := func(t *testing.T, f *fleet, in *Inbound, opts RegisterOpts) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		opts.Bot = f.bot
		if opts.BaseURL == "" {
			opts.BaseURL = base
		}
		if err := in.RegisterWebhook(ctx, opts); err != nil {
			t.Fatalf("RegisterWebhook: %v", err)
		}
	}
	sets := func(f *fleet) int { return len(f.fake.CallsTo("setWebhook")) }

	t.Run("three instances that start at once set the webhook once between them", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t)
		ins := []*Inbound{instance(t, f, testSecret), instance(t, f, testSecret), instance(t, f, testSecret)}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, in := range ins {
			wg.Go(func() {
				<-start
				register(t, f, in, RegisterOpts{})
			})
		}
		close(start)
		wg.Wait()
		if calls := f.fake.CallsTo("setWebhook"); len(calls) != 1 || !calls[0].OK || calls[0].Params["url"] != base+WebhookPath {
			t.Fatalf("%d setWebhook calls; want one, to %s", len(calls), base+WebhookPath)
		}
		if n := strings.Count(f.logs.String(), "telegram webhook already set as wanted"); n != 2 {
			t.Fatalf("%d instances found the webhook set, want the other 2:\n%s", n, f.logs.String())
		}
	})

	t.Run("a restart with the same settings leaves the webhook alone; a new URL, a new secret or a deleted webhook sets it again", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t)
		register(t, f, instance(t, f, testSecret), RegisterOpts{})
		register(t, f, instance(t, f, testSecret), RegisterOpts{})
		if n := sets(f); n != 1 {
			t.Fatalf("%d setWebhook calls after a restart with the same settings, want the first start's only", n)
		}
		register(t, f, instance(t, f, testSecret), RegisterOpts{BaseURL: "https://elsewhere.example"})
		if n := sets(f); n != 2 {
			t.Fatalf("%d setWebhook calls after a start with a new URL, want 2", n)
		}
		register(t, f, instance(t, f, "webhook-secret_2"), RegisterOpts{BaseURL: "https://elsewhere.example"})
		if n := sets(f); n != 3 {
			t.Fatalf("%d setWebhook calls after a start with a new secret, want 3", n)
		}
		if err := f.bot.DeleteWebhook(context.Background(), &telego.DeleteWebhookParams{}); err != nil {
			t.Fatal(err)
		}
		register(t, f, instance(t, f, "webhook-secret_2"), RegisterOpts{BaseURL: "https://elsewhere.example"})
		if n := sets(f); n != 4 {
			t.Fatalf("%d setWebhook calls after the webhook was deleted outside, want 4", n)
		}
		info, err := f.bot.GetWebhookInfo(context.Background())
		if err != nil || info.URL != "https://elsewhere.example"+WebhookPath {
			t.Fatalf("webhook %+v (%v)", info, err)
		}
	})

	t.Run("an instance that died holding the lease is taken over once the lease expires", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t)
		in := instance(t, f, testSecret)
		if held, err := in.db.AcquireLease(context.Background(), WebhookLeaseName(inboxBotID), "dead-process", 2*time.Second); err != nil || !held {
			t.Fatalf("take the lease as a process that dies: %v %v", held, err)
		}
		register(t, f, in, RegisterOpts{})
		if calls := f.fake.CallsTo("setWebhook"); len(calls) != 1 || !calls[0].OK {
			t.Fatalf("%d setWebhook calls; want one, taken", len(calls))
		}
	})

	t.Run("on a Bot API of the process's own, every start sets the webhook, without a lease", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t)
		in := instance(t, f, testSecret)
		if held, err := in.db.AcquireLease(context.Background(), WebhookLeaseName(inboxBotID), "another-process", time.Hour); err != nil || !held {
			t.Fatalf("take the lease as another process: %v %v", held, err)
		}
		register(t, f, in, RegisterOpts{OwnAPI: true})
		register(t, f, instance(t, f, testSecret), RegisterOpts{OwnAPI: true})
		if n := sets(f); n != 2 {
			t.Fatalf("%d setWebhook calls, want one per start", n)
		}
	})
}
