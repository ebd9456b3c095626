package fakebot_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	ta "github.com/mymmrac/telego/telegoapi"
	"golang.org/x/time/rate"

	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

func TestFaults(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, opts fakebot.Opts, botID int64) (*fakebot.Server, *telego.Bot) {
		t.Helper()
		fake, url := start(t, opts)
		for _, u := range []telego.User{alice, bob} {
			if _, err := fake.Bot(fakebot.Token(botID)).Start(u, ""); err != nil {
				t.Fatal(err)
			}
		}
		return fake, client(t, url, botID)
	}

	t.Run("a blocked fault answers 403 for its chat only, Times times", func(t *testing.T) {
		t.Parallel()
		fake, bot := setup(t, fakebot.Opts{}, 50)
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultBlocked, Method: "sendmessage", ChatID: alice.ID, Times: 2})
		ctx := ctxFor(t, 5*time.Second)
		if _, err := send(ctx, bot, bob.ID, "to bob"); err != nil {
			t.Fatalf("another chat was hit: %v", err)
		}
		for range 2 {
			_, err := send(ctx, bot, alice.ID, "to alice")
			wantAPIError(t, err, 403, "Forbidden: bot was blocked by the user")
		}
		if _, err := send(ctx, bot, alice.ID, "to alice"); err != nil {
			t.Fatalf("the fault outlived its Times: %v", err)
		}
		calls := fake.CallsTo("sendMessage")
		if calls[1].Fault != fakebot.FaultBlocked || calls[3].Fault != "" {
			t.Fatalf("calls do not say which fault answered: %+v", calls)
		}
	})

	t.Run("a 429 fault carries retry_after", func(t *testing.T) {
		t.Parallel()
		fake, bot := setup(t, fakebot.Opts{}, 51)
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultTooManyRequests, RetryAfter: 6500 * time.Millisecond, Times: 1})
		_, err := send(ctxFor(t, 5*time.Second), bot, alice.ID, "x")
		e := apiErr(t, err)
		if e.ErrorCode != 429 || e.Parameters == nil || e.Parameters.RetryAfter != 7 || e.Description != "Too Many Requests: retry after 7" {
			t.Fatalf("429 = %+v %+v", e, e.Parameters)
		}
		if fake.RateLimited() != 0 {
			t.Fatal("an injected 429 was counted as enforcement")
		}
	})

	t.Run("a server error answers 500", func(t *testing.T) {
		t.Parallel()
		fake, bot := setup(t, fakebot.Opts{}, 52)
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultServerError, Method: "getMe"})
		_, err := bot.GetMe(ctxFor(t, 5*time.Second))
		if err == nil || !strings.Contains(err.Error(), "500") {
			t.Fatalf("err = %v", err)
		}
		if c := fake.CallsTo("getMe"); len(c) != 1 || c[0].ErrorCode != 500 {
			t.Fatalf("calls = %+v", c)
		}
		fake.ClearFaults()
		if _, err := bot.GetMe(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatalf("after ClearFaults: %v", err)
		}
	})

	t.Run("a slow fault delays the answer and a short deadline gives up", func(t *testing.T) {
		t.Parallel()
		fake, bot := setup(t, fakebot.Opts{}, 53)
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultSlow, Delay: 300 * time.Millisecond, Times: 1})
		began := time.Now()
		if _, err := send(ctxFor(t, 5*time.Second), bot, alice.ID, "x"); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(began); d < 300*time.Millisecond {
			t.Fatalf("answered after %s", d)
		}
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultSlow, Delay: 10 * time.Second, Times: 1})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := send(ctx, bot, alice.ID, "y"); err == nil {
			t.Fatal("a 10 s answer beat a 100 ms deadline")
		}
	})

	t.Run("a disconnect fault is a network error", func(t *testing.T) {
		t.Parallel()
		fake, bot := setup(t, fakebot.Opts{}, 54)
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultDisconnect, Times: 1})
		_, err := send(ctxFor(t, 5*time.Second), bot, alice.ID, "x")
		var answered *ta.Error
		if err == nil || errors.As(err, &answered) {
			t.Fatalf("a dropped connection gave %v", err)
		}
		if _, err := send(ctxFor(t, 5*time.Second), bot, alice.ID, "x"); err != nil {
			t.Fatalf("the next call failed too: %v", err)
		}
	})

	t.Run("a probabilistic fault fires on some calls, reproducibly for a seed", func(t *testing.T) {
		t.Parallel()
		count := func() int {
			fake, bot := setup(t, fakebot.Opts{Seed: 7}, 55)
			fake.AddFault(fakebot.Fault{Kind: fakebot.FaultServerError, Method: "getMe", Probability: 0.3})
			failed := 0
			for range 100 {
				if _, err := bot.GetMe(ctxFor(t, 5*time.Second)); err != nil {
					failed++
				}
			}
			return failed
		}
		first, second := count(), count()
		if first < 10 || first > 50 || first != second {
			t.Fatalf("failed %d and %d of 100 with p=0.3 and one seed", first, second)
		}
	})
}

