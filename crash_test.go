package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/loadtest"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

// The crash suite starts the real binary, runs mixed load on all three flows,
// kills it with SIGKILL at a random moment, restarts it on the same file, five
// times; then lets it drain and checks from the outside that every request the
// server acknowledged took effect exactly once, in order.
func TestCrashSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the crash suite takes minutes; it runs without -short (and always in CI)")
	}
	t.Run("kill -9 under mixed load, five rounds", func(t *testing.T) {
		t.Parallel()
		crashRounds(t, nil)
	})
	t.Run("kill -9 under mixed load while Telegram fails at random", func(t *testing.T) {
		t.Parallel()
		crashRounds(t, []fakebot.Fault{
			{Kind: fakebot.FaultTooManyRequests, Method: "sendMessage", RetryAfter: time.Second, Probability: 0.1},
			{Kind: fakebot.FaultServerError, Method: "sendMessage", Probability: 0.1},
			{Kind: fakebot.FaultSlow, Method: "sendMessage", Delay: 300 * time.Millisecond, Probability: 0.1},
		})
	})
}

const (
	crashRoundsN  = 5
	crashUsers    = 20
	crashRate     = 150 // requests per second per path
	crashAdmin    = "crash-admin-token-0123456789abcdef"
	crashBotSec   = "crash-bot-secret-0123456789abcdef"
	crashOmniHook = "crash-omni-webhook-0123456789abcd"
	crashBotHook  = "crash-bot-webhook-0123456789abcde"
)

// accepted collects what the server acknowledged, per path.
type accepted struct {
	mu    sync.Mutex
	items map[loadtest.Path][]loadtest.Item
}

func (a *accepted) add(it loadtest.Item) {
	a.mu.Lock()
	a.items[it.Path] = append(a.items[it.Path], it)
	a.mu.Unlock()
}

func crashRounds(t *testing.T, faults []fakebot.Fault) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	fake := fakebot.New(fakebot.Opts{MaxCalls: 1_000_000, Seed: seed})
	tg := httptest.NewServer(fake)
	t.Cleanup(func() { tg.Close(); fake.Close() })
	botToken, omniToken := fakebot.Token(7100000001), fakebot.Token(7100000002)

	addr := freeAddr(t)
	base := "http://" + addr
	db := storetest.Source(t)
	env := []string{
		"SWITCHYARD_ADMIN_TOKEN=" + crashAdmin, "BOT_TO_BACKEND_SECRET=" + crashBotSec,
		"OMNI_WEBHOOK_SECRET=" + crashOmniHook, "BOT_TELEGRAM_WEBHOOK_SECRET=" + crashBotHook,
		"BOT_TELEGRAM_TOKEN=" + botToken, "OMNI_TELEGRAM_TOKEN=" + omniToken, "TELEGRAM_API_URL=" + tg.URL,
	}
	startAt := func() *process {
		p := startArgs(t, []string{"serve", "--db", db, "--addr", addr, "--log-format", "json", "--log-level", "warn"}, env)
		waitHealthy(t, base)
		return p
	}

	p := startAt()
	// The users outbox events name have started the bot, so it can DM them.
	bot := fake.Bot(botToken)
	for i := range crashUsers {
		id, _ := strconv.ParseInt(loadtest.OutboxTelegramID(int64(i)), 10, 64)
		if _, err := bot.Start(telego.User{ID: id, FirstName: "User", Username: fmt.Sprintf("crash_user_%d", i)}, ""); err != nil {
			t.Fatalf("start user %d: %v", i, err)
		}
	}
	for _, f := range faults {
		fake.AddFault(f)
	}

	acc := &accepted{items: map[loadtest.Path][]loadtest.Item{}}
	runBase := time.Now().Unix() % 100_000 * 100
	for round := range crashRoundsN {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := loadtest.Run(ctx, loadtest.Opts{
				BaseURL: base, AdminToken: crashAdmin, BotSecret: crashBotSec, WebhookSecret: crashOmniHook,
				Rate: crashRate, Duration: time.Minute, Concurrency: 8, Customers: 30, OutboxUsers: crashUsers,
				RunID: runBase + int64(round), OnAccepted: acc.add, Drain: time.Millisecond,
			})
			done <- err
		}()
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond) // a random moment
		if err := p.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		p.done <- <-p.done // wait for the exit; keep it for the cleanup
		cancel()
		<-done
		acc.mu.Lock()
		t.Logf("round %d: killed; acknowledged so far: webhook %d, outbox %d, topic %d", round+1,
			len(acc.items[loadtest.PathWebhook]), len(acc.items[loadtest.PathOutbox]), len(acc.items[loadtest.PathTopic]))
		acc.mu.Unlock()
		p = startAt()
	}
	fake.ClearFaults()

	// Drain: a send claimed when the process died is retried once its claim
	// (30 s) runs out, so allow for that.
	v := &verifier{t: t, base: base}
	testwait.Until(t, 50*time.Second, "drained", func() bool { return v.drained(acc) }, func() string { return v.lastWhy })
	v.checkWebhooks(acc.items[loadtest.PathWebhook])
	v.checkTopic(acc.items[loadtest.PathTopic])
	v.checkOutbox(acc.items[loadtest.PathOutbox], fake, faults != nil)
	p.stop(t)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// verifier reads the instance's state through its operators' API.
