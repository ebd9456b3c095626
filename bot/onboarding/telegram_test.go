package onboarding

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/mymmrac/telego"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/telegram/fakebot"
)

// postWebhook posts body to POST /webhooks/bot with the secret header
// (none when secret is "") and returns the status.
func postWebhook(t *testing.T, srvURL, secret, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srvURL+"/webhooks/bot", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestWebhook(t *testing.T) {
	t.Parallel()
	update := func(id int) string {
		return fmt.Sprintf(`{"update_id":%d,"message":{"message_id":1,"date":1700000000,"chat":{"id":6001,"type":"private"},`+
			`"from":{"id":6001,"is_bot":false,"first_name":"Алиса"},"text":"/help"}}`, id)
	}
	newHook := func(t *testing.T, mode string) (*onbEnv, *httptest.Server) {
		e := newOnbEnv(t)
		b := e.newBot(e.db, func(o *Opts) { o.Updates, o.WebhookSecret = mode, testWebhookSecret })
		r := mux.NewRouter()
		b.Routes(r)
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		return e, srv
	}
	stored := func(e *onbEnv) int { return e.count(`select count(*) from bot_updates`) }

	t.Run("refuses a missing, wrong or longer secret with 401 and stores nothing", func(t *testing.T) {
		t.Parallel()
		e, srv := newHook(t, UpdatesWebhook)
		for _, secret := range []string{"", "wrong-secret_0123456789x", testWebhookSecret + "x", testWebhookSecret[:10]} {
			if status := postWebhook(t, srv.URL, secret, update(1)); status != http.StatusUnauthorized {
				t.Fatalf("secret %q: status %d, want 401", secret, status)
			}
		}
		if n := stored(e); n != 0 {
			t.Fatalf("%d updates stored without the secret", n)
		}
	})

	t.Run("refuses an update not declared application/json with 415 and stores nothing", func(t *testing.T) {
		t.Parallel()
		e, srv := newHook(t, UpdatesWebhook)
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded"} {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/webhooks/bot", strings.NewReader(update(7)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", testWebhookSecret)
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnsupportedMediaType {
				t.Fatalf("Content-Type %q: status %d, want 415", ct, resp.StatusCode)
			}
		}
		if n := stored(e); n != 0 {
			t.Fatalf("%d updates stored from bodies not declared JSON", n)
		}
		if status := postWebhook(t, srv.URL, testWebhookSecret, update(7)); status != http.StatusOK {
			t.Fatalf("the same update as application/json: %d", status)
		}
	})

	t.Run("answers 200 once the update is stored, and stores a repeated delivery once", func(t *testing.T) {
		t.Parallel()
		e, srv := newHook(t, UpdatesWebhook)
		for range 2 {
			if status := postWebhook(t, srv.URL, testWebhookSecret, update(41)); status != http.StatusOK {
				t.Fatalf("status %d, want 200", status)
			}
			if n := stored(e); n != 1 {
				t.Fatalf("%d updates stored when the 200 came, want 1", n)
			}
		}
		var chat, kind, payload string
		if err := e.db.Read.QueryRow(`select chat_id, kind, payload from bot_updates where update_id = 41`).Scan(&chat, &kind, &payload); err != nil {
			t.Fatal(err)
		}
		if chat != "6001" || kind != "message" || payload != update(41) {
			t.Fatalf("stored %s %s %s", chat, kind, payload)
		}
	})

	t.Run("answers 400 to a body that is not an update", func(t *testing.T) {
		t.Parallel()
		e, srv := newHook(t, UpdatesWebhook)
		for _, body := range []string{"", "{", `{"message":{}}`, `[1,2]`} {
			if status := postWebhook(t, srv.URL, testWebhookSecret, body); status != http.StatusBadRequest {
				t.Fatalf("body %q: status %d, want 400", body, status)
			}
		}
		if n := stored(e); n != 0 {
			t.Fatalf("%d updates stored", n)
		}
	})

	t.Run("answers 404 when the bot long-polls", func(t *testing.T) {
		t.Parallel()
		_, srv := newHook(t, UpdatesLongPoll)
		if status := postWebhook(t, srv.URL, testWebhookSecret, update(1)); status != http.StatusNotFound {
			t.Fatalf("status %d, want 404", status)
		}
	})

	t.Run("answers 503 when the update cannot be stored, so Telegram delivers it again", func(t *testing.T) {
		t.Parallel()
		e, srv := newHook(t, UpdatesWebhook)
		failStores(t, e)
		if status := postWebhook(t, srv.URL, testWebhookSecret, update(7)); status != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503", status)
		}
		allowStores(t, e)
		if status := postWebhook(t, srv.URL, testWebhookSecret, update(7)); status != http.StatusOK || stored(e) != 1 {
			t.Fatalf("after recovery: status %d, %d stored", status, stored(e))
		}
	})

	t.Run("the fake Bot API's deliveries go through setWebhook with the secret", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		b := e.newBot(e.db, func(o *Opts) {
			o.Updates, o.WebhookSecret, o.WebhookURL = UpdatesWebhook, testWebhookSecret, e.srv.URL+"/webhooks/bot"
		})
		b.Routes(e.router)
		e.run(b)
		if _, err := e.tgBot().Send(telego.User{ID: 6001, FirstName: "Алиса"}, "/help"); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "/menu — личный кабинет")
		calls := e.fake.CallsTo("setWebhook")
		if len(calls) == 0 || calls[0].Params["secret_token"] != testWebhookSecret || calls[0].Params["url"] != e.srv.URL+"/webhooks/bot" {
			t.Fatalf("setWebhook calls %+v", calls)
		}
		if len(e.fake.CallsTo("getUpdates")) != 0 {
			t.Fatal("a webhook bot called getUpdates")
		}
	})
}

