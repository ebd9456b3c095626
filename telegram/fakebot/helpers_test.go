package fakebot_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	ta "github.com/mymmrac/telego/telegoapi"

	"switchyard/telegram/fakebot"
)

var (
	alice = telego.User{ID: 1001, FirstName: "Alice", Username: "alice"}
	bob   = telego.User{ID: 1002, FirstName: "Bob"}
	carol = telego.User{ID: 1003, FirstName: "Carol"}
)

// start runs a fake behind httptest and closes both when the test ends.
func start(t *testing.T, opts fakebot.Opts) (*fakebot.Server, string) {
	t.Helper()
	fake := fakebot.New(opts)
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	t.Cleanup(fake.Close) // runs first: releases waiting long polls
	return fake, ts.URL
}

// client is a real telego bot on the fake, with telego's own default caller.
func client(t *testing.T, apiURL string, botID int64) *telego.Bot {
	t.Helper()
	bot, err := telego.NewBot(fakebot.Token(botID), telego.WithAPIServer(apiURL), telego.WithDiscardLogger())
	if err != nil {
		t.Fatal(err)
	}
	return bot
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// apiErr returns the Bot API error inside err, failing the test when there
// is none.
func apiErr(t *testing.T, err error) *ta.Error {
	t.Helper()
	var e *ta.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a Bot API error, got %v", err)
	}
	return e
}

func wantAPIError(t *testing.T, err error, code int, description string) {
	t.Helper()
	e := apiErr(t, err)
	if e.ErrorCode != code || e.Description != description {
		t.Fatalf("got %d %q, want %d %q", e.ErrorCode, e.Description, code, description)
	}
}

// poll fetches pending updates without waiting and confirms them.
func poll(t *testing.T, bot *telego.Bot, offset *int) []telego.Update {
	t.Helper()
	ups, err := bot.GetUpdates(ctxFor(t, 5*time.Second), &telego.GetUpdatesParams{Offset: *offset})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range ups {
		*offset = u.UpdateID + 1
	}
	return ups
}

// manualClock is a settable clock for the fake.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func keyboard(rows ...[]telego.InlineKeyboardButton) *telego.InlineKeyboardMarkup {
	return &telego.InlineKeyboardMarkup{InlineKeyboard: rows}
}

func button(text, data string) telego.InlineKeyboardButton {
	return telego.InlineKeyboardButton{Text: text, CallbackData: data}
}

func send(ctx context.Context, bot *telego.Bot, chatID int64, text string) (*telego.Message, error) {
	return bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: chatID}, Text: text})
}
