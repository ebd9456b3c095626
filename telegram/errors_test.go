package telegram_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	ta "github.com/mymmrac/telego/telegoapi"

	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

var alice = telego.User{ID: 1001, FirstName: "Alice"}

func startFake(t *testing.T) (*fakebot.Server, string) {
	t.Helper()
	fake := fakebot.New(fakebot.Opts{})
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	t.Cleanup(fake.Close)
	return fake, ts.URL
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestClassify(t *testing.T) {
	t.Parallel()
	fake, url := startFake(t)
	token := fakebot.Token(77)
	bot, err := telegram.NewBot(token, url)
	if err != nil {
		t.Fatal(err)
	}
	fb := fake.Bot(token)
	if _, err := fb.Start(alice, ""); err != nil {
		t.Fatal(err)
	}
	blocked := telego.User{ID: 1002, FirstName: "Bob"}
	if _, err := fb.Start(blocked, ""); err != nil {
		t.Fatal(err)
	}
	if err := fb.Block(blocked); err != nil {
		t.Fatal(err)
	}
	sendTo := func(chatID int64, text string) error {
		_, err := bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{ChatID: telego.ChatID{ID: chatID}, Text: text})
		return err
	}
	fault := func(f fakebot.Fault) func() error {
		return func() error {
			f.Times = 1
			fake.AddFault(f)
			return sendTo(alice.ID, "hi")
		}
	}
	deadURL := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		return "http://" + addr
	}()

	cases := []struct {
		name string
		call func() error
		want telegram.Failure
	}{
		{"a user who blocked the bot is permanent and unreachable", func() error { return sendTo(blocked.ID, "hi") },
			telegram.Failure{Class: telegram.ClassPermanent, Code: 403, Description: "Forbidden: bot was blocked by the user", Unreachable: true}},
		{"a user who never started the bot is permanent and unreachable", func() error {
			conn, err := fb.ConnectBusiness(telego.User{ID: 5, FirstName: "Owner"}, telego.BusinessBotRights{CanReply: true})
			if err != nil {
				return err
			}
			if _, err := fb.BusinessMessage(conn.ID, telego.User{ID: 1003, FirstName: "Carol"}, "hi"); err != nil {
				return err
			}
			return sendTo(1003, "hi")
		}, telegram.Failure{Class: telegram.ClassPermanent, Code: 403, Description: "Forbidden: bot can't initiate conversation with a user", Unreachable: true}},
		{"a chat that does not exist is permanent and unreachable", func() error { return sendTo(424242, "hi") },
			telegram.Failure{Class: telegram.ClassPermanent, Code: 400, Description: "Bad Request: chat not found", Unreachable: true}},
		{"a malformed request is permanent but the user is reachable", func() error { return sendTo(alice.ID, " ") },
			telegram.Failure{Class: telegram.ClassPermanent, Code: 400, Description: "Bad Request: message text is empty"}},
		{"flood control is retry-after with retry_after", fault(fakebot.Fault{Kind: fakebot.FaultTooManyRequests, RetryAfter: 12 * time.Second}),
			telegram.Failure{Class: telegram.ClassRetryAfter, RetryAfter: 12 * time.Second, Code: 429, Description: "Too Many Requests: retry after 12"}},
		{"a 500 is retryable", fault(fakebot.Fault{Kind: fakebot.FaultServerError}),
			telegram.Failure{Class: telegram.ClassRetryable, Code: 500, Description: "Internal Server Error"}},
		{"a dropped connection is retryable", fault(fakebot.Fault{Kind: fakebot.FaultDisconnect}),
			telegram.Failure{Class: telegram.ClassRetryable}},
		{"a timeout is retryable", func() error {
			fake.AddFault(fakebot.Fault{Kind: fakebot.FaultSlow, Delay: 5 * time.Second, Times: 1})
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: "slow"})
			return err
		}, telegram.Failure{Class: telegram.ClassRetryable}},
		{"a refused connection is retryable", func() error {
			dead, err := telegram.NewBot(token, deadURL)
			if err != nil {
				return err
			}
			_, err = dead.GetMe(ctxFor(t, 5*time.Second))
			return err
		}, telegram.Failure{Class: telegram.ClassRetryable}},
		{"a second poller's conflict is retryable", func() error {
			if err := bot.SetWebhook(ctxFor(t, 5*time.Second), &telego.SetWebhookParams{URL: "http://127.0.0.1:1/hook"}); err != nil {
				return err
			}
			defer func() { _ = bot.DeleteWebhook(context.Background(), &telego.DeleteWebhookParams{}) }()
			_, err := bot.GetUpdates(ctxFor(t, 5*time.Second), &telego.GetUpdatesParams{})
			return err
		}, telegram.Failure{Class: telegram.ClassRetryable, Code: 409,
			Description: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"}},
	}
	// Sequential: the faults are shared by the one fake.
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if err == nil {
				t.Fatal("the call succeeded")
			}
			got := telegram.Classify(err)
			if got.Err != err {
				t.Fatalf("Failure.Err = %v, want the classified error", got.Err)
			}
			got.Err = nil
			if got != c.want {
				t.Fatalf("Classify(%v)\n got %+v\nwant %+v", err, got, c.want)
			}
			if strings.Contains(err.Error(), token) || strings.Contains(telegram.Classify(err).Error(), token) {
				t.Fatalf("the error leaks the token: %v", err)
			}
		})
	}

	t.Run("the revoked token of a bot is permanent", func(t *testing.T) {
		revokedToken := fakebot.Token(78)
		fake.Revoke(revokedToken)
		revoked, err := telegram.NewBot(revokedToken, url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = revoked.GetMe(ctxFor(t, 5*time.Second))
		if f := telegram.Classify(err); f.Class != telegram.ClassPermanent || f.Code != 401 || f.Unreachable {
			t.Fatalf("Classify = %+v", f)
		}
	})

	t.Run("no error is no failure", func(t *testing.T) {
		if f := telegram.Classify(nil); f != (telegram.Failure{}) {
			t.Fatalf("Classify(nil) = %+v", f)
		}
	})

	t.Run("an edit that changes nothing is recognised", func(t *testing.T) {
		m, err := bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: "same"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = bot.EditMessageText(ctxFor(t, 5*time.Second), &telego.EditMessageTextParams{ChatID: telego.ChatID{ID: alice.ID}, MessageID: m.MessageID, Text: "same"})
		if !telegram.IsMessageNotModified(err) || telegram.IsMessageNotModified(errors.New("message is not modified")) {
			t.Fatalf("IsMessageNotModified(%v) is wrong", err)
		}
	})

	t.Run("a 429 without retry_after is plain retryable", func(t *testing.T) {
		err := fmt.Errorf("api: %w", &ta.Error{ErrorCode: 429, Description: "Too Many Requests"})
		if f := telegram.Classify(err); f.Class != telegram.ClassRetryable || f.Code != 429 {
			t.Fatalf("Classify = %+v", f)
		}
	})
}

