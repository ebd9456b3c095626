package fakebot_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram/fakebot"
)

func TestGetMe(t *testing.T) {
	t.Parallel()
	t.Run("each token is its own bot with the id before its colon", func(t *testing.T) {
		t.Parallel()
		_, url := start(t, fakebot.Opts{})
		for _, id := range []int64{111, 222} {
			me, err := client(t, url, id).GetMe(ctxFor(t, 5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if me.ID != id || !me.IsBot || me.Username == "" {
				t.Fatalf("getMe = %+v, want bot %d", me, id)
			}
		}
	})

	t.Run("getMe returns every getMe-only field and the bot's messages none of them", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		token := fakebot.Token(333)
		body := func(method, params string) string {
			t.Helper()
			res, err := http.Post(url+"/bot"+token+"/"+method, "application/json", strings.NewReader(params))
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return string(b)
		}
		const want = `{"ok":true,"result":{"id":333,"is_bot":true,"first_name":"Fake Bot 333","username":"fake333_bot",` +
			`"can_join_groups":true,"can_read_all_group_messages":false,"supports_inline_queries":false,` +
			`"can_connect_to_business":true,"has_main_web_app":false,"has_topics_enabled":false,"allows_users_to_create_topics":false}}`
		if got := body("getMe", ""); got != want {
			t.Fatalf("getMe\n got %s\nwant %s", got, want)
		}
		if _, err := fake.Bot(token).Start(alice, ""); err != nil {
			t.Fatal(err)
		}
		sent := body("sendMessage", `{"chat_id":1001,"text":"hi"}`)
		if !strings.Contains(sent, `"from":{"id":333,"is_bot":true,"first_name":"Fake Bot 333","username":"fake333_bot"},`) {
			t.Fatalf("sendMessage: %s", sent)
		}
		me, err := fake.Bot(token).Me()
		if err != nil || !me.CanConnectToBusiness || !me.CanJoinGroups {
			t.Fatalf("Bot.Me = %+v, %v", me, err)
		}
	})
}

func TestLongPolling(t *testing.T) {
	t.Parallel()

	t.Run("a waiting poll wakes with the /start and its payload in one call", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 10)
		type result struct {
			ups []telego.Update
			err error
		}
		done := make(chan result, 1)
		began := time.Now()
		go func() {
			ups, err := bot.GetUpdates(ctxFor(t, 20*time.Second), &telego.GetUpdatesParams{Timeout: 10})
			done <- result{ups, err}
		}()
		if _, err := fake.Bot(fakebot.Token(10)).Start(alice, "ref-42"); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatal(r.err)
		}
		if time.Since(began) > 5*time.Second {
			t.Fatalf("poll took %s: it did not wake on the update", time.Since(began))
		}
		if len(r.ups) != 1 || r.ups[0].Message == nil || r.ups[0].Message.Text != "/start ref-42" {
			t.Fatalf("updates = %+v", r.ups)
		}
		m := r.ups[0].Message
		if m.From.ID != alice.ID || m.Chat.ID != alice.ID || m.Chat.Type != telego.ChatTypePrivate {
			t.Fatalf("message = %+v", m)
		}
		if len(m.Entities) != 1 || m.Entities[0].Type != telego.EntityTypeBotCommand || m.Entities[0].Length != 6 {
			t.Fatalf("entities = %+v", m.Entities)
		}
		if n := len(fake.CallsTo("getUpdates")); n != 1 {
			t.Fatalf("%d getUpdates calls, want 1 (no busy loop)", n)
		}
	})

	t.Run("telego's own long polling loop receives updates in order", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 15)
		ctx, cancel := context.WithCancel(ctxFor(t, 20*time.Second))
		defer cancel()
		updates, err := bot.UpdatesViaLongPolling(ctx, &telego.GetUpdatesParams{Timeout: 5})
		if err != nil {
			t.Fatal(err)
		}
		fb := fake.Bot(fakebot.Token(15))
		for _, text := range []string{"a", "b", "c"} {
			if _, err := fb.Send(alice, text); err != nil {
				t.Fatal(err)
			}
		}
		for _, want := range []string{"a", "b", "c"} {
			select {
			case u := <-updates:
				if u.Message == nil || u.Message.Text != want {
					t.Fatalf("got %+v, want %q", u.Message, want)
				}
			case <-ctx.Done():
				t.Fatalf("no update %q", want)
			}
		}
		// telego confirms by polling again with the next offset.
		if err := fake.WaitUntil(ctx, func() bool { return fb.PendingUpdates() == 0 }); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an empty poll answers an empty list at its timeout", func(t *testing.T) {
		t.Parallel()
		_, url := start(t, fakebot.Opts{})
		began := time.Now()
		ups, err := client(t, url, 11).GetUpdates(ctxFor(t, 10*time.Second), &telego.GetUpdatesParams{Timeout: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(ups) != 0 || ups == nil {
			t.Fatalf("updates = %#v, want an empty list", ups)
		}
		if d := time.Since(began); d < 900*time.Millisecond {
			t.Fatalf("poll returned after %s, before its 1 s timeout", d)
		}
	})

	t.Run("updates stay until an offset confirms them and ids increase", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 12)
		fb := fake.Bot(fakebot.Token(12))
		for _, text := range []string{"one", "two", "three"} {
			if _, err := fb.Send(alice, text); err != nil {
				t.Fatal(err)
			}
		}
		ctx := ctxFor(t, 5*time.Second)
		first, err := bot.GetUpdates(ctx, &telego.GetUpdatesParams{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(first) != 2 || first[0].Message.Text != "one" || first[1].UpdateID != first[0].UpdateID+1 {
			t.Fatalf("first batch = %+v", first)
		}
		again, err := bot.GetUpdates(ctx, &telego.GetUpdatesParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != 3 || again[0].UpdateID != first[0].UpdateID {
			t.Fatalf("unconfirmed updates were not redelivered: %+v", again)
		}
		rest, err := bot.GetUpdates(ctx, &telego.GetUpdatesParams{Offset: first[1].UpdateID + 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(rest) != 1 || rest[0].Message.Text != "three" {
			t.Fatalf("after confirming two: %+v", rest)
		}
		if fb.PendingUpdates() != 1 {
			t.Fatalf("pending = %d, want 1", fb.PendingUpdates())
		}
	})

	t.Run("a second poll terminates the first with 409", func(t *testing.T) {
		t.Parallel()
		_, url := start(t, fakebot.Opts{})
		first, second := client(t, url, 13), client(t, url, 13)
		errs := make(chan error, 1)
		go func() {
			_, err := first.GetUpdates(ctxFor(t, 20*time.Second), &telego.GetUpdatesParams{Timeout: 15})
			errs <- err
		}()
		// Keep polling from the second instance until the first is cut off.
		var wg sync.WaitGroup
		stop := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = second.GetUpdates(ctxFor(t, 5*time.Second), &telego.GetUpdatesParams{Timeout: 1})
			}
		}()
		err := <-errs
		close(stop)
		wg.Wait()
		wantAPIError(t, err, 409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running")
	})

	t.Run("allowed_updates filters the types queued", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 14)
		fb := fake.Bot(fakebot.Token(14))
		if _, err := bot.GetUpdates(ctxFor(t, 5*time.Second), &telego.GetUpdatesParams{AllowedUpdates: []string{"callback_query"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := fb.Send(alice, "ignored"); err != nil {
			t.Fatal(err)
		}
		if n := fb.PendingUpdates(); n != 0 {
			t.Fatalf("a message update was queued against allowed_updates: %d pending", n)
		}
	})
}

func TestWebhook(t *testing.T) {
	t.Parallel()

	// receiver is a webhook that records what Telegram posts and fails the
	// first failFirst posts with 500.
	type post struct {
		secret string
		update telego.Update
	}
	newReceiver := func(t *testing.T, failFirst int) (*httptest.Server, func() []post) {
		var mu sync.Mutex
		var posts []post
		seen := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			defer mu.Unlock()
			seen++
			if seen <= failFirst {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			var u telego.Update
			if err := json.Unmarshal(body, &u); err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			posts = append(posts, post{secret: r.Header.Get("X-Telegram-Bot-Api-Secret-Token"), update: u})
		}))
		t.Cleanup(srv.Close)
		return srv, func() []post {
			mu.Lock()
			defer mu.Unlock()
			return append([]post(nil), posts...)
		}
	}

	t.Run("updates are posted in order with the secret token after retries", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{WebhookRetryMin: 10 * time.Millisecond, WebhookRetryMax: 40 * time.Millisecond})
		hook, posts := newReceiver(t, 2)
		bot := client(t, url, 20)
		ctx := ctxFor(t, 10*time.Second)
		if err := bot.SetWebhook(ctx, &telego.SetWebhookParams{URL: hook.URL + "/webhooks/bot", SecretToken: "s3cret_token-1"}); err != nil {
			t.Fatal(err)
		}
		fb := fake.Bot(fakebot.Token(20))
		for _, text := range []string{"/start", "hello", "bye"} {
			if _, err := fb.Send(alice, text); err != nil {
				t.Fatal(err)
			}
		}
		if err := fake.WaitUntil(ctx, func() bool { return len(posts()) == 3 }); err != nil {
			t.Fatalf("%v; posts: %+v", err, posts())
		}
		got := posts()
		for i, text := range []string{"/start", "hello", "bye"} {
			if got[i].update.Message.Text != text || got[i].secret != "s3cret_token-1" {
				t.Fatalf("post %d = %+v", i, got[i])
			}
			if i > 0 && got[i].update.UpdateID != got[i-1].update.UpdateID+1 {
				t.Fatalf("update ids not increasing: %+v", got)
			}
		}
		info, err := bot.GetWebhookInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.PendingUpdateCount != 0 || info.LastErrorMessage != "Wrong response from the webhook: 500 Internal Server Error" || info.LastErrorDate == 0 {
			t.Fatalf("webhook info = %+v", info)
		}
	})

	t.Run("getUpdates is refused while a webhook is set and works again after deleteWebhook", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{WebhookRetryMin: time.Hour})
		bot := client(t, url, 21)
		ctx := ctxFor(t, 5*time.Second)
		if err := bot.SetWebhook(ctx, &telego.SetWebhookParams{URL: "http://127.0.0.1:1/hook"}); err != nil {
			t.Fatal(err)
		}
		_, err := bot.GetUpdates(ctx, &telego.GetUpdatesParams{})
		wantAPIError(t, err, 409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first")
		if _, err := fake.Bot(fakebot.Token(21)).Send(alice, "kept"); err != nil {
			t.Fatal(err)
		}
		if err := bot.DeleteWebhook(ctx, &telego.DeleteWebhookParams{}); err != nil {
			t.Fatal(err)
		}
		offset := 0
		if ups := poll(t, bot, &offset); len(ups) != 1 || ups[0].Message.Text != "kept" {
			t.Fatalf("the update pending at deleteWebhook was lost: %+v", ups)
		}
	})

	t.Run("a malformed secret token is refused", func(t *testing.T) {
		t.Parallel()
		_, url := start(t, fakebot.Opts{})
		err := client(t, url, 22).SetWebhook(ctxFor(t, 5*time.Second), &telego.SetWebhookParams{URL: "https://example.com/hook", SecretToken: "no spaces!"})
		wantAPIError(t, err, 400, "Bad Request: secret token contains unallowed characters")
	})
}
