package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/mymmrac/telego"

	"switchyard/bot/backend"
	"switchyard/bot/onboarding"
	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
	"switchyard/web"
)

// The onboarding bot's DMs are messages of the queue onboarding.dm: one
// Telegram refused is a dead letter on the Queues page and on the Bot page,
// and redriving it from the Bot page delivers it through the queue.
func TestOnboardingDMsOnTheQueuesPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDMConsole(t, 4343)
	c, be, fake, token := d.c, d.be, d.fake, d.token

	// Carol never started the bot: the DM her wallet asks for is refused.
	u, err := be.CreateUser(ctx, backend.NewUser{Link: "carol", Name: "Carol", TelegramID: "6003"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := be.ConnectWallet(ctx, u.UID, "EQcarol"); err != nil {
		t.Fatal(err)
	}
	row := "queue-" + onboarding.DMQueue
	testwait.Until(t, 10*time.Second, "the refused DM dead on the Queues page", func() bool {
		return trimmed(tid(c.get(t, "/admin/queues", http.StatusOK), row).Find(`[data-testid="dead"]`)) == "1"
	})
	doc := c.get(t, "/admin/bot", http.StatusOK)
	dm := tid(doc, "outgoing-table").Find("tbody tr")
	if dm.Length() != 1 || !strings.Contains(trimmed(dm), "tg 6003") || !strings.Contains(trimmed(dm), "chat not found") {
		t.Fatalf("failed DMs on the Bot page: %q", trimmed(dm))
	}
	id := strings.TrimPrefix(dm.AttrOr("data-testid", ""), "outgoing-")
	action := "/admin/bot/dms/" + id + "/redrive"
	if got := dm.Find("form").AttrOr("action", ""); got != action {
		t.Fatalf("the failed DM's Send again posts to %q, want the bot's redrive %q", got, action)
	}

	// She starts the bot; the operator sends the DM again from the Bot page.
	if _, err := fake.Bot(token).Send(telego.User{ID: 6003, FirstName: "Carol"}, "привет"); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the bot's answer to her", func() bool { return botSaid(fake, token, 6003, "Я понимаю команды") })
	landed, flash := c.act(t, action, url.Values{"back": {"/admin/bot"}})
	if landed != "/admin/bot" || !strings.Contains(trimmed(flash), "sent again") {
		t.Fatalf("redrive landed on %s: %q", landed, trimmed(flash))
	}
	testwait.Until(t, 10*time.Second, "the redriven DM delivered", func() bool { return botSaid(fake, token, 6003, "Кошелёк EQcarol подключён") })
	testwait.Until(t, 10*time.Second, "onboarding.dm empty", func() bool {
		q := tid(c.get(t, "/admin/queues", http.StatusOK), row)
		return trimmed(q.Find(`[data-testid="dead"]`)) == "0" && trimmed(q.Find(`[data-testid="depth"]`)) == "0"
	})
}

// botSaid reports whether the bot sent chat a message containing text.
func botSaid(fake *fakebot.Server, token string, chat int64, text string) bool {
	c, ok := fake.Bot(token).Chat(chat)
	if !ok {
		return false
	}
	for _, m := range c.Messages {
		if m.Sender == fakebot.SenderBot && strings.Contains(m.Text, text) {
			return true
		}
	}
	return false
}

// dmConsole is a console over a bot backend and an onboarding bot that
// sends its DMs to a fake Bot API, the bot running.
type dmConsole struct {
	c     *console
	be    *backend.Service
	qa    *queue.Admin
	fake  *fakebot.Server
	token string
}

func newDMConsole(t *testing.T, botID int64) dmConsole {
	t.Helper()
	db := storetest.New(t)
	fake := fakebot.New(fakebot.Opts{})
	fakeSrv := httptest.NewServer(fake)
	t.Cleanup(func() { fakeSrv.Close(); fake.Close() })
	const secret = "s3cret-shared-with-the-bot-0123456789"
	be := backend.New(backend.Opts{DB: db, Secret: secret, BotUsername: "console_test_bot", PollInterval: 20 * time.Millisecond})
	r := mux.NewRouter()
	be.Routes(r)
	beSrv := httptest.NewServer(r)
	t.Cleanup(beSrv.Close)
	t.Cleanup(be.Shutdown) // runs first: ends the long polls
	token := fakebot.Token(botID)
	ob, err := onboarding.New(onboarding.Opts{DB: db, BackendURL: beSrv.URL, BackendSecret: secret,
		TelegramToken: token, TelegramAPIURL: fakeSrv.URL, CabinetURL: "https://cabinet.example/signup",
		PollInterval: 20 * time.Millisecond, SenderPollInterval: 20 * time.Millisecond, LongPollWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runWorker(t, ob.Run)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	c := newConsole(t, web.Options{DB: db, Queues: qa, Outbox: be.Outbox(), Funnel: onboarding.NewStats(db), Onboarding: ob})
	return dmConsole{c: c, be: be, qa: qa, fake: fake, token: token}
}
