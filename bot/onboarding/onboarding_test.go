package onboarding

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/mymmrac/telego"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

// onboardingTestBotID is the onboarding bot's id at the fake Bot API.
const onboardingTestBotID = 777

const testWebhookSecret = "webhook-secret_0123456789"

// onbEnv is the whole bot contract over real HTTP: a Backend on a migrated
// database served like the web package mounts it, the fake Bot API, and
// onboarding bots that reach both only over HTTP.
type onbEnv struct {
	t       testing.TB
	db      *store.DB
	clock   *store.ManualClock // nil on the system clock
	be      *backend.Service
	router  *mux.Router
	srv     *httptest.Server
	fake    *fakebot.Server
	fakeURL string
	logs    *testwait.Buffer
}

type onbEnvOpts struct {
	manualClock bool
	// fakeLimits, when set, makes the fake Bot API enforce them (429
	// beyond), forgiving fakeSlack of timing jitter (100 ms when zero).
	fakeLimits *telegram.Limits
	fakeSlack  time.Duration
}

func newOnbEnv(t testing.TB, opts ...func(*onbEnvOpts)) *onbEnv {
	t.Helper()
	var o onbEnvOpts
	for _, f := range opts {
		f(&o)
	}
	e := &onbEnv{t: t, logs: &testwait.Buffer{}}
	if o.manualClock {
		e.db, e.clock = storetest.NewWithClock(t)
	} else {
		e.db = storetest.New(t)
	}
	e.be = backend.New(backend.Opts{DB: e.db, Secret: backendTestSecret, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(e.logs, nil)), BotUsername: "test_onboarding_bot"})
	e.router = mux.NewRouter()
	e.be.Routes(e.router)
	e.be.AdminRoutes(e.router.PathPrefix("/admin/api").Subrouter())
	e.srv = httptest.NewServer(e.router)
	t.Cleanup(e.srv.Close)
	t.Cleanup(e.be.Shutdown) // runs first: ends the long-polls
	e.fake = fakebot.New(fakebot.Opts{WebhookRetryMin: 20 * time.Millisecond, WebhookRetryMax: 200 * time.Millisecond,
		Limits: o.fakeLimits, LimitSlack: o.fakeSlack, MaxCalls: 100_000})
	fs := httptest.NewServer(e.fake)
	t.Cleanup(fs.Close)
	t.Cleanup(e.fake.Close)
	e.fakeURL = fs.URL
	return e
}

// tgBot is the fake's handle on the onboarding bot, through which the test
// acts as Telegram users.
func (e *onbEnv) tgBot() *fakebot.Bot { return e.fake.Bot(fakebot.Token(onboardingTestBotID)) }

// opts are the options of an onboarding bot on e, on database db.
func (e *onbEnv) opts(db *store.DB) Opts {
	return Opts{
		DB:              db,
		Logger:          slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		BackendURL:      e.srv.URL,
		BackendSecret:   backendTestSecret,
		TelegramToken:   fakebot.Token(onboardingTestBotID),
		TelegramAPIURL:  e.fakeURL,
		TelegramTimeout: 5 * time.Second,
		Limits:          telegram.Limits{Chat: telegram.Limit{Rate: 1000, Burst: 10}, Bot: telegram.Limit{Rate: 10000, Burst: 100}},
		LongPollWait:    2 * time.Second,
		CabinetURL:      "https://cabinet.example/signup",
	}
}

// newBot builds an onboarding bot; change adjusts its options.
func (e *onbEnv) newBot(db *store.DB, change ...func(*Opts)) *Bot {
	e.t.Helper()
	o := e.opts(db)
	for _, f := range change {
		f(&o)
	}
	b, err := New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// running is an onboarding bot whose Run goes on in the background.
type running struct {
	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	waited bool
}

// start starts b.Run; the test's end stops it if the test did not.
func (e *onbEnv) start(b *Bot) *running {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: e.t, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- b.Run(ctx) }()
	e.t.Cleanup(r.stop)
	return r
}

// wait checks that Run returns, without error, within 20 s.
func (r *running) wait() {
	if r.waited {
		return
	}
	r.waited = true
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("Run returned %v", err)
		}
	case <-time.After(20 * time.Second):
		r.t.Errorf("Run did not return within 20 s of its context ending")
	}
}

// stop cancels Run and waits for it.
func (r *running) stop() {
	r.cancel()
	r.wait()
}

// run starts b and returns its stop function.
func (e *onbEnv) run(b *Bot) (stop func()) { return e.start(b).stop }