// failStores makes every insert into bot_updates fail, as a broken disk
// would: a trigger that raises, in each dialect's own trigger language.
func failStores(t *testing.T, e *onbEnv) {
	t.Helper()
	create := []string{`create trigger test_fail_store before insert on bot_updates
		begin select raise(abort, 'injected store failure'); end`}
	if e.db.Postgres() {
		create = []string{
			`create function test_fail_store() returns trigger language plpgsql as $$
			begin
				raise exception 'injected store failure';
			end $$`,
			`create trigger test_fail_store before insert on bot_updates
				for each row execute function test_fail_store()`,
		}
	}
	for _, q := range create {
		if _, err := e.db.Write.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

func allowStores(t *testing.T, e *onbEnv) {
	t.Helper()
	drop := `drop trigger test_fail_store`
	if e.db.Postgres() {
		drop = `drop trigger test_fail_store on bot_updates`
	}
	if _, err := e.db.Write.Exec(drop); err != nil {
		t.Fatal(err)
	}
}

func TestLongPolling(t *testing.T) {
	t.Parallel()
	alice := telego.User{ID: 6001, FirstName: "Алиса"}
	fast := func(o *Opts) { o.PollInterval = 100 * time.Millisecond }

	t.Run("the offset is durable: a restarted bot handles each update once", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		stop := e.run(e.newBot(e.db, fast))
		first, err := e.tgBot().Send(alice, "/help")
		if err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "/menu — личный кабинет")
		stop()
		if _, err := e.tgBot().Send(alice, "что это?"); err != nil {
			t.Fatal(err)
		}
		e.run(e.newBot(e.db, fast))
		e.waitMessage(6001, "Я понимаю команды")
		e.waitDB("both updates handled", func() bool { return e.count(`select count(*) from bot_updates where status = 'done'`) == 2 })
		if n := e.countBotMessages(6001, "/menu — личный кабинет"); n != 1 {
			t.Fatalf("%d help replies, want 1", n)
		}
		var offset int
		if err := e.db.Read.QueryRow(`select next_offset from bot_update_offsets where bot_id = ?`, onboardingTestBotID).Scan(&offset); err != nil {
			t.Fatal(err)
		}
		if offset < 2 {
			t.Fatalf("durable offset %d after two updates (first message %d)", offset, first.MessageID)
		}
	})

	t.Run("an update that cannot be stored is not confirmed, comes again and is handled once", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		failStores(t, e)
		e.run(e.newBot(e.db, fast))
		if _, err := e.tgBot().Send(alice, "/help"); err != nil {
			t.Fatal(err)
		}
		fetched := func() int {
			n := 0
			for _, c := range e.fake.CallsTo("getUpdates") {
				if c.OK && strings.Contains(string(c.Result), `"update_id"`) {
					n++
				}
			}
			return n
		}
		e.waitFake("the update fetched while it cannot be stored", func() bool { return fetched() >= 1 })
		e.waitDB("the store failure", func() bool { return strings.Contains(e.logs.String(), "injected store failure") })
		if e.tgBot().PendingUpdates() != 1 {
			t.Fatal("the update was confirmed to Telegram before it was stored")
		}
		allowStores(t, e)
		e.waitMessage(6001, "/menu — личный кабинет")
		e.waitFake("the update confirmed", func() bool { return e.tgBot().PendingUpdates() == 0 })
		if fetched() < 2 {
			t.Fatalf("the update was fetched %d times; the second fetch is what stored it", fetched())
		}
		if n := e.countBotMessages(6001, "/menu — личный кабинет"); n != 1 {
			t.Fatalf("%d replies, want 1", n)
		}
	})
}

