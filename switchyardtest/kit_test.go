package switchyardtest_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard/openapi/openapitest"
	"switchyard/store/storetest"
	"switchyard/switchyardtest"
)

// validating is a transport that validates every exchange against the
// instance's /openapi.json once it knows the document (after Start).
type validating struct {
	mu sync.Mutex
	rt http.RoundTripper
	v  *openapitest.Validator
}

func (vt *validating) RoundTrip(r *http.Request) (*http.Response, error) {
	vt.mu.Lock()
	rt := vt.rt
	vt.mu.Unlock()
	if rt == nil {
		rt = http.DefaultTransport
	}
	return rt.RoundTrip(r)
}

// load reads the instance's document and validates from then on.
func (vt *validating) load(t testing.TB, app *switchyardtest.App) {
	t.Helper()
	resp, err := http.Get(app.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	v := openapitest.Load(t, raw)
	vt.mu.Lock()
	vt.v, vt.rt = v, v.Transport(t, http.DefaultTransport)
	vt.mu.Unlock()
}

// startValidated starts an instance whose every exchange with the kit is
// validated against its OpenAPI document.
func startValidated(t testing.TB, opts switchyardtest.Options) (*switchyardtest.App, *validating) {
	t.Helper()
	vt := &validating{}
	opts.Transport = vt
	if opts.DB == "" {
		// SQLite in the test's folder, or a database of its own on the
		// PostgreSQL of SWITCHYARD_TEST_DB.
		opts.DB = storetest.MigratedSource(t)
	}
	app := switchyardtest.Start(t, opts)
	vt.load(t, app)
	return app, vt
}

// flows are the kit's acceptance journeys, each on an instance of its own
// or sharing one: every id they make is theirs.
var flows = []struct {
	name string
	run  func(t testing.TB, app *switchyardtest.App)
}{
	{"a user who starts the bot with a leader's code is greeted, and binds Telegram once registered", greetAndBind},
	{"a registered event the bot cannot read is retried ten times, 60 s · 2^n apart, then dead-lettered", tenRetries},
	{"a referral whose owner arrives 20 minutes later is bonded at the next retry, and the bond is published", lateOwner},
	{"a customer's message opens a thread and the operator's reply reaches them", replyInThread},
	{"a DM to a user who blocked the bot becomes a web notification", blockedFallback},
}

// TestKitDrivesEveryFlow is the kit's acceptance: one instance, the three
// flows end to end through the kit's helpers, with the clock moved where
// the flows wait for time, every exchange validated against /openapi.json.
// Its real time is in docs/benchmarks.md (BenchmarkKitFlows).
func TestKitDrivesEveryFlow(t *testing.T) {
	t.Parallel()
	began := time.Now()
	app, vt := startValidated(t, switchyardtest.Options{})
	for _, f := range flows {
		t.Run(f.name, func(t *testing.T) { f.run(t, app) })
	}
	t.Logf("start and the flows took %s of real time", time.Since(began).Round(time.Millisecond))
	seen := vt.v.Succeeded()
	for _, op := range []string{"POST /admin/api/clock/advance", "POST /admin/api/bot/events", "POST /admin/api/topics/{topic}/messages",
		"POST /admin/api/sandbox/users/{id}/start", "POST /admin/api/omni/threads/{id}/messages", "POST /bot/telegram/connect-link"} {
		if seen[op] == 0 {
			t.Errorf("no successful exchange of %s was validated (saw %v)", op, seen)
		}
	}
}

// BenchmarkKitFlows is the real time a test of the kit takes: a fresh
// instance and every flow, once per iteration. BenchmarkKitStart, an
// instance started and stopped, is its baseline.
func BenchmarkKitFlows(b *testing.B) {
	for b.Loop() {
		app := switchyardtest.Start(b, switchyardtest.Options{DB: storetest.MigratedSource(b), Log: io.Discard})
		for _, f := range flows {
			f.run(b, app)
		}
	}
}

func BenchmarkKitStart(b *testing.B) {
	for b.Loop() {
		switchyardtest.Start(b, switchyardtest.Options{DB: storetest.MigratedSource(b), Log: io.Discard})
	}
}

func greetAndBind(t testing.TB, app *switchyardtest.App) {
	leader := app.CreateAccount(t, switchyardtest.NewAccount{Link: "anna-leader", Name: "Anna"})
	acc := app.CreateAccount(t, switchyardtest.NewAccount{Link: "boris", Name: "Boris"})
	boris := app.TelegramUser(5001, "Boris")

	boris.Start(t, leader.Link)
	app.WaitFor(t, switchyardtest.BotSaid(boris, "Вас пригласил(а) Anna"))
	app.WaitFor(t, switchyardtest.FunnelAt(boris, "leader_resolved"))

	boris.Start(t, app.ConnectLink(t, acc.UID))
	app.WaitFor(t, switchyardtest.FunnelAt(boris, "account_linked"))
	ids := app.Register(t, acc.UID, leader.UID)
	if len(ids) == 0 {
		t.Fatal("registering emitted no event")
	}
	for _, id := range ids {
		app.WaitFor(t, switchyardtest.EventProcessed(id))
	}
	app.WaitFor(t, switchyardtest.BotSaid(boris, "Регистрация подтверждена"))
	boris.Press(t, "Да, это мой аккаунт")
	app.WaitFor(t, switchyardtest.Bound(boris))
	if f := app.Funnel(t, boris); f.Name != "registered" || f.UID == nil || *f.UID != acc.UID {
		t.Errorf("the funnel after binding: %+v, want registered on account %d", f, acc.UID)
	}
}

func tenRetries(t testing.TB, app *switchyardtest.App) {
	from := app.Now(t)
	id := app.EmitEvent(t, switchyardtest.Event{Type: switchyardtest.EventRegistered, TelegramID: "5002",
		Payload: map[string]any{"leaderUid": "not-a-uid"}})
	var waited time.Duration
	for n := 1; n <= 10; n++ {
		app.WaitFor(t, switchyardtest.EventFailed(id, n))
		if n == 10 {
			break
		}
		ev := app.OutboxEvent(t, id)
		if ev.NextRetryAt == nil {
			t.Fatalf("after attempt %d: %s with no next retry", n, switchyardtest.DescribeEvent(ev))
		}
		gap := ev.NextRetryAt.Sub(app.Now(t))
		if want := time.Minute << n; gap != want {
			t.Errorf("after attempt %d the retry is %s away, want %s", n, gap, want)
		}
		waited += gap
		app.AdvanceTo(t, *ev.NextRetryAt)
	}
	app.WaitFor(t, switchyardtest.EventDead(id))
	ev := app.OutboxEvent(t, id)
	if ev.Attempts != 10 || ev.LastError == nil || !strings.Contains(*ev.LastError, "leaderUid") {
		t.Errorf("the dead event: %s, want 10 attempts and the payload's error", switchyardtest.DescribeEvent(ev))
	}
	if moved := app.Now(t).Sub(from); moved < waited {
		t.Errorf("the clock moved %s, less than the %s of backoff", moved, waited)
	}
}

func lateOwner(t testing.TB, app *switchyardtest.App) {
	owner := "aaaaaaaa-0000-4000-8000-00000000000a"
	user := "bbbbbbbb-0000-4000-8000-00000000000b"
	app.CreateLink(t, switchyardtest.Link{URL: "late-owner", OwnerUserID: owner,
		TenantID: "cccccccc-0000-4000-8000-00000000000c", Channel: "web"})
	app.UpsertIdentityUser(t, switchyardtest.IdentityUser{UserID: user, ReferrerURL: "late-owner"})
	app.WaitFor(t, switchyardtest.ReferralWaiting(1))

	for range 20 {
		app.Advance(t, time.Minute)
	}
	if r := app.Referrer(t, user); r.HasReferrer {
		t.Fatalf("bonded before the owner arrived: %+v", r)
	}
	app.UpsertIdentityUser(t, switchyardtest.IdentityUser{UserID: owner, Type: "Agent", FirstName: "Olga"})
	app.WaitFor(t, switchyardtest.ReplicaExists(owner, 1))
	app.Advance(t, 20*time.Minute)
	app.WaitFor(t, switchyardtest.BondCreated(user))
	app.WaitFor(t, switchyardtest.ReferralWaiting(0))

	r := app.Referrer(t, user)
	if r.Referrer == nil || r.Referrer.UserID != owner {
		t.Errorf("the referrer: %+v, want %s", r, owner)
	}
	var published bool
	for _, rec := range app.TopicRecords(t, switchyardtest.TopicBonds) {
		if env, err := rec.Envelope(); err == nil && rec.Key == user && env.Type == "pin.referral.bond-created" {
			published = true
		}
	}
	if !published {
		t.Errorf("no bond-created record keyed %s on %s", user, switchyardtest.TopicBonds)
	}
}

func replyInThread(t testing.TB, app *switchyardtest.App) {
	owner := app.TelegramUser(7001, "Shop")
	customer := app.TelegramUser(7002, "Carol")
	conn := app.ConnectBusiness(t, owner)
	customer.WriteToBusiness(t, conn, "Do you ship to Kazan?")
	app.WaitFor(t, switchyardtest.ThreadOpened(customer))
	th := app.Thread(t, customer)
	msgs := app.ThreadMessages(t, th.ID)
	if len(msgs) == 0 || msgs[0].Direction != "inbound" || msgs[0].Text != "Do you ship to Kazan?" {
		t.Fatalf("the thread's messages: %+v", msgs)
	}
	id := app.Reply(t, th.ID, "Yes, in two days.")
	app.WaitFor(t, switchyardtest.MessageStatus(id, "sent"))
	app.WaitFor(t, switchyardtest.CustomerGot(customer, "Yes, in two days."))
}

func blockedFallback(t testing.TB, app *switchyardtest.App) {
	vera := app.TelegramUser(6001, "Vera")
	acc := app.CreateAccount(t, switchyardtest.NewAccount{Link: "vera", Name: "Vera", TelegramID: vera.TelegramID()})
	vera.Start(t, "")
	app.WaitFor(t, switchyardtest.FunnelAt(vera, "started"))
	vera.Block(t)
	id := app.EmitEvent(t, switchyardtest.Event{Type: switchyardtest.EventNewPartner, MagnetUID: acc.UID,
		TelegramID: vera.TelegramID(), Payload: map[string]any{"partnerName": "Gleb"}})
	app.WaitFor(t, switchyardtest.EventProcessed(id))
	app.WaitFor(t, switchyardtest.NotifiedOnWeb(acc.UID, "Gleb"))
	for _, m := range vera.Chat(t, switchyardtest.OnboardingBot) {
		if strings.Contains(m.Text, "Gleb") {
			t.Errorf("the bot's message reached a user who blocked it: %q", m.Text)
		}
	}
}