func TestNewBot(t *testing.T) {
	t.Parallel()

	t.Run("the bot talks to the given Bot API server", func(t *testing.T) {
		t.Parallel()
		fake, url := startFake(t)
		bot, err := telegram.NewBot(fakebot.Token(80), url+"/")
		if err != nil {
			t.Fatal(err)
		}
		me, err := bot.GetMe(ctxFor(t, 5*time.Second))
		if err != nil || me.ID != 80 {
			t.Fatalf("getMe = %+v, %v", me, err)
		}
		if calls := fake.CallsTo("getMe"); len(calls) != 1 || calls[0].BotID != 80 {
			t.Fatalf("calls = %+v", calls)
		}
	})

	t.Run("telego's log lines mask the token", func(t *testing.T) {
		t.Parallel()
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		token := fakebot.Token(81)
		bot, err := telegram.NewBot(token, "http://127.0.0.1:1", telegram.WithLogger(log))
		if err != nil {
			t.Fatal(err)
		}
		_, err = bot.GetMe(ctxFor(t, 5*time.Second))
		if err == nil {
			t.Fatal("getMe on a closed port succeeded")
		}
		if buf.Len() == 0 || strings.Contains(buf.String(), token) || !strings.Contains(buf.String(), "<token>") {
			t.Fatalf("log = %q", buf.String())
		}
	})

	t.Run("a call carries a deadline", func(t *testing.T) {
		t.Parallel()
		fake, url := startFake(t)
		bot, err := telegram.NewBot(fakebot.Token(82), url, telegram.WithTimeout(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultSlow, Delay: 10 * time.Second})
		began := time.Now()
		_, err = bot.GetMe(context.Background())
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 5*time.Second {
			t.Fatalf("err = %v after %s", err, time.Since(began))
		}
	})

	t.Run("a malformed token is refused without echoing it", func(t *testing.T) {
		t.Parallel()
		_, err := telegram.NewBot("not-a-token", "")
		if err == nil || strings.Contains(err.Error(), "not-a-token") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestBotIDFromToken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		token string
		id    int64
		ok    bool
	}{
		{"123456:ABC-def", 123456, true},
		{fakebot.Token(9), 9, true},
		{"abc:def", 0, false},
		{"123456", 0, false},
		{"-5:x", 0, false},
		{"", 0, false},
	} {
		if id, ok := telegram.BotIDFromToken(c.token); id != c.id || ok != c.ok {
			t.Errorf("BotIDFromToken(%q) = %d, %t; want %d, %t", c.token, id, ok, c.id, c.ok)
		}
	}
}