func TestSender(t *testing.T) {
	t.Parallel()
	leaderTG := telego.User{ID: 5001, FirstName: "Лидия"}

	// reactivate emits a reactivation DM for the leader.
	reactivate := func(e *onbEnv, u backend.User) contract.EventID {
		e.t.Helper()
		id, err := e.be.Outbox().EmitReactivation(context.Background(), backend.Target{MagnetUID: u.UID, TelegramID: *u.TelegramID}, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		return id
	}
	// sends are the calls that tried to deliver a reactivation DM.
	sends := func(e *onbEnv) []fakebot.Call {
		var out []fakebot.Call
		for _, c := range e.fake.CallsTo("sendMessage") {
			if c.Params["chat_id"] == "5001" && strings.Contains(c.Params["text"], "Рады видеть") {
				out = append(out, c)
			}
		}
		return out
	}
	// started runs a bot on a fresh env whose leader has talked to it.
	started := func(t *testing.T) (*onbEnv, backend.User) {
		e := newOnbEnv(t)
		leader := e.createUser("lead", "Лидия", "5001")
		e.run(e.newBot(e.db))
		if _, err := e.tgBot().Send(leaderTG, "hi"); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(5001, "Я понимаю команды")
		return e, leader
	}

	faults := []struct {
		name     string
		fault    fakebot.Fault
		attempts int
		check    func(t *testing.T, calls []fakebot.Call)
	}{
		{"retries a 429 after its retry_after and sends once",
			fakebot.Fault{Kind: fakebot.FaultTooManyRequests, Method: "sendMessage", RetryAfter: time.Second, Times: 1}, 1,
			func(t *testing.T, calls []fakebot.Call) {
				if len(calls) != 2 || calls[0].ErrorCode != 429 || calls[1].At.Sub(calls[0].At) < 900*time.Millisecond {
					t.Fatalf("calls %+v: want a 429, then the send at least retry_after later", calls)
				}
			}},
		{"retries 500s with backoff and sends once",
			fakebot.Fault{Kind: fakebot.FaultServerError, Method: "sendMessage", Times: 2}, 2, nil},
		{"retries a dropped connection and sends once",
			fakebot.Fault{Kind: fakebot.FaultDisconnect, Method: "sendMessage", Times: 1}, 1, nil},
		{"waits out a slow answer and sends once",
			fakebot.Fault{Kind: fakebot.FaultSlow, Method: "sendMessage", Delay: 300 * time.Millisecond, Times: 1}, 0, nil},
	}
	for _, tc := range faults {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, leader := started(t)
			e.fake.AddFault(tc.fault)
			reactivate(e, leader)
			e.waitMessage(5001, "Рады видеть вас снова")
			e.waitDB("the call recorded as sent", func() bool {
				return e.count(`select count(*) from bot_deliveries where dm_key like 'event:%' and outcome = 'sent'`) == 1
			})
			if n := e.countBotMessages(5001, "Рады видеть вас снова"); n != 1 {
				t.Fatalf("%d messages, want 1", n)
			}
			if n := e.count(`select attempts from bot_deliveries where dm_key like 'event:%'`); n != tc.attempts {
				t.Fatalf("%d failed attempts recorded, want %d", n, tc.attempts)
			}
			if tc.check != nil {
				tc.check(t, sends(e))
			}
		})
	}

	t.Run("a 403 marks the user unreachable, falls back to a web notification and skips Telegram until they write again", func(t *testing.T) {
		t.Parallel()
		e, leader := started(t)
		ctx := context.Background()
		e.fake.AddFault(fakebot.Fault{Kind: fakebot.FaultBlocked, Method: "sendMessage", ChatID: 5001, Times: 1})
		reactivate(e, leader)
		e.waitDB("the fallback notification", func() bool {
			n, _ := e.be.ListNotifications(ctx, leader.UID)
			return len(n) == 1 && n[0].Kind == "reactivation"
		})
		if e.count(`select count(*) from bot_unreachable where telegram_id = '5001'`) != 1 {
			t.Fatal("not remembered as unreachable")
		}
		reactivate(e, leader)
		e.waitDB("the second fallback notification", func() bool {
			n, _ := e.be.ListNotifications(ctx, leader.UID)
			return len(n) == 2
		})
		if n := len(sends(e)); n != 1 {
			t.Fatalf("%d sendMessage calls to an unreachable user, want only the first (403)", n)
		}
		if _, err := e.tgBot().Send(leaderTG, "я снова здесь"); err != nil {
			t.Fatal(err)
		}
		e.waitFake("the reply to the returning user", func() bool { return e.countBotMessages(5001, "Я понимаю команды") == 2 })
		reactivate(e, leader)
		e.waitMessage(5001, "Рады видеть вас снова")
		if n, _ := e.be.ListNotifications(ctx, leader.UID); len(n) != 2 {
			t.Fatalf("%d notifications after the user came back, want 2", len(n))
		}
	})

	t.Run("a call to a user who never started the bot fails visibly and an operator can redrive it", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		ob := e.newBot(e.db)
		admin := e.router.PathPrefix("/admin/api").Subrouter()
		ob.AdminRoutes(admin)
		queue.NewAdmin(queue.AdminOpts{DB: e.db}).AdminRoutes(admin)
		e.run(ob)
		ctx := context.Background()
		u := e.createUser("carol", "Карина", "6003")
		if _, err := e.be.ConnectWallet(ctx, u.UID, "EQcarol"); err != nil {
			t.Fatal(err)
		}
		var failed DM
		e.waitDB("the prompt failed", func() bool {
			var list DMsResponse
			e.adminGet(t, "/admin/api/bot/dms?chatId=6003", &list)
			for _, d := range list.DMs {
				if d.Status == DMFailed {
					failed = d
					return true
				}
			}
			return false
		})
		if !strings.Contains(failed.LastError, "chat not found") || failed.ChatID != "6003" {
			t.Fatalf("failed call %+v", failed)
		}
		if _, err := e.tgBot().Send(telego.User{ID: 6003, FirstName: "Карина"}, "привет"); err != nil {
			t.Fatal(err)
		}
		// The bot hears from her: she can be reached again.
		e.waitMessage(6003, "Я понимаю команды")
		redrive := fmt.Sprintf("%s/admin/api/queues/%s/dlq/%s/redrive", e.srv.URL, DMQueue, failed.MessageID)
		resp, err := http.Post(redrive, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("redrive: %d", resp.StatusCode)
		}
		e.waitMessage(6003, "Кошелёк EQcarol подключён")
		resp, err = http.Post(redrive, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("redriving a sent call: %d, want 404 (it is no dead letter any more)", resp.StatusCode)
		}
		if n := e.countBotMessages(6003, "Кошелёк EQcarol подключён"); n != 1 {
			t.Fatalf("%d prompts after the second redrive, want 1", n)
		}
	})
}

