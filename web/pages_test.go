package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/mymmrac/telego"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/omni"
	"switchyard/queue"
	"switchyard/referral"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/telegram/sandbox"
	"switchyard/testwait"
	"switchyard/web"
	"switchyard/web/webtest"
)

// Handler tests: the console's pages and actions over real HTTP, on real
// SQLite and the real domain objects.

// console is a logged-in operator's browser without JavaScript: a cookie
// jar, and redirects left to the test so it can see where an action leads.
type console struct {
	base   string
	client *http.Client
}

func newConsole(t *testing.T, opts web.Options) *console {
	t.Helper()
	opts.AdminToken = adminToken
	return loginTo(t, webtest.NewWith(t, opts))
}

func loginTo(t *testing.T, srv *webtest.Server) *console {
	t.Helper()
	return &console{base: srv.URL, client: srv.Login(t)}
}

// get fetches a console page and parses it.
func (c *console) get(t *testing.T, path string, wantStatus int) *goquery.Document {
	t.Helper()
	resp, err := c.client.Get(c.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantStatus {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: status %d, want %d\n%s", path, resp.StatusCode, wantStatus, body)
	}
	doc, err := goquery.NewDocumentFromReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// post submits a console form and returns the response (redirects not followed).
func (c *console) post(t *testing.T, path string, form url.Values, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// act submits a confirmed action and follows its redirect to the flash message.
func (c *console) act(t *testing.T, path string, form url.Values) (landed string, flash *goquery.Selection) {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	form.Set("confirm", "yes")
	resp, body := c.post(t, path, form)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST %s: status %d, want a redirect\n%s", path, resp.StatusCode, body)
	}
	loc := resp.Header.Get("Location")
	doc := c.get(t, loc, http.StatusOK)
	return loc, doc.Find(`[data-testid="flash"]`)
}

func tid(doc *goquery.Document, id string) *goquery.Selection {
	return doc.Find(`[data-testid="` + id + `"]`)
}

func trimmed(s *goquery.Selection) string { return strings.TrimSpace(s.Text()) }

// deadEvent emits a registered event and retries it until the outbox
// dead-letters it (BOT_OUTBOX_MAX_ATTEMPTS retries, the clock moved past
// each backoff).
func deadEvent(t *testing.T, ob *backend.Outbox, clock *store.ManualClock, uid contract.UID) contract.EventID {
	t.Helper()
	ctx := context.Background()
	id, err := ob.Emit(ctx, backend.NewEvent{Type: contract.EventRegistered, Target: backend.Target{MagnetUID: uid},
		Payload: json.RawMessage(`{"leaderUid":1,"phone":"+79991231234"}`)})
	if err != nil {
		t.Fatal(err)
	}
	for range contract.BOT_OUTBOX_MAX_ATTEMPTS {
		if _, err := ob.Ack(ctx, contract.AckRequest{RetryIDs: []contract.EventID{id},
			Errors: map[string]string{fmt.Sprint(id): "telegram: 502 Bad Gateway"}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(24 * time.Hour)
	}
	if e, _ := ob.GetEvent(ctx, id); e.State != backend.StateDead {
		t.Fatalf("event %d is %s after the retries, want dead", id, e.State)
	}
	return id
}

func TestBotOutboxConsole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	ob := backend.NewOutbox(backend.OutboxOpts{DB: db})
	dead := deadEvent(t, ob, clock, 5)
	// Logged in after the clock moved, so the session is current.
	c := newConsole(t, web.Options{DB: db, Outbox: ob})
	wallet, err := ob.EmitWalletConnected(ctx, backend.Target{TelegramID: "100200"}, contract.WalletConnectedPayload{Addr: "EQabc"})
	if err != nil {
		t.Fatal(err)
	}
	partner, err := ob.EmitNewPartner(ctx, backend.Target{MagnetUID: 6}, contract.NewPartnerPayload{PartnerUID: 7, PartnerName: "P"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Ack(ctx, contract.AckRequest{RetryIDs: []contract.EventID{partner}}); err != nil {
		t.Fatal(err)
	}
	row := func(doc *goquery.Document, id contract.EventID) *goquery.Selection {
		return tid(doc, fmt.Sprint("event-", id))
	}

	t.Run("the list shows each event's state, and the tabs count them", func(t *testing.T) {
		doc := c.get(t, "/admin/bot", http.StatusOK)
		for id, state := range map[contract.EventID]string{dead: "dead", wallet: "pending", partner: "retrying"} {
			if got := trimmed(row(doc, id).Find(`[data-testid="state"]`)); got != state {
				t.Errorf("event %d shows %q, want %q", id, got, state)
			}
		}
		if !strings.Contains(trimmed(row(doc, partner)), "in 2m") {
			t.Errorf("the retrying event does not show its next retry: %q", trimmed(row(doc, partner)))
		}
		if got := trimmed(tid(doc, "tab-dead").Find(".badge")); got != "1" {
			t.Errorf("dead tab counts %q", got)
		}
	})
	t.Run("filters by state, type and user narrow the list", func(t *testing.T) {
		for _, f := range []struct {
			query string
			want  []contract.EventID
		}{
			{"state=dead", []contract.EventID{dead}},
			{"type=wallet_connected", []contract.EventID{wallet}},
			{"user=uid:6", []contract.EventID{partner}},
			{"user=tg:100200", []contract.EventID{wallet}},
			{"user=5", []contract.EventID{dead}},
			{"state=pending&type=registered", nil},
		} {
			doc := c.get(t, "/admin/bot?"+f.query, http.StatusOK)
			got := doc.Find(`[data-testid="event-table"] tbody tr[data-testid]`)
			if got.Length() != len(f.want) {
				t.Errorf("%s lists %d events, want %d", f.query, got.Length(), len(f.want))
				continue
			}
			for _, id := range f.want {
				if row(doc, id).Length() != 1 {
					t.Errorf("%s does not list event %d", f.query, id)
				}
			}
		}
	})
	t.Run("the detail shows payload, attempts and last error, with the phone masked", func(t *testing.T) {
		doc := c.get(t, fmt.Sprint("/admin/bot/events/", dead), http.StatusOK)
		if trimmed(tid(doc, "event-attempts")) != "10" || trimmed(tid(doc, "event-error")) != "telegram: 502 Bad Gateway" {
			t.Fatalf("attempts %q error %q", trimmed(tid(doc, "event-attempts")), trimmed(tid(doc, "event-error")))
		}
		p := trimmed(tid(doc, "event-payload"))
		if !strings.Contains(p, `"leaderUid": 1`) || !strings.Contains(p, "+7***1234") || strings.Contains(p, "79991231234") {
			t.Fatalf("payload:\n%s", p)
		}
		if tid(doc, "redrive").Length() != 1 {
			t.Fatal("a dead event has no redrive action")
		}
		c.get(t, "/admin/bot/events/999", http.StatusNotFound)
	})
	t.Run("a redrive without the confirmation asks first and changes nothing", func(t *testing.T) {
		resp, body := c.post(t, fmt.Sprint("/admin/bot/events/", dead, "/redrive"), url.Values{"back": {"/admin/bot?state=dead"}})
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="confirm-page"`) || !strings.Contains(body, `name="back" value="/admin/bot?state=dead"`) {
			t.Fatalf("status %d, want the confirmation page:\n%s", resp.StatusCode, body)
		}
		if e, _ := ob.GetEvent(ctx, dead); e.State != backend.StateDead {
			t.Fatalf("the event is %s before the confirmation", e.State)
		}
	})
	t.Run("a cross-origin redrive is refused", func(t *testing.T) {
		resp, _ := c.post(t, fmt.Sprint("/admin/bot/events/", dead, "/redrive"), url.Values{"confirm": {"yes"}}, "Origin", "https://evil.example")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", resp.StatusCode)
		}
		if e, _ := ob.GetEvent(ctx, dead); e.State != backend.StateDead {
			t.Fatalf("the event is %s after a refused request", e.State)
		}
	})
	t.Run("a redrive without a session is refused", func(t *testing.T) {
		resp, err := http.PostForm(c.base+fmt.Sprint("/admin/bot/events/", dead, "/redrive"), url.Values{"confirm": {"yes"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", resp.StatusCode)
		}
	})
	t.Run("a confirmed redrive makes the event pending and says so", func(t *testing.T) {
		landed, flash := c.act(t, fmt.Sprint("/admin/bot/events/", dead, "/redrive"), url.Values{"back": {"/admin/bot?state=dead"}})
		if landed != "/admin/bot?state=dead" || !flash.HasClass("ok") || !strings.Contains(trimmed(flash), "redriven") {
			t.Fatalf("landed on %s with flash %q", landed, trimmed(flash))
		}
		e, _ := ob.GetEvent(ctx, dead)
		if e.State != backend.StatePending || e.Attempts != 0 {
			t.Fatalf("event is %s with %d attempts", e.State, e.Attempts)
		}
		if doc := c.get(t, "/admin/bot?state=dead", http.StatusOK); tid(doc, "flash").Length() != 0 {
			t.Fatal("the flash message shows again on a reload")
		}
	})
	t.Run("redriving a processed event is refused with the reason", func(t *testing.T) {
		if _, err := ob.Ack(ctx, contract.AckRequest{ProcessedIDs: []contract.EventID{wallet}}); err != nil {
			t.Fatal(err)
		}
		_, flash := c.act(t, fmt.Sprint("/admin/bot/events/", wallet, "/redrive"), nil)
		if !flash.HasClass("bad") || !strings.Contains(trimmed(flash), "already processed") {
			t.Fatalf("flash %q", trimmed(flash))
		}
	})
	t.Run("the overview counts the outbox and what was handled in the last minute", func(t *testing.T) {
		doc := c.get(t, "/admin", http.StatusOK)
		for id, want := range map[string]string{"bot-pending": "1", "bot-retrying": "1", "bot-dead": "0", "bot-per-minute": "1"} {
			if got := trimmed(tid(doc, id)); got != want {
				t.Errorf("%s = %q, want %q", id, got, want)
			}
		}
		if n := tid(doc, "chart-bot").Find("rect.bar").Length(); n != 1 {
			t.Errorf("the chart draws %d bars, want 1 (the minute of the ack)", n)
		}
	})
	t.Run("an htmx poll gets only the live fragment", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, c.base+"/admin/bot?state=retrying", nil)
		req.Header.Set("HX-Request", "true")
		resp, err := c.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s := string(body)
		if resp.StatusCode != 200 || strings.Contains(s, "<html") || strings.Contains(s, "event-filters") ||
			!strings.Contains(s, fmt.Sprint(`data-testid="event-`, partner, `"`)) {
			t.Fatalf("status %d fragment:\n%s", resp.StatusCode, s)
		}
	})
}

// failingHandler dead-letters every message at once.
func failingHandler(context.Context, queue.Message) error {
	return queue.Permanent(errors.New("cannot parse; customer phone +79995550011"))
}

func TestQueueConsole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	c := newConsole(t, web.Options{DB: db, Queues: qa})
	failing := queue.New(queue.NewOpts{DB: db, Name: "console.failing"})
	if _, err := failing.Send(ctx, queue.Message{Body: []byte(`{"n":1,"phone":"+79990001111"}`)}); err != nil {
		t.Fatal(err)
	}
	w := failing.Start(ctx, queue.WorkerOpts{Handler: failingHandler, PollInterval: 10 * time.Millisecond})
	var dead []queue.DeadLetter
	testwait.Until(t, 10*time.Second, "a dead letter", func() bool {
		dead, _ = qa.ListDead(ctx, queue.DeadFilter{Queue: "console.failing"})
		return len(dead) == 1
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	idle := queue.New(queue.NewOpts{DB: db, Name: "console.idle"})
	for i := range 2 {
		if _, err := idle.Send(ctx, queue.Message{Body: []byte(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("the Queues page lists every queue with depth and dead", func(t *testing.T) {
		doc := c.get(t, "/admin/queues", http.StatusOK)
		if got := trimmed(tid(doc, "queue-console.failing").Find(`[data-testid="dead"]`)); got != "1" {
			t.Errorf("failing queue dead = %q", got)
		}
		if got := trimmed(tid(doc, "queue-console.idle").Find(`[data-testid="depth"]`)); got != "2" {
			t.Errorf("idle queue depth = %q", got)
		}
	})
	t.Run("a queue's page shows its dead letters with payload, error and attempts, masked", func(t *testing.T) {
		doc := c.get(t, "/admin/queues/console.failing", http.StatusOK)
		d := tid(doc, "dead-"+dead[0].ID)
		s := trimmed(d)
		if d.Length() != 1 || !strings.Contains(s, "1 attempt(s)") || !strings.Contains(s, "+7***0011") || !strings.Contains(s, "+7***1111") ||
			strings.Contains(s, "79990001111") || strings.Contains(s, "79995550011") {
			t.Fatalf("dead letter:\n%s", s)
		}
		if tid(doc, "dead-bulk-redrive-all").Length() != 1 || tid(doc, "purge-queue").Length() != 1 {
			t.Fatal("redrive all or purge is missing")
		}
		c.get(t, "/admin/queues/no.such.queue", http.StatusNotFound)
	})
	t.Run("redriving one dead letter puts it back in its queue", func(t *testing.T) {
		landed, flash := c.act(t, "/admin/queues/console.failing/dead/redrive", url.Values{"id": {dead[0].ID}, "back": {"/admin/queues/console.failing"}})
		if landed != "/admin/queues/console.failing" || !strings.Contains(trimmed(flash), "Redrove 1 dead letter") {
			t.Fatalf("landed %s flash %q", landed, trimmed(flash))
		}
		doc := c.get(t, "/admin/queues/console.failing", http.StatusOK)
		live := c.get(t, "/admin/queues/console.failing?list=live", http.StatusOK)
		if tid(doc, "dead-empty").Length() != 1 || live.Find(`[data-testid="live-table"] tbody tr`).Length() != 1 {
			t.Fatal("the redriven message is not live again")
		}
		_, flash = c.act(t, "/admin/queues/console.failing/dead/redrive", url.Values{"id": {"nope"}})
		if !flash.HasClass("bad") {
			t.Fatalf("redriving an unknown dead letter says %q", trimmed(flash))
		}
	})
	t.Run("purging a queue asks first, then empties it", func(t *testing.T) {
		resp, body := c.post(t, "/admin/queues/console.idle/purge", url.Values{})
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "confirm-page") {
			t.Fatalf("status %d, want the confirmation page", resp.StatusCode)
		}
		if st, _ := qa.Stats(ctx); depth(st, "console.idle") != 2 {
			t.Fatal("the queue changed before the confirmation")
		}
		_, flash := c.act(t, "/admin/queues/console.idle/purge", nil)
		if !strings.Contains(trimmed(flash), "Purged 2 message(s)") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		if st, _ := qa.Stats(ctx); depth(st, "console.idle") != 0 {
			t.Fatal("the queue still has messages")
		}
	})
}

func depth(st queue.Stats, name string) int64 {
	for _, q := range st.Queues {
		if q.Name == name {
			return q.Ready + q.Delayed + q.Held + q.InFlight
		}
	}
	return -1
}

const (
	ownerID  = "aaaaaaaa-1111-4111-8111-111111111111"
	tenantID = "bbbbbbbb-2222-4222-8222-222222222222"
)

func identityEvent(msgID, user, userType, phone string, referrer *string) []byte {
	env := map[string]any{
		"messageId": msgID, "type": "pin.identity.user-upserted", "contractVersion": 1, "aggregateId": user,
		"aggregateType": "User", "occurredAt": "2026-01-15T12:00:00Z",
		"payload": map[string]any{"UserId": user, "Type": userType, "Status": "Active",
			"Name": map[string]any{"FirstName": "Olga", "LastName": "Test"}, "PhoneNumber": phone,
			"RegisteredVia": "Sms", "ReferrerUrl": referrer, "Version": 1},
	}
	b, _ := json.Marshal(env)
	return b
}

// runWorker runs a worker until the test ends.
func runWorker(t *testing.T, run func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func TestReferralConsole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	ref, err := referral.New(ctx, referral.Opts{DB: db, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	runWorker(t, ref.Run)
	c := newConsole(t, web.Options{DB: db, Referral: ref, Queues: qa})

	if _, err := qa.Publish(ctx, referral.TopicIdentityUsers, ownerID,
		identityEvent("6f1c1a52-0000-4000-8000-000000000001", ownerID, "Agent", "+79990001234", nil)); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the owner's replica", func() bool {
		_, err := ref.Replica(ctx, ownerID)
		return err == nil
	})

	t.Run("creating a link from the form lists it", func(t *testing.T) {
		_, flash := c.act(t, "/admin/referral/links", url.Values{"url": {"Olga-2026"}, "owner": {ownerID}, "tenant": {tenantID}, "channel": {"web"}})
		if !flash.HasClass("ok") || !strings.Contains(trimmed(flash), "olga-2026 created") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		doc := c.get(t, "/admin/referral", http.StatusOK)
		if tid(doc, "link-olga-2026").Length() != 1 {
			t.Fatal("the new link is not listed")
		}
	})
	t.Run("a bad link is refused on the page, keeping what was typed", func(t *testing.T) {
		for _, f := range []struct{ slug, want string }{{"x", "not a slug"}, {"olga-2026", "exists"}} {
			resp, body := c.post(t, "/admin/referral/links", url.Values{"url": {f.slug}, "owner": {ownerID}, "tenant": {tenantID}, "channel": {"web"}})
			doc, _ := goquery.NewDocumentFromReader(strings.NewReader(body))
			if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(trimmed(tid(doc, "link-error")), f.want) ||
				doc.Find(`#link-url`).AttrOr("value", "") != f.slug || doc.Find(`#link-owner`).AttrOr("value", "") != ownerID {
				t.Fatalf("slug %q: status %d error %q", f.slug, resp.StatusCode, trimmed(tid(doc, "link-error")))
			}
		}
	})
	t.Run("a user's page shows the replica with the phone masked and the links owned", func(t *testing.T) {
		doc := c.get(t, "/admin/referral/users/"+ownerID, http.StatusOK)
		if got := trimmed(tid(doc, "replica-phone")); got != "+7***1234" {
			t.Fatalf("phone shown as %q", got)
		}
		if strings.Contains(doc.Text(), "79990001234") || tid(doc, "link-olga-2026").Length() != 1 {
			t.Fatal("the full phone is shown or the owned link is missing")
		}
		doc = c.get(t, "/admin/referral", http.StatusOK)
		if got := trimmed(tid(doc, "replica-"+ownerID).Find(`[data-testid="phone"]`)); got != "+7***1234" {
			t.Fatalf("the replicas list shows the phone as %q", got)
		}
	})
	t.Run("a referred user is bound, and the bond shows on both pages", func(t *testing.T) {
		referred := "cccccccc-3333-4333-8333-333333333333"
		slug := "olga-2026"
		if _, err := qa.Publish(ctx, referral.TopicIdentityUsers, referred,
			identityEvent("6f1c1a52-0000-4000-8000-000000000002", referred, "Investor", "+79990005678", &slug)); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "the bond", func() bool {
			r, _ := ref.MyReferrer(ctx, referral.UserID(referred))
			return r.HasReferrer
		})
		doc := c.get(t, "/admin/referral/users/"+referred, http.StatusOK)
		if !strings.Contains(trimmed(tid(doc, "referrer")), ownerID) || tid(doc, "bonds-referred").Find("tbody tr").Length() != 1 ||
			tid(doc, "journal").Find("tbody tr").Length() != 1 {
			t.Fatalf("referrer %q", trimmed(tid(doc, "referrer")))
		}
	})
	t.Run("a broken identity event shows in the DLQ with its error", func(t *testing.T) {
		if _, err := qa.Publish(ctx, referral.TopicIdentityUsers, "dddddddd-4444-4444-8444-444444444444",
			[]byte(`{"messageId":"6f1c1a52-0000-4000-8000-000000000003","type":"pin.identity.user-upserted","payload":{"UserId":"","PhoneNumber":"+79993332211"}}`)); err != nil {
			t.Fatal(err)
		}
		var doc *goquery.Document
		testwait.Until(t, 10*time.Second, "the DLQ entry on the page", func() bool {
			doc = c.get(t, "/admin/referral", http.StatusOK)
			return tid(doc, "dead-list").Find("li").Length() == 1
		})
		s := trimmed(tid(doc, "dead-list"))
		if !strings.Contains(s, "bad identity event") || !strings.Contains(s, "+7***2211") || strings.Contains(s, "79993332211") {
			t.Fatalf("DLQ entry:\n%s", s)
		}
		if tid(doc, "redrive-all").Find(`input[name="group"][value="referral-identity-users"]`).Length() != 1 {
			t.Fatal("redrive all does not name the consumer group")
		}
	})
	t.Run("deleting a link asks first, then hides it", func(t *testing.T) {
		links, _ := ref.ListLinks(ctx, referral.LinkFilter{})
		path := "/admin/referral/links/" + string(links[0].ID) + "/delete"
		if resp, body := c.post(t, path, url.Values{"url": {"olga-2026"}}); resp.StatusCode != 200 || !strings.Contains(body, "Delete link olga-2026?") {
			t.Fatalf("status %d, want the confirmation", resp.StatusCode)
		}
		_, flash := c.act(t, path, url.Values{"url": {"olga-2026"}})
		if !strings.Contains(trimmed(flash), "Deleted link olga-2026") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		if doc := c.get(t, "/admin/referral", http.StatusOK); tid(doc, "link-olga-2026").Length() != 0 {
			t.Fatal("a deleted link is still listed as live")
		}
		if doc := c.get(t, "/admin/referral?deleted=1", http.StatusOK); !strings.Contains(trimmed(tid(doc, "link-olga-2026")), "deleted") {
			t.Fatal("the deleted link is not shown as deleted")
		}
	})
}

func TestChatConsole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	fake := fakebot.New(fakebot.Opts{})
	fakeSrv := httptest.NewServer(fake)
	t.Cleanup(func() { fakeSrv.Close(); fake.Close() })
	token := fakebot.Token(4242)
	in := omni.NewInbound(omni.InboundOpts{DB: db, Token: token, WebhookSecret: "webhook-secret-0123456789"})
	runWorker(t, omni.NewChat(omni.ChatOpts{DB: db, DisableAutoAck: true, PollInterval: 20 * time.Millisecond}).Run)
	runWorker(t, omni.NewOutbound(omni.OutboundOpts{DB: db, Token: token, APIURL: fakeSrv.URL, PollInterval: 20 * time.Millisecond}).Run)
	srv := webtest.NewWith(t, web.Options{DB: db, AdminToken: adminToken, Public: []web.RoutesFunc{in.Routes},
		Chat: omni.NewAdmin(omni.AdminOpts{DB: db})})
	tg, err := telegram.NewBot(token, fakeSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := in.SetWebhook(ctx, tg, srv.URL); err != nil {
		t.Fatal(err)
	}
	c := loginTo(t, srv)
	fb := fake.Bot(token)
	conn, err := fb.ConnectBusiness(telego.User{ID: 900, FirstName: "Shop"}, telego.BusinessBotRights{CanReply: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fb.BusinessMessage(conn.ID, telego.User{ID: 55, FirstName: "Bob"}, "is the shop open? +79991112233"); err != nil {
		t.Fatal(err)
	}
	var thread *goquery.Selection
	testwait.Until(t, 10*time.Second, "the thread in the inbox", func() bool {
		thread = tid(c.get(t, "/admin/chat", http.StatusOK), "inbox").Find("li")
		return thread.Length() == 1
	})
	t.Run("the inbox shows the contact, the channel, the last message and unread", func(t *testing.T) {
		s := trimmed(thread)
		if !strings.Contains(s, "Bob") || !strings.Contains(s, "Telegram Business") || !strings.Contains(s, "is the shop open? +7***2233") ||
			trimmed(thread.Find(`[data-testid="unread"]`)) != "1 unread" {
			t.Fatalf("inbox row: %q", s)
		}
	})
	href := thread.Find("a").AttrOr("href", "")
	t.Run("a reply from the thread page is delivered and its status turns to sent", func(t *testing.T) {
		_, flash := c.act(t, href+"/reply", url.Values{"text": {"yes, until 18:00"}})
		if !strings.Contains(trimmed(flash), "queued") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		testwait.Until(t, 10*time.Second, "the reply sent", func() bool {
			msgs := tid(c.get(t, href, http.StatusOK), "messages").Find("li.out")
			return msgs.Length() == 1 && trimmed(msgs.Find(`[data-testid="status"]`)) == "sent"
		})
		if calls := fake.CallsTo("sendMessage"); len(calls) != 1 || calls[0].Params["text"] != "yes, until 18:00" {
			t.Fatalf("sendMessage calls %+v", calls)
		}
	})
	t.Run("an empty reply is refused", func(t *testing.T) {
		_, flash := c.act(t, href+"/reply", url.Values{"text": {"  "}})
		if !flash.HasClass("bad") || !strings.Contains(trimmed(flash), "empty") {
			t.Fatalf("flash %q", trimmed(flash))
		}
	})
	t.Run("a failed delivery stands out in the thread and the inbox", func(t *testing.T) {
		fake.AddFault(fakebot.Fault{Kind: fakebot.FaultBlocked, Method: "sendMessage"})
		c.act(t, href+"/reply", url.Values{"text": {"are you there?"}})
		testwait.Until(t, 10*time.Second, "the failed reply", func() bool {
			return tid(c.get(t, href, http.StatusOK), "messages").Find("li.failed").Length() == 1
		})
		doc := c.get(t, href, http.StatusOK)
		if d := trimmed(doc.Find(`li.failed [data-testid="delivery-detail"]`)); d == "" {
			t.Fatal("the failed message does not say why")
		}
		if got := trimmed(tid(c.get(t, "/admin/chat", http.StatusOK), "failed")); got != "1 failed" {
			t.Fatalf("inbox failed badge %q", got)
		}
		if got := trimmed(tid(c.get(t, "/admin", http.StatusOK), "chat-failed")); got != "1" {
			t.Fatalf("overview failed deliveries %q", got)
		}
	})
	t.Run("mark as read clears unread; close asks first", func(t *testing.T) {
		_, flash := c.act(t, href+"/read", nil)
		if !strings.Contains(trimmed(flash), "read") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		if resp, body := c.post(t, href+"/close", url.Values{}); resp.StatusCode != 200 || !strings.Contains(body, "confirm-page") {
			t.Fatalf("close without confirmation: status %d", resp.StatusCode)
		}
		c.act(t, href+"/close", nil)
		if doc := c.get(t, "/admin/chat?state=closed", http.StatusOK); tid(doc, "inbox").Find("li").Length() != 1 {
			t.Fatal("the closed thread is not under Closed")
		}
		c.get(t, "/admin/chat/threads/999", http.StatusNotFound)
	})
}

func TestSandbox(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	const (
		onboardingToken = "7100000001:onboarding_Secret-0123456789abcdefg"
		chatToken       = "7100000002:chat_Secret-0123456789abcdefghijklm"
	)
	fake := fakebot.New(fakebot.Opts{Tokens: []string{onboardingToken, chatToken}})
	fakeSrv := httptest.NewServer(fake)
	t.Cleanup(func() { fakeSrv.Close(); fake.Close() })
	sbx := sandbox.New(sandbox.Opts{Server: fake, OnboardingToken: onboardingToken, ChatToken: chatToken})
	c := newConsole(t, web.Options{DB: db, Sandbox: sbx, Admin: []web.RoutesFunc{sbx.AdminRoutes}})
	api := func(method, path, body string) int {
		t.Helper()
		resp, _ := do(t, request(t, method, c.base+"/admin/api/sandbox"+path, adminToken, body))
		return resp.StatusCode
	}

	t.Run("a user's /start with a payload reaches the bot as an update", func(t *testing.T) {
		if status := api(http.MethodPost, "/users/42/start", `{"payload":"alice","firstName":"Ann"}`); status != 200 {
			t.Fatalf("status %d", status)
		}
		chat, ok := fake.Bot(onboardingToken).Chat(42)
		if !ok || len(chat.Messages) != 1 || chat.Messages[0].Text != "/start alice" || chat.User.FirstName != "Ann" {
			t.Fatalf("chat %+v", chat)
		}
		if n := fake.Bot(onboardingToken).PendingUpdates(); n != 1 {
			t.Fatalf("%d updates waiting, want 1", n)
		}
	})
	t.Run("pressing the bot's button finds the latest message carrying it", func(t *testing.T) {
		sendAsBot(t, fakeSrv.URL, onboardingToken, 42, "Is this your account?", "bind:5")
		if status := api(http.MethodPost, "/users/42/press", `{"data":"bind:5"}`); status != 200 {
			t.Fatalf("status %d", status)
		}
		if status := api(http.MethodPost, "/users/42/press", `{"data":"bind:6"}`); status != 404 {
			t.Fatalf("an unknown button: status %d", status)
		}
	})
	t.Run("bad requests get clear errors", func(t *testing.T) {
		for _, f := range []struct {
			path, body string
			want       int
		}{
			{"/users/42/start", `{"bot":"other"}`, 400},
			{"/users/42/messages", `{"text":""}`, 400},
			{"/users/43/press", `{"data":"bind:5"}`, 404},
			{"/users/42/start", `{"payload":1}`, 400},
		} {
			if status := api(http.MethodPost, f.path, f.body); status != f.want {
				t.Errorf("POST %s %s: status %d, want %d", f.path, f.body, status, f.want)
			}
		}
		resp, _ := do(t, request(t, http.MethodPost, c.base+"/admin/api/sandbox/users/42/start", "", `{}`))
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("without the token: status %d", resp.StatusCode)
		}
	})
	t.Run("a customer's message connects a business account when none exists", func(t *testing.T) {
		if status := api(http.MethodPost, "/users/77/business-message", `{"text":"hello shop","firstName":"Bob"}`); status != 200 {
			t.Fatalf("status %d", status)
		}
		v, err := fake.Bot(chatToken).View()
		if err != nil || len(v.Connections) != 1 || len(v.Chats) != 1 || v.Chats[0].Messages[0].Text != "hello shop" {
			t.Fatalf("chat bot view %+v %v", v, err)
		}
	})
	t.Run("the operator reads each sandbox bot's token from the API", func(t *testing.T) {
		resp, err := http.DefaultClient.Do(request(t, http.MethodGet, c.base+"/admin/api/sandbox", adminToken, ""))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var view struct {
			Bots []struct {
				Bot   string `json:"bot"`
				ID    int64  `json:"id"`
				Token string `json:"token"`
			} `json:"bots"`
		}
		if err := json.Unmarshal(body, &view); resp.StatusCode != 200 || err != nil {
			t.Fatalf("GET /admin/api/sandbox: %d %s %v", resp.StatusCode, body, err)
		}
		got := map[string]string{}
		for _, b := range view.Bots {
			got[b.Bot] = b.Token
		}
		if got["onboarding"] != onboardingToken || got["chat"] != chatToken {
			t.Fatalf("tokens %v, want the sandbox's", got)
		}
	})
	t.Run("a user who blocked the bot can press nothing", func(t *testing.T) {
		if status := api(http.MethodPost, "/users/42/block", ``); status != 204 {
			t.Fatalf("block: status %d", status)
		}
		if status := api(http.MethodPost, "/users/42/press", `{"data":"bind:5","messageId":2}`); status != 409 {
			t.Fatalf("press after block: status %d, want 409", status)
		}
		if status := api(http.MethodPost, "/users/42/unblock", `{"bot":"onboarding"}`); status != 204 {
			t.Fatalf("unblock: status %d", status)
		}
	})
	t.Run("the Sandbox page shows the chats as the users see them, with the buttons to press", func(t *testing.T) {
		doc := c.get(t, "/admin/sandbox", http.StatusOK)
		card := tid(doc, "chat-onboarding-42")
		if !strings.Contains(trimmed(card), "/start alice") || !strings.Contains(trimmed(card), "Is this your account?") ||
			card.Find(`[data-testid="press-bind:5"]`).Length() != 1 {
			t.Fatalf("chat card: %q", trimmed(card))
		}
		if tid(doc, "nav-sandbox").Length() != 1 {
			t.Fatal("no Sandbox entry in the nav")
		}
		landed, flash := c.act(t, "/admin/sandbox/send", url.Values{"bot": {"onboarding"}, "user": {"42"}, "text": {"/menu"}, "back": {"/admin/sandbox#chat-onboarding-42"}})
		if landed != "/admin/sandbox#chat-onboarding-42" || !strings.Contains(trimmed(flash), "Ann wrote to the bot") {
			t.Fatalf("landed %s flash %q", landed, trimmed(flash))
		}
		_, flash = c.act(t, "/admin/sandbox/press", url.Values{"bot": {"onboarding"}, "user": {"42"}, "message": {"99"}, "data": {"bind:5"}})
		if !flash.HasClass("bad") {
			t.Fatalf("pressing a missing message: flash %q", trimmed(flash))
		}
	})
	t.Run("without a sandbox there is no page and no API", func(t *testing.T) {
		c2 := newConsole(t, web.Options{DB: storetest.New(t)})
		doc := c2.get(t, "/admin", http.StatusOK)
		if tid(doc, "nav-sandbox").Length() != 0 {
			t.Fatal("the nav offers a sandbox that does not run")
		}
		resp, _ := do(t, request(t, http.MethodPost, c2.base+"/admin/api/sandbox/users/42/start", adminToken, `{}`))
		if resp.StatusCode != http.StatusNotFound {
			t.Fatalf("sandbox API without a sandbox: status %d", resp.StatusCode)
		}
	})
}

// sendAsBot makes the bot send chat a message with one inline button, as
// the onboarding bot's prompts do.
func sendAsBot(t *testing.T, fakeURL, token string, chat int64, text, data string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"chat_id": chat, "text": text,
		"reply_markup": map[string]any{"inline_keyboard": [][]map[string]string{{{"text": "Yes", "callback_data": data}}}}})
	resp, err := http.Post(fakeURL+"/bot"+token+"/sendMessage", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("sendMessage: status %d", resp.StatusCode)
	}
}

func TestConsoleNeedsASession(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	srv := webtest.NewWith(t, web.Options{DB: db, AdminToken: adminToken, Outbox: backend.NewOutbox(backend.OutboxOpts{DB: db})})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"/admin", "/admin/bot", "/admin/bot/events/1", "/admin/referral", "/admin/chat", "/admin/queues", "/admin/queues/x"} {
		resp, err := noRedirect.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/admin/login?next=") {
			t.Errorf("GET %s without a session: %d to %q", p, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	c := loginTo(t, srv)
	t.Run("every page renders when its subsystem is not wired", func(t *testing.T) {
		for _, p := range []string{"/admin", "/admin/bot", "/admin/bot/funnel", "/admin/bot/users/5", "/admin/referral",
			"/admin/referral/users/11111111-1111-4111-8111-111111111111", "/admin/chat", "/admin/queues"} {
			c.get(t, p, http.StatusOK)
		}
	})
	t.Run("a session-expired poll sends the whole page to the login form", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/admin/login?next=/admin/bot", nil)
		req.Header.Set("HX-Request", "true")
		req.Header.Set("HX-Current-URL", srv.URL+"/admin/bot?state=dead")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("HX-Redirect"); got != "/admin/login?next="+url.QueryEscape("/admin/bot?state=dead") {
			t.Fatalf("HX-Redirect %q", got)
		}
	})
	t.Run("a cross-site console POST is refused even with a session", func(t *testing.T) {
		resp, _ := c.post(t, "/admin/queues/x/purge", url.Values{"confirm": {"yes"}}, "Sec-Fetch-Site", "cross-site")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}