func TestRateLimitEnforcement(t *testing.T) {
	t.Parallel()

	t.Run("a second message to a chat within a second gets 429 and other chats do not", func(t *testing.T) {
		t.Parallel()
		clock := &manualClock{now: time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)}
		limits := telegram.DefaultLimits()
		fake, url := start(t, fakebot.Opts{Now: clock.Now, Limits: &limits, LimitSlack: -1})
		fb := fake.Bot(fakebot.Token(60))
		for _, u := range []telego.User{alice, bob} {
			if _, err := fb.Start(u, ""); err != nil {
				t.Fatal(err)
			}
		}
		bot := client(t, url, 60)
		ctx := ctxFor(t, 5*time.Second)
		if _, err := send(ctx, bot, alice.ID, "1"); err != nil {
			t.Fatal(err)
		}
		_, err := send(ctx, bot, alice.ID, "2")
		if e := apiErr(t, err); e.ErrorCode != 429 || e.Parameters == nil || e.Parameters.RetryAfter != 1 {
			t.Fatalf("second send = %v", err)
		}
		clock.Advance(40 * time.Millisecond) // the bot limit (30/s) allows the next chat
		if _, err := send(ctx, bot, bob.ID, "to bob"); err != nil {
			t.Fatalf("another chat was limited: %v", err)
		}
		clock.Advance(time.Second)
		if _, err := send(ctx, bot, alice.ID, "2 again"); err != nil {
			t.Fatalf("after a second: %v", err)
		}
		if fake.RateLimited() != 1 {
			t.Fatalf("RateLimited = %d, want 1", fake.RateLimited())
		}
	})

	t.Run("the bot limit holds across chats and groups get 20 a minute", func(t *testing.T) {
		t.Parallel()
		clock := &manualClock{now: time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)}
		limits := telegram.Limits{Chat: telegram.Limit{Rate: rate.Inf}, Bot: telegram.Limit{Rate: 30, Burst: 1}}
		fake, url := start(t, fakebot.Opts{Now: clock.Now, Limits: &limits, LimitSlack: -1})
		fb := fake.Bot(fakebot.Token(61))
		for _, u := range []telego.User{alice, bob} {
			if _, err := fb.Start(u, ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := fb.AddGroup(-100, "Team"); err != nil {
			t.Fatal(err)
		}
		bot := client(t, url, 61)
		ctx := ctxFor(t, 5*time.Second)
		if _, err := send(ctx, bot, alice.ID, "a"); err != nil {
			t.Fatal(err)
		}
		if _, err := send(ctx, bot, bob.ID, "b"); err == nil || apiErr(t, err).ErrorCode != 429 {
			t.Fatalf("a second chat in the same instant passed the bot limit: %v", err)
		}
		clock.Advance(time.Second / 30)
		if _, err := send(ctx, bot, -100, "g1"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
		_, err := send(ctx, bot, -100, "g2")
		if e := apiErr(t, err); e.ErrorCode != 429 || e.Parameters.RetryAfter != 2 {
			t.Fatalf("second group message a second later = %v (want retry after 2 s)", err)
		}
		clock.Advance(2 * time.Second)
		if _, err := send(ctx, bot, -100, "g2"); err != nil {
			t.Fatal(err)
		}
		if fake.RateLimited() != 2 {
			t.Fatalf("RateLimited = %d, want 2", fake.RateLimited())
		}
	})
}

func TestWaitCalls(t *testing.T) {
	t.Parallel()
	t.Run("waiting for calls that never come ends at the deadline", func(t *testing.T) {
		t.Parallel()
		fake, _ := start(t, fakebot.Opts{})
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		calls, err := fake.WaitCalls(ctx, "sendMessage", 1)
		if !errors.Is(err, context.DeadlineExceeded) || len(calls) != 0 {
			t.Fatalf("WaitCalls = %v, %v", calls, err)
		}
	})
	t.Run("waiting for calls returns once they arrived", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 70)
		go func() { _, _ = bot.GetMe(context.Background()) }()
		calls, err := fake.WaitCalls(ctxFor(t, 5*time.Second), "getme", 1)
		if err != nil || len(calls) != 1 || calls[0].BotID != 70 || !calls[0].OK {
			t.Fatalf("WaitCalls = %+v, %v", calls, err)
		}
	})
}

func TestCallLog(t *testing.T) {
	t.Parallel()
	t.Run("the log keeps the newest calls up to MaxCalls", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{MaxCalls: 10})
		bot := client(t, url, 71)
		for range 25 {
			if _, err := bot.GetMe(ctxFor(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
		}
		calls := fake.Calls()
		if len(calls) == 0 || len(calls) > 10 || calls[len(calls)-1].Seq != 25 {
			t.Fatalf("%d calls kept, last seq %d", len(calls), calls[len(calls)-1].Seq)
		}
		for i := 1; i < len(calls); i++ {
			if calls[i].Seq != calls[i-1].Seq+1 {
				t.Fatalf("kept calls are not the newest in order: %d after %d", calls[i].Seq, calls[i-1].Seq)
			}
		}
	})
}