type verifier struct {
	t       *testing.T
	base    string
	lastWhy string
}

func (v *verifier) get(path string, out any) int {
	v.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, v.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+crashAdmin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		v.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			v.t.Fatalf("GET %s: decode: %v", path, err)
		}
	}
	return resp.StatusCode
}

// drained: every queue is empty, the referral group has no lag, and the
// bot's outbox and outgoing messages are all settled.
func (v *verifier) drained(acc *accepted) bool {
	var qs struct {
		Queues []struct {
			Name                           string
			Ready, InFlight, Delayed, Held int64
		} `json:"queues"`
	}
	v.get("/admin/api/queues", &qs)
	for _, q := range qs.Queues {
		if q.Ready+q.InFlight+q.Delayed+q.Held > 0 {
			v.lastWhy = fmt.Sprintf("queue %s not empty: %+v", q.Name, q)
			return false
		}
	}
	var tp struct {
		Topics []struct {
			Name   string
			Groups []struct {
				Group string
				Lag   int64
			}
		} `json:"topics"`
	}
	v.get("/admin/api/topics", &tp)
	for _, topic := range tp.Topics {
		for _, g := range topic.Groups {
			if g.Lag > 0 {
				v.lastWhy = fmt.Sprintf("group %s lags %d on %s", g.Group, g.Lag, topic.Name)
				return false
			}
		}
	}
	for _, state := range []string{"pending", "retrying"} {
		var ev struct{ Events []json.RawMessage }
		v.get("/admin/api/bot/events?state="+state, &ev)
		if len(ev.Events) > 0 {
			v.lastWhy = fmt.Sprintf("%d outbox events %s", len(ev.Events), state)
			return false
		}
	}
	// The DMs are messages of onboarding.dm (checked with every queue above);
	// the bot's own view of them must agree.
	for _, state := range []string{"pending", "retrying", "sending"} {
		var out struct{ DMs []json.RawMessage }
		if code := v.get("/admin/api/bot/dms?status="+state, &out); code != http.StatusOK {
			v.lastWhy = fmt.Sprintf("GET /admin/api/bot/dms?status=%s: %d", state, code)
			return false
		}
		if len(out.DMs) > 0 {
			v.lastWhy = fmt.Sprintf("%d outgoing DMs %s", len(out.DMs), state)
			return false
		}
	}
	return true
}

// checkWebhooks: every update answered 200 is stored once, and each
// customer's thread holds its messages in the order they were sent: an
// update acknowledged before another was sent is stored before it. (The load
// sends from 64 connections, so two updates of one customer may be in
// flight at once; those have no order between them, as with Telegram.)
func (v *verifier) checkWebhooks(items []loadtest.Item) {
	v.t.Helper()
	byKey := make(map[string]loadtest.Item, len(items))
	for _, it := range items {
		byKey[it.Key] = it
	}
	var th struct {
		Threads []struct {
			ID      int64
			Contact struct{ ProviderUserID string }
		}
	}
	v.get("/admin/api/omni/threads?limit=100000", &th)
	stored := map[string]int{}
	for _, t := range th.Threads {
		var earlier []loadtest.Item // the thread's acknowledged messages stored so far
		after := int64(0)
		for {
			var ms struct{ Messages []loadtest.Message }
			v.get(fmt.Sprintf("/admin/api/omni/threads/%d/messages?after=%d&limit=500", t.ID, after), &ms)
			for _, m := range ms.Messages {
				if m.Direction != "inbound" || m.ProviderMessageID == nil {
					continue
				}
				stored[*m.ProviderMessageID]++
				it, acked := byKey[*m.ProviderMessageID]
				if !acked {
					continue // committed, but its answer was lost in a kill: no promise of order
				}
				for _, e := range earlier {
					if it.Acked.Before(e.Sent) {
						v.t.Errorf("thread %d (customer %s): message %s, acknowledged before %s was sent, is stored after it — order broken",
							t.ID, t.Contact.ProviderUserID, it.Key, e.Key)
					}
				}
				earlier = append(earlier, it)
			}
			if len(ms.Messages) < 500 {
				break
			}
			after = ms.Messages[len(ms.Messages)-1].Seq
		}
	}
	for _, it := range items {
		if n := stored[it.Key]; n != 1 {
			v.t.Errorf("webhook update %s (answered 200) stored %d times", it.Key, n)
		}
	}
	for key, n := range stored {
		if n > 1 {
			v.t.Errorf("update %s stored %d times", key, n)
		}
	}
	v.t.Logf("webhooks: %d acknowledged, each stored once; %d stored in all", len(items), len(stored))
}

