package omni

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/store"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

// openProcessDB opens the database file as a separate process would: its
// own connections, its own group-commit writer, its own in-process queue
// wake-ups (so the roles find each other's work only through the file).
func openProcessDB(t *testing.T, path string) *store.DB {
	t.Helper()
	db, err := store.Open(context.Background(), store.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db
}

func TestRolesAsThreeProcesses(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "switchyard.db")
	fake, fakeURL := newFakeBotAPI(t, fakebot.Opts{})

	// Process 1: inbound, serving the webhook.
	inboundDB := openProcessDB(t, path)
	in := NewInbound(InboundOpts{DB: inboundDB, Token: inboxToken, WebhookSecret: testSecret})
	inboundURL := serve(t, in.Routes)

	// Process 2: chat, with the admin API.
	chatDB := openProcessDB(t, path)
	runWorker(t, NewChat(ChatOpts{DB: chatDB, DisableAutoAck: true, PollInterval: 50 * time.Millisecond}))
	admin := &platform{db: chatDB, base: serve(t, adminRoutes(NewAdmin(AdminOpts{DB: chatDB})))}

	// Process 3: outbound.
	outboundDB := openProcessDB(t, path)
	runWorker(t, NewOutbound(OutboundOpts{DB: outboundDB, Token: inboxToken, APIURL: fakeURL, PollInterval: 50 * time.Millisecond}))

	bot, err := telegram.NewBot(inboxToken, fakeURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetWebhook(context.Background(), bot, inboundURL); err != nil {
		t.Fatal(err)
	}
	fb := fake.Bot(inboxToken)
	conn, err := fb.ConnectBusiness(telego.User{ID: 900, FirstName: "Shop"}, telego.BusinessBotRights{CanReply: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fb.BusinessMessage(conn.ID, telego.User{ID: 55, FirstName: "Bob"}, "is the shop open?"); err != nil {
		t.Fatal(err)
	}

	var list struct {
		Threads []Thread `json:"threads"`
	}
	testwait.Until(t, 10*time.Second, "", func() bool {
		return admin.api(t, http.MethodGet, "/omni/threads", nil, &list) == http.StatusOK && len(list.Threads) == 1 && list.Threads[0].Unread == 1
	}, func() string { return fmt.Sprintf("threads = %+v", list.Threads) })

	id := admin.reply(t, list.Threads[0].ID, "yes, until 18:00")
	admin.waitStatus(t, id, StatusSent, 10*time.Second)
	calls := fake.CallsTo("sendMessage")
	if len(calls) != 1 || !calls[0].OK || calls[0].Params["business_connection_id"] != conn.ID || calls[0].Params["text"] != "yes, until 18:00" {
		t.Fatalf("sendMessage calls = %+v", calls)
	}
	// Each role kept to its own tables: the inbound process never wrote
	// chat state, and only the outbound process called Telegram.
	if n := len(fake.CallsTo("setWebhook")); n != 1 {
		t.Errorf("setWebhook calls = %d", n)
	}
}