// waitFake waits, up to 15 s, until cond holds, re-checking on every change
// of the fake Bot API.
func (e *onbEnv) waitFake(what string, cond func() bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := e.fake.WaitUntil(ctx, cond); err != nil {
		e.t.Fatalf("waiting for %s: %v\nlogs:\n%s", what, err, tail(e.logs.String(), 40))
	}
}

// waitDB polls cond (a database check) until it holds, up to 15 s.
func (e *onbEnv) waitDB(what string, cond func() bool) {
	e.t.Helper()
	testwait.Until(e.t, 15*time.Second, what, cond, func() string { return "logs:\n" + tail(e.logs.String(), 40) })
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// messages returns the bot's messages in chat id, as the user sees them.
func (e *onbEnv) messages(id int64) []fakebot.MessageView {
	c, ok := e.tgBot().Chat(id)
	if !ok {
		return nil
	}
	var out []fakebot.MessageView
	for _, m := range c.Messages {
		if m.Sender == fakebot.SenderBot {
			out = append(out, m)
		}
	}
	return out
}

// botMessage returns the newest bot message in chat id containing text.
func (e *onbEnv) botMessage(id int64, text string) (fakebot.MessageView, bool) {
	msgs := e.messages(id)
	for i := len(msgs) - 1; i >= 0; i-- {
		if strings.Contains(msgs[i].Text, text) {
			return msgs[i], true
		}
	}
	return fakebot.MessageView{}, false
}

// countBotMessages counts the bot messages in chat id containing text.
func (e *onbEnv) countBotMessages(id int64, text string) int {
	n := 0
	for _, m := range e.messages(id) {
		if strings.Contains(m.Text, text) {
			n++
		}
	}
	return n
}

func (e *onbEnv) waitMessage(id int64, text string) fakebot.MessageView {
	e.t.Helper()
	var m fakebot.MessageView
	e.waitFake(fmt.Sprintf("a message %q in chat %d", text, id), func() bool {
		var ok bool
		m, ok = e.botMessage(id, text)
		return ok
	})
	return m
}

func (e *onbEnv) funnel(tg contract.TelegramID) Funnel {
	e.t.Helper()
	f, err := loadFunnel(context.Background(), e.db.Read, tg, "")
	if err != nil && !errors.Is(err, ErrFunnelNotFound) {
		e.t.Fatal(err)
	}
	return f
}

func (e *onbEnv) waitStage(tg contract.TelegramID, s Stage) {
	e.t.Helper()
	e.waitDB(fmt.Sprintf("user %s at stage %s", tg, s), func() bool { return e.funnel(tg).Stage >= s })
}

func (e *onbEnv) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.db.Read.QueryRow(q, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// unprocessed counts outbox events not processed yet.
func (e *onbEnv) unprocessed() int {
	return e.count(`select count(*) from bot_event_outbox where processed_at is null`)
}

// dmQueue is DMQueue's statistics, as the Queues page reads them.
func (e *onbEnv) dmQueue() queue.QueueStats { return dmQueueOn(e.t, e.db) }

// dmQueueOn is DMQueue's statistics on db.
func dmQueueOn(t testing.TB, db *store.DB) queue.QueueStats {
	t.Helper()
	st, err := queue.NewAdmin(queue.AdminOpts{DB: db}).Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range st.Queues {
		if q.Name == DMQueue {
			return q
		}
	}
	return queue.QueueStats{Name: DMQueue}
}

// unfinished counts the DMs not finished yet: DMQueue's live messages.
func (e *onbEnv) unfinished() int {
	q := e.dmQueue()
	return int(q.Ready + q.Delayed + q.Held + q.InFlight)
}

// dms counts the DMs recorded, in any state: DMQueue's messages, live or
// dead, and the deliveries.
func (e *onbEnv) dms() int {
	return e.unfinished() + int(e.dmQueue().Dead) + e.count(`select count(*) from bot_deliveries`)
}

func (e *onbEnv) createUser(link, name string, tg contract.TelegramID) backend.User {
	e.t.Helper()
	u, err := e.be.CreateUser(context.Background(), backend.NewUser{Link: link, Name: name, TelegramID: tg})
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func hasButton(m fakebot.MessageView, data string) bool {
	for _, row := range m.Buttons {
		for _, b := range row {
			if b.CallbackData == data {
				return true
			}
		}
	}
	return false
}

func TestOnboardingEndToEnd(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{UpdatesLongPoll, UpdatesWebhook} {
		t.Run("a referred user goes from /start to stage 9 and the leader hears of them once, over "+mode, func(t *testing.T) {
			t.Parallel()
			e := newOnbEnv(t)
			ob := e.newBot(e.db, func(o *Opts) {
				o.Updates, o.WebhookSecret = mode, testWebhookSecret
				if mode == UpdatesWebhook {
					o.WebhookURL = e.srv.URL + "/webhooks/bot"
				}
			})
			ob.Routes(e.router)
			ob.AdminRoutes(e.router.PathPrefix("/admin/api").Subrouter())
			e.run(ob)
			ctx := context.Background()
			tgb := e.tgBot()

			leader := e.createUser("lead-code", "Лидия", "5001")
			leaderTG := telego.User{ID: 5001, FirstName: "Лидия"}
			if _, err := tgb.Start(leaderTG, ""); err != nil {
				t.Fatal(err)
			}
			e.waitMessage(5001, "регистрация ещё не подтверждена")

			alice := telego.User{ID: 6001, FirstName: "Алиса"}
			if _, err := tgb.Start(alice, "lead-code"); err != nil {
				t.Fatal(err)
			}
			greeting := e.waitMessage(6001, "Вас пригласил(а) Лидия")
			if !hasButton(greeting, cbIntro) || !hasButton(greeting, cbSignup) {
				t.Fatalf("greeting buttons %+v", greeting.Buttons)
			}
			e.waitStage("6001", StageLeaderResolved)
			if f := e.funnel("6001"); f.LeaderUID == nil || *f.LeaderUID != leader.UID || f.LeaderCode != "lead-code" {
				t.Fatalf("arrival leader %+v", f)
			}

			if _, err := tgb.Press(alice, greeting.ID, cbSignup); err != nil {
				t.Fatal(err)
			}
			signup := e.waitMessage(6001, "Ваш код приглашения: lead-code")
			if len(signup.Buttons) != 1 || signup.Buttons[0][0].URL != "https://cabinet.example/signup?ref=lead-code" {
				t.Fatalf("sign-up message %+v", signup)
			}
			e.waitStage("6001", StageSignupRequested)

			acc := e.createUser("alice", "Алиса", "")
			link, err := e.be.MintConnectLink(ctx, acc.UID)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tgb.Start(alice, link.StartParam); err != nil {
				t.Fatal(err)
			}
			e.waitMessage(6001, "Аккаунт найден")
			e.waitStage("6001", StageAccountLinked)
			if u, _ := e.be.GetUser(ctx, acc.UID); u.PreviewTelegramID == nil || *u.PreviewTelegramID != "6001" {
				t.Fatalf("preview telegram id after /start with the connect token: %+v", u)
			}

			if _, err := e.be.ConnectWallet(ctx, acc.UID, "EQabcdef0123456789xyz"); err != nil {
				t.Fatal(err)
			}
			prompt := e.waitMessage(6001, "Кошелёк EQabcd…9xyz подключён")
			bind := cbBind + fmt.Sprint(acc.UID)
			if !hasButton(prompt, bind) {
				t.Fatalf("confirm prompt without %q: %+v", bind, prompt.Buttons)
			}
			e.waitStage("6001", StageWalletConnected)
			if f := e.funnel("6001"); f.BindState != BindPrompted {
				t.Fatalf("bind state after the prompt: %s", f.BindState)
			}

			if _, err := tgb.Press(alice, prompt.ID, bind); err != nil {
				t.Fatal(err)
			}
			e.waitMessage(6001, "Telegram привязан к вашему аккаунту")
			if u, _ := e.be.GetUser(ctx, acc.UID); u.TelegramID == nil || *u.TelegramID != "6001" {
				t.Fatalf("backend telegram id after confirming: %+v", u)
			}
			e.waitFake("the prompt's keyboard removed and the press answered", func() bool {
				m, _ := e.botMessage(6001, "подключён ✅")
				return len(m.Buttons) == 0 && len(m.CallbackAnswers) == 1 && m.CallbackAnswers[0] == "Telegram привязан ✅"
			})
			e.waitDB("bind state bound", func() bool { return e.funnel("6001").BindState == BindBound })

			if _, err := e.be.Register(ctx, acc.UID, &leader.UID); err != nil {
				t.Fatal(err)
			}
			e.waitStage("6001", StageRegistered)
			e.waitMessage(5001, "Новый партнёр в вашей структуре: Алиса")

			if _, err := e.be.ActivateNFT(ctx, acc.UID, contract.NftLP1); err != nil {
				t.Fatal(err)
			}
			e.waitStage("6001", StageNftActivated)

			if _, err := tgb.Send(alice, "/menu"); err != nil {
				t.Fatal(err)
			}
			console := e.waitMessage(6001, "Личный кабинет")
			for _, want := range []string{"Этап: статусный NFT активирован", "LP1 ✅", "https://t.me/fake777_bot?start=alice"} {
				if !strings.Contains(console.Text, want) {
					t.Fatalf("console lacks %q:\n%s", want, console.Text)
				}
			}

			e.waitDB("every event acked and every call made", func() bool { return e.unprocessed() == 0 && e.unfinished() == 0 })
			if n := e.countBotMessages(5001, "Новый партнёр"); n != 1 {
				t.Fatalf("the leader got %d «Новый партнёр» messages, want 1", n)
			}
			if n := e.countBotMessages(6001, "подключён ✅"); n != 1 {
				t.Fatalf("alice got %d confirm prompts, want 1 (registered comes after the binding)", n)
			}
			f := e.funnel("6001")
			if f.LeftLeaderAt != nil || f.RegisteredLeaderUID == nil || *f.RegisteredLeaderUID != leader.UID || f.UID == nil || *f.UID != acc.UID {
				t.Fatalf("final funnel %+v", f)
			}
			var fr FunnelResponse
			e.adminGet(t, "/admin/api/bot/funnel/6001", &fr)
			var stages []string
			for _, h := range fr.History {
				if h.Change == "stage" {
					stages = append(stages, *h.NewValue)
				}
			}
			want := "leader_resolved signup_requested account_linked wallet_connected registered nft_activated"
			if strings.Join(stages, " ") != want {
				t.Fatalf("stage history %v, want %s", stages, want)
			}
		})
	}

	t.Run("a leader who blocked the bot gets a web notification instead of the DM", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		ctx := context.Background()
		tgb := e.tgBot()
		leader := e.createUser("lead-code", "Лидия", "5001")
		leaderTG := telego.User{ID: 5001, FirstName: "Лидия"}
		if _, err := tgb.Start(leaderTG, ""); err != nil {
			t.Fatal(err)
		}
		e.waitMessage(5001, "регистрация ещё не подтверждена")
		if err := tgb.Block(leaderTG); err != nil {
			t.Fatal(err)
		}
		partner := e.createUser("bob", "Борис", "6002")
		if _, err := e.be.Register(ctx, partner.UID, &leader.UID); err != nil {
			t.Fatal(err)
		}
		var notes []contract.Notification
		e.waitDB("a web notification for the leader", func() bool {
			var err error
			notes, err = e.be.ListNotifications(ctx, leader.UID)
			return err == nil && len(notes) > 0
		})
		if len(notes) != 1 || notes[0].Kind != "new_partner" || !strings.Contains(notes[0].Text, "Новый партнёр в вашей структуре: Борис") ||
			notes[0].DedupKey == nil || !strings.HasPrefix(*notes[0].DedupKey, "bot-event:") {
			t.Fatalf("notifications %+v", notes)
		}
		e.waitDB("every event acked and every call made", func() bool { return e.unprocessed() == 0 && e.unfinished() == 0 })
		if n := e.countBotMessages(5001, "Новый партнёр"); n != 0 {
			t.Fatalf("a blocked leader got %d DMs", n)
		}
		if e.count(`select count(*) from bot_unreachable where telegram_id = '5001'`) != 1 {
			t.Fatal("the blocked leader is not remembered as unreachable")
		}
		if e.count(`select count(*) from bot_deliveries where outcome = 'notified'`) != 1 {
			t.Fatal("the DM's record does not say the fallback delivered it")
		}
	})

	t.Run("a leader without Telegram gets the web notification, with no DM tried", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		e.run(e.newBot(e.db))
		ctx := context.Background()
		leader := e.createUser("web-lead", "Вера", "")
		partner := e.createUser("bob", "Борис", "6002")
		if _, err := e.be.Register(ctx, partner.UID, &leader.UID); err != nil {
			t.Fatal(err)
		}
		var notes []contract.Notification
		e.waitDB("a web notification for the leader", func() bool {
			var err error
			notes, err = e.be.ListNotifications(ctx, leader.UID)
			return err == nil && len(notes) > 0
		})
		if len(notes) != 1 || notes[0].Kind != "new_partner" || !strings.Contains(notes[0].Text, "Новый партнёр в вашей структуре: Борис") {
			t.Fatalf("notifications %+v", notes)
		}
		e.waitDB("every event acked and every call made", func() bool { return e.unprocessed() == 0 && e.unfinished() == 0 })
		if n := e.count(`select count(*) from bot_deliveries where outcome = 'notified'`); n != 1 {
			t.Fatalf("%d notified deliveries, want the one fallback", n)
		}
	})
}

// adminGet reads an admin route of the env's router.
func (e *onbEnv) adminGet(t testing.TB, path string, out any) {
	t.Helper()
	resp, err := http.Get(e.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}
