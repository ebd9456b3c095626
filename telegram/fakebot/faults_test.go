package fakebot_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	ta "github.com/mymmrac/telego/telegoapi"

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