// flakyBackend proxies to the backend but answers 503 to the first n calls
// of path.
func flakyBackend(t *testing.T, backend, path string, n int32) *httptest.Server {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var failed atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path && failed.Add(1) <= n {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"try later"}}`))
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestConversation(t *testing.T) {
	t.Parallel()
	alice := telego.User{ID: 6001, FirstName: "Алиса"}
	ctx := context.Background()

	t.Run("an unknown referral code is said so and the user is at stage 1", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		if _, err := e.tgBot().Start(alice, "nobody"); err != nil {
			t.Fatal(err)
		}
		m := e.waitMessage(6001, "Не нашли приглашение с кодом «nobody»")
		if !hasButton(m, cbIntro) {
			t.Fatalf("buttons %+v", m.Buttons)
		}
		e.waitStage("6001", StageStarted)
		if f := e.funnel("6001"); f.LeaderUID != nil || f.Stage != StageStarted {
			t.Fatalf("funnel %+v", f)
		}
	})

	t.Run("the intro and wallet steps raise the stage; a later, lower step never lowers it", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		e.createUser("lead", "Лидия", "")
		if _, err := e.tgBot().Start(alice, "lead"); err != nil {
			t.Fatal(err)
		}
		g := e.waitMessage(6001, "Вас пригласил(а) Лидия")
		if _, err := e.tgBot().Press(alice, g.ID, cbIntro); err != nil {
			t.Fatal(err)
		}
		intro := e.waitMessage(6001, "Как это устроено:")
		e.waitStage("6001", StageIntroduced)
		acc := e.createUser("alice", "Алиса", "")
		link, _ := e.be.MintConnectLink(ctx, acc.UID)
		if _, err := e.tgBot().Start(alice, link.StartParam); err != nil {
			t.Fatal(err)
		}
		linked := e.waitMessage(6001, "Аккаунт найден")
		if _, err := e.tgBot().Press(alice, linked.ID, cbWallet); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "раздел «Кошелёк»")
		e.waitStage("6001", StageWalletRequested)
		if _, err := e.tgBot().Press(alice, intro.ID, cbSignup); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "Ваш код приглашения: lead")
		e.waitDB("the sign-up press handled", func() bool {
			return e.count(`select count(*) from bot_updates where status = 'done'`) == 5
		})
		if f := e.funnel("6001"); f.Stage != StageWalletRequested || f.BindState != BindAwaiting || f.UID == nil || *f.UID != acc.UID {
			t.Fatalf("funnel %+v", f)
		}
	})

	t.Run("declining the prompt removes its keyboard and records the answer", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		acc := e.createUser("alice", "Алиса", "")
		link, _ := e.be.MintConnectLink(ctx, acc.UID)
		if _, err := e.tgBot().Start(alice, link.StartParam); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "Аккаунт найден")
		if _, err := e.be.ConnectWallet(ctx, acc.UID, "EQalice"); err != nil {
			t.Fatal(err)
		}
		prompt := e.waitMessage(6001, "подключён ✅")
		if _, err := e.tgBot().Press(alice, prompt.ID, cbNoBind+fmt.Sprint(acc.UID)); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "Понял, не привязываю")
		e.waitFake("the keyboard removed", func() bool {
			m, _ := e.botMessage(6001, "подключён ✅")
			return len(m.Buttons) == 0
		})
		e.waitDB("declined", func() bool { return e.funnel("6001").BindState == BindDeclined })
		if u, _ := e.be.GetUser(ctx, acc.UID); u.TelegramID != nil {
			t.Fatalf("bound after declining: %+v", u)
		}
	})

	t.Run("a stale confirm prompt is refused by the backend and said so", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		acc := e.createUser("alice", "Алиса", "")
		link, _ := e.be.MintConnectLink(ctx, acc.UID)
		if _, err := e.tgBot().Start(alice, link.StartParam); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "Аккаунт найден")
		if _, err := e.be.ConnectWallet(ctx, acc.UID, "EQalice"); err != nil {
			t.Fatal(err)
		}
		prompt := e.waitMessage(6001, "подключён ✅")
		// The account is linked to another Telegram user meanwhile: alice's
		// prompt no longer stands for a binding the backend waits for.
		link2, _ := e.be.MintConnectLink(ctx, acc.UID)
		if _, err := e.tgBot().Start(telego.User{ID: 6002, FirstName: "Борис"}, link2.StartParam); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6002, "Аккаунт найден")
		if _, err := e.tgBot().Press(alice, prompt.ID, cbBind+fmt.Sprint(acc.UID)); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "Эта привязка больше не ждёт подтверждения")
		if u, _ := e.be.GetUser(ctx, acc.UID); u.TelegramID != nil {
			t.Fatalf("bound by a stale prompt: %+v", u)
		}
		if f := e.funnel("6001"); f.BindState == BindBound {
			t.Fatalf("funnel says bound: %+v", f)
		}
	})

	t.Run("a Telegram id bound to one account cannot be linked to another", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		e.createUser("alice", "Алиса", "6001")
		other := e.createUser("other", "Олег", "")
		link, _ := e.be.MintConnectLink(ctx, other.UID)
		if _, err := e.tgBot().Start(alice, link.StartParam); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "Этот Telegram уже привязан к другому аккаунту")
	})

	t.Run("the console is gated by the binding and the confirmed registration", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		if _, err := e.tgBot().Send(alice, "/menu"); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "Кабинет откроется, когда этот Telegram будет привязан")
		acc := e.createUser("alice", "Алиса", "6001")
		if _, err := e.tgBot().Send(alice, "/menu"); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "регистрация ещё не подтверждена")
		if _, err := e.be.Register(ctx, acc.UID, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.tgBot().Send(alice, "/menu"); err != nil {
			t.Fatal(err)
		}
		m := e.waitMessage(6001, "📋 Личный кабинет")
		if !strings.Contains(m.Text, "Кошелёк: не подключён") || !strings.Contains(m.Text, "?start=alice") {
			t.Fatalf("console:\n%s", m.Text)
		}
	})

	t.Run("a backend that answers 503 delays the reply, which then comes once", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		flaky := flakyBackend(t, e.srv.URL, "/bot/leader/resolve", 2)
		e.run(e.newBot(e.db, func(o *Opts) { o.BackendURL = flaky.URL }))
		e.createUser("lead", "Лидия", "")
		if _, err := e.tgBot().Start(alice, "lead"); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "Вас пригласил(а) Лидия")
		var attempts int
		if err := e.db.Read.QueryRow(`select attempts from bot_updates`).Scan(&attempts); err != nil {
			t.Fatal(err)
		}
		if attempts != 3 || e.countBotMessages(6001, "Вас пригласил") != 1 {
			t.Fatalf("%d attempts, %d greetings; want 3 and 1", attempts, e.countBotMessages(6001, "Вас пригласил"))
		}
	})

	t.Run("blocking and unblocking the bot is remembered", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		if _, err := e.tgBot().Send(alice, "/help"); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(6001, "/menu — личный кабинет")
		if err := e.tgBot().Block(alice); err != nil {
			t.Fatal(err)
		}
		e.waitDB("unreachable", func() bool { return e.count(`select count(*) from bot_unreachable`) == 1 })
		if err := e.tgBot().Unblock(alice); err != nil {
			t.Fatal(err)
		}
		e.waitDB("reachable again", func() bool { return e.count(`select count(*) from bot_unreachable`) == 0 })
	})
}

func TestNewOnboardingConfig(t *testing.T) {
	t.Parallel()
	e := newOnbEnv(t)
	cases := []struct {
		name   string
		change func(*Opts)
		want   string
	}{
		{"refuses a missing token", func(o *Opts) { o.TelegramToken = "" }, "BOT_TELEGRAM_TOKEN is required"},
		{"refuses a malformed token", func(o *Opts) { o.TelegramToken = "nope" }, "not a bot token"},
		{"refuses an unknown update mode", func(o *Opts) { o.Updates = "push" }, "must be longpoll or webhook"},
		{"refuses webhook mode without a secret", func(o *Opts) { o.Updates, o.WebhookSecret = UpdatesWebhook, "" }, "need BOT_TELEGRAM_WEBHOOK_SECRET"},
		{"refuses a secret Telegram would not accept", func(o *Opts) { o.WebhookSecret = "has space" }, "must be 1 to 256"},
		{"refuses a missing backend", func(o *Opts) { o.BackendURL = "" }, "backend's URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := e.opts(e.db)
			tc.change(&o)
			_, err := New(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if strings.Contains(fmt.Sprint(err), fakebotTokenSecret()) {
				t.Fatal("the error shows the token")
			}
		})
	}
}

// fakebotTokenSecret is the secret half of the test bot's token.
func fakebotTokenSecret() string {
	_, secret, _ := strings.Cut(fakebot.Token(onboardingTestBotID), ":")
	return secret
}

func TestStoredUpdatesRoundTrip(t *testing.T) {
	t.Parallel()
	t.Run("an update encoded for storage decodes to the same callback and chat member", func(t *testing.T) {
		t.Parallel()
		msg := &telego.Message{MessageID: 9, Chat: telego.Chat{ID: 6001, Type: "private"}, Date: 1, Text: "x"}
		in := telego.Update{UpdateID: 3, CallbackQuery: &telego.CallbackQuery{ID: "q", From: telego.User{ID: 6001, FirstName: "A"},
			Message: msg, Data: "bind:5", ChatInstance: "c"}}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out telego.Update
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&out); err != nil {
			t.Fatal(err)
		}
		if out.CallbackQuery == nil || out.CallbackQuery.Data != "bind:5" || out.CallbackQuery.Message == nil ||
			out.CallbackQuery.Message.GetMessageID() != 9 || out.CallbackQuery.Message.GetChat().ID != 6001 {
			t.Fatalf("decoded %+v", out.CallbackQuery)
		}
		chat, kind := describeUpdate(out)
		if chat != "6001" || kind != "callback_query" {
			t.Fatalf("described as %s %s", chat, kind)
		}
	})
}

func TestSandboxMount(t *testing.T) {
	t.Parallel()
	t.Run("works against a fake Bot API mounted inside the app under a base path", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		fake := fakebot.New(fakebot.Opts{BasePath: "/sandbox/telegram"})
		t.Cleanup(fake.Close)
		e.router.PathPrefix("/sandbox/telegram/").Handler(fake)
		b := e.newBot(e.db, func(o *Opts) { o.TelegramAPIURL = e.srv.URL + "/sandbox/telegram" })
		e.run(b)
		tgb := fake.Bot(fakebot.Token(onboardingTestBotID))
		if _, err := tgb.Start(telego.User{ID: 6001, FirstName: "Алиса"}, ""); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err := fake.WaitUntil(ctx, func() bool {
			c, ok := tgb.Chat(6001)
			return ok && len(c.Messages) == 2 && strings.Contains(c.Messages[1].Text, "Здравствуйте, Алиса!")
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