// checkTopic: every publish answered 202 has its replica; every one with a
// valid referrer has exactly one bond and one bond-created event.
func (v *verifier) checkTopic(items []loadtest.Item) {
	v.t.Helper()
	bondEvents := map[string]int{}
	for p, from := 0, int64(0); p < 6; p, from = p+1, 0 {
		for {
			var out struct {
				Messages []struct {
					Key    string
					Offset int64
				}
			}
			v.get(fmt.Sprintf("/admin/api/topics/pin.referral.bonds.v1/messages?partition=%d&fromOffset=%d&limit=1000", p, from), &out)
			for _, m := range out.Messages {
				bondEvents[m.Key]++
			}
			if len(out.Messages) < 1000 {
				break
			}
			from = out.Messages[len(out.Messages)-1].Offset + 1
		}
	}
	bonded := 0
	for _, it := range items {
		if code := v.get("/admin/api/referral/replicas/"+it.Subject, nil); code != 200 {
			v.t.Errorf("user %s (publish answered 202): replica answers %d", it.Subject, code)
			continue
		}
		if it.Seq%2 != 0 {
			continue // published without a referrer
		}
		var bonds struct{ Bonds []json.RawMessage }
		v.get("/admin/api/referral/bonds?referredUserId="+it.Subject, &bonds)
		if len(bonds.Bonds) != 1 || bondEvents[it.Subject] != 1 {
			v.t.Errorf("user %s: %d bonds and %d bond-created events, want 1 and 1", it.Subject, len(bonds.Bonds), bondEvents[it.Subject])
			continue
		}
		bonded++
	}
	for key, n := range bondEvents {
		if n > 1 {
			v.t.Errorf("bond-created for %s published %d times", key, n)
		}
	}
	v.t.Logf("topic: %d acknowledged publishes consumed, %d bonded once each", len(items), bonded)
}

// checkOutbox: every emit answered 201 is processed, and the user got the
// DM it asks for. A DM the process had sent to Telegram but not yet
// recorded when it was killed is sent again (Telegram has no idempotency
// key): such repeats are counted and may not exceed what was in flight.
func (v *verifier) checkOutbox(items []loadtest.Item, fake *fakebot.Server, faults bool) {
	v.t.Helper()
	perChat := map[string]int{}
	for _, it := range items {
		var ev struct {
			State        string
			DeadLettered bool
		}
		if code := v.get("/admin/api/bot/events/"+it.Key, &ev); code != 200 || ev.State != "processed" {
			v.t.Errorf("event %s (emit answered 201): %d %q, want processed", it.Key, code, ev.State)
		}
		perChat[it.Subject]++
	}
	// Emits committed but unanswered at a kill also take effect: count what
	// the outbox holds for these users.
	events := map[string]int{}
	for before := ""; ; {
		var page struct {
			Events []struct {
				ID         int64
				EventType  string
				TelegramID *string
			}
		}
		v.get("/admin/api/bot/events?state=processed&limit=500"+before, &page)
		for _, e := range page.Events {
			if e.EventType == "reactivation" && e.TelegramID != nil {
				events[*e.TelegramID]++
			}
		}
		if len(page.Events) < 500 {
			break
		}
		before = fmt.Sprintf("&beforeId=%d", page.Events[len(page.Events)-1].ID)
	}
	dms := map[string]int{}
	for _, c := range fake.CallsTo("sendMessage") {
		if c.OK && strings.HasPrefix(c.Params["text"], "Рады видеть вас снова") {
			dms[c.Params["chat_id"]]++
		}
	}
	repeats := 0
	for chat, n := range events {
		if n < perChat[chat] {
			v.t.Errorf("chat %s: %d events processed, fewer than the %d acknowledged", chat, n, perChat[chat])
		}
		switch d := dms[chat]; {
		case d < n:
			v.t.Errorf("chat %s: %d DMs for %d processed events — a DM was lost", chat, d, n)
		case d > n:
			repeats += d - n
		}
	}
	// At a kill at most a sender's batch is between Telegram's answer and
	// its record; five kills bound the repeats.
	if limit := crashRoundsN * crashUsers; repeats > limit {
		v.t.Errorf("%d repeated DMs after %d kills, more than the %d that can be in flight", repeats, crashRoundsN, limit)
	}
	v.t.Logf("outbox: %d acknowledged emits processed across %d users; %d DMs repeated after kills (faults: %v)", len(items), len(events), repeats, faults)
}
