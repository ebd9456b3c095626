package omni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	"golang.org/x/time/rate"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

// platform is the three roles and the admin API on one database, wired to a
// fake Bot API that delivers the inbox bot's updates to the webhook.
type platform struct {
	db    *store.DB
	fake  *fakebot.Server
	bot   *fakebot.Bot
	base  string // the app's HTTP server: webhook and admin API
	admin *Admin
	out   *Outbound
	// apiURL is the fake Bot API's; stopOut stops out.
	apiURL  string
	stopOut func()
}

type platformOpts struct {
	fake     fakebot.Opts
	outbound OutboundOpts
	chat     ChatOpts
}

// fastLimits keep the tests quick; the benchmark runs Telegram's own.
var fastLimits = telegram.Limits{
	Chat:  telegram.Limit{Rate: 200, Burst: 1},
	Group: telegram.Limit{Rate: 200, Burst: 1},
	Bot:   telegram.Limit{Rate: rate.Inf, Burst: 1},
}

func newPlatform(t testing.TB, o platformOpts) *platform {
	t.Helper()
	fake, fakeURL := newFakeBotAPI(t, o.fake)
	db := storetest.New(t)
	p := &platform{db: db, fake: fake, bot: fake.Bot(inboxToken), admin: NewAdmin(AdminOpts{DB: db}), apiURL: fakeURL}

	in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
	o.chat.DB = db
	o.chat.DisableAutoAck = o.chat.AutoAckText == ""
	if o.chat.PollInterval == 0 {
		o.chat.PollInterval = 50 * time.Millisecond
	}
	chat := NewChat(o.chat)
	o.outbound.DB, o.outbound.Token, o.outbound.APIURL = db, inboxToken, fakeURL
	if o.outbound.Limits == (telegram.Limits{}) {
		o.outbound.Limits = fastLimits
	}
	if o.outbound.MinBackoff == 0 {
		o.outbound.MinBackoff = 10 * time.Millisecond
	}
	if o.outbound.PollInterval == 0 {
		o.outbound.PollInterval = 50 * time.Millisecond
	}
	p.out = NewOutbound(o.outbound)
	p.base = serve(t, serverSpans, in.Routes, adminRoutes(p.admin))

	bot, err := telegram.NewBot(inboxToken, fakeURL)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetWebhook(context.Background(), bot, p.base); err != nil {
		t.Fatal(err)
	}
	runWorker(t, chat)
	p.stopOut = runWorker(t, p.out)
	return p
}

// connect is a business account owner connecting the inbox bot.
func (p *platform) connect(t testing.TB, owner int64, canReply bool) telego.BusinessConnection {
	t.Helper()
	conn, err := p.bot.ConnectBusiness(telego.User{ID: owner, FirstName: "Owner"}, telego.BusinessBotRights{CanReply: canReply})
	if err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "", func() bool {
		c, err := connectionTx(context.Background(), p.db.Read, conn.ID)
		return err == nil && c != nil
	}, func() string { return "business connection " + conn.ID + " never stored" })
	return conn
}

// customerWrites is a customer writing to the business account; it returns
// the thread once the chat role stored the message.
func (p *platform) customerWrites(t testing.TB, conn string, customer int64, text string) ThreadID {
	t.Helper()
	if _, err := p.bot.BusinessMessage(conn, telego.User{ID: customer, FirstName: "Customer", LastName: strconv.FormatInt(customer, 10)}, text); err != nil {
		t.Fatal(err)
	}
	var id ThreadID
	testwait.Until(t, 10*time.Second, "", func() bool {
		err := p.db.Read.QueryRow(`select m.thread_id from omni_messages m join omni_threads t on t.id = m.thread_id
			where t.business_connection_id = ? and t.chat_id = ? and m.text = ?`, conn, strconv.FormatInt(customer, 10), text).Scan(&id)
		return err == nil
	}, func() string { return fmt.Sprintf("message %q of customer %d never stored", text, customer) })
	return id
}

// api calls the admin API and decodes the JSON answer into out (when not nil).
func (p *platform) api(t testing.TB, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, p.base+"/admin/api"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return res.StatusCode
}

// reply is an operator's reply through the admin API.
func (p *platform) reply(t testing.TB, thread ThreadID, text string) MessageID {
	t.Helper()
	var got struct {
		MessageID MessageID `json:"messageId"`
		Status    Status    `json:"status"`
	}
	if status := p.api(t, http.MethodPost, fmt.Sprintf("/omni/threads/%d/messages", thread), map[string]string{"text": text}, &got); status != http.StatusAccepted {
		t.Fatalf("reply: status %d, want 202", status)
	}
	if got.MessageID == 0 || got.Status != StatusQueued {
		t.Fatalf("reply answered %+v, want a message id and status queued", got)
	}
	return got.MessageID
}

func (p *platform) message(t testing.TB, id MessageID) OmniMessage {
	t.Helper()
	var m OmniMessage
	if status := p.api(t, http.MethodGet, fmt.Sprintf("/omni/messages/%d", id), nil, &m); status != http.StatusOK {
		t.Fatalf("get message %d: status %d", id, status)
	}
	return m
}

// waitStatus waits until message id is in status want.
func (p *platform) waitStatus(t testing.TB, id MessageID, want Status, timeout time.Duration) OmniMessage {
	t.Helper()
	var m OmniMessage
	testwait.Until(t, timeout, "", func() bool {
		m = p.message(t, id)
		return m.Status == want
	}, func() string {
		return fmt.Sprintf("message %d is %s (%s), want %s", id, m.Status, m.FailureReason, want)
	})
	return m
}

// sends returns the fake's successful sendMessage calls.
func (p *platform) sends() []fakebot.Call {
	var ok []fakebot.Call
	for _, c := range p.fake.CallsTo("sendMessage") {
		if c.OK {
			ok = append(ok, c)
		}
	}
	return ok
}
