package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/bot/onboarding"
	"switchyard/bot/onboarding/onboardingtest"
	"switchyard/omni"
	"switchyard/omni/omnitest"
	"switchyard/referral"
	"switchyard/referral/referraltest"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
	"switchyard/web"
)

// rowIDs are the data-testid of a list's rows, in order.
func rowIDs(sel *goquery.Selection) []string {
	var ids []string
	sel.Each(func(_ int, s *goquery.Selection) { ids = append(ids, s.AttrOr("data-testid", "")) })
	return ids
}

// The Bot outbox's event list at depth: windows older and newer with their
// position, the search, and the bulk redrive of chosen or all matching dead
// letters through a confirmation that states the count.
func TestOutboxList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	ob := backend.NewOutbox(backend.OutboxOpts{DB: db})
	var dead []contract.EventID
	for i := range 3 {
		dead = append(dead, deadEvent(t, ob, clock, contract.UID(40+i)))
	}
	dead2 := deadEvent(t, ob, clock, 99)
	c := newConsole(t, web.Options{DB: db, Outbox: ob})
	var ids []contract.EventID
	for i := range 120 {
		id, err := ob.Emit(ctx, backend.NewEvent{Type: contract.EventNewPartner, Target: backend.Target{MagnetUID: contract.UID(1000 + i)},
			Payload: json.RawMessage(fmt.Sprintf(`{"partnerName":"partner-%03d"}`, i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	events := func(doc *goquery.Document) []string {
		return rowIDs(doc.Find(`[data-testid="event-table"] tbody tr[data-testid]`))
	}

	t.Run("the first window shows the newest 50 of all and links to older ones", func(t *testing.T) {
		doc := c.get(t, "/admin/bot", http.StatusOK)
		if got := trimmed(tid(doc, "events-pager-position")); got != "1–50 of 124 events" {
			t.Fatalf("position %q", got)
		}
		if got := events(doc); len(got) != 50 || got[0] != fmt.Sprint("event-", ids[119]) {
			t.Fatalf("first window %v", got)
		}
		if tid(doc, "events-pager-newer").Length() != 0 || tid(doc, "events-pager-older").Length() != 1 {
			t.Fatal("the first window has a newer link or no older one")
		}
	})
	t.Run("older then newer windows come back to the same rows with the position right", func(t *testing.T) {
		doc := c.get(t, "/admin/bot", http.StatusOK)
		first := events(doc)
		older := tid(doc, "events-pager-older").AttrOr("href", "")
		doc = c.get(t, older, http.StatusOK)
		if got := trimmed(tid(doc, "events-pager-position")); got != "51–100 of 124 events" {
			t.Fatalf("second window at %q (%s)", got, older)
		}
		doc = c.get(t, tid(doc, "events-pager-older").AttrOr("href", ""), http.StatusOK)
		if got := trimmed(tid(doc, "events-pager-position")); got != "101–124 of 124 events" {
			t.Fatalf("last window at %q", got)
		}
		if got := events(doc); len(got) != 24 || got[23] != fmt.Sprint("event-", dead[0]) || tid(doc, "events-pager-older").Length() != 0 {
			t.Fatalf("last window %v", got)
		}
		doc = c.get(t, tid(doc, "events-pager-newer").AttrOr("href", ""), http.StatusOK)
		if got := trimmed(tid(doc, "events-pager-position")); got != "51–100 of 124 events" {
			t.Fatalf("back to the second window at %q", got)
		}
		doc = c.get(t, tid(doc, "events-pager-newer").AttrOr("href", ""), http.StatusOK)
		if got := events(doc); strings.Join(got, ",") != strings.Join(first, ",") || trimmed(tid(doc, "events-pager-position")) != "1–50 of 124 events" {
			t.Fatalf("back to the first window: %v at %q", got, trimmed(tid(doc, "events-pager-position")))
		}
	})
	t.Run("a search finds events by payload text and keeps the state filter", func(t *testing.T) {
		doc := c.get(t, "/admin/bot?q=partner-07", http.StatusOK)
		if got := events(doc); len(got) != 10 || trimmed(tid(doc, "events-pager-position")) != "1–10 of 10 events" {
			t.Fatalf("found %v at %q", got, trimmed(tid(doc, "events-pager-position")))
		}
		doc = c.get(t, fmt.Sprint("/admin/bot?q=", ids[7]), http.StatusOK)
		if got := events(doc); len(got) != 1 || got[0] != fmt.Sprint("event-", ids[7]) {
			t.Fatalf("an id found %v", got)
		}
		doc = c.get(t, "/admin/bot?state=dead", http.StatusOK)
		if tid(doc, "event-search").Find(`input[name="state"][value="dead"]`).Length() != 1 {
			t.Fatal("the search form drops the state filter")
		}
		doc = c.get(t, "/admin/bot?state=dead&q=partner", http.StatusOK)
		if got := events(doc); len(got) != 0 {
			t.Fatalf("dead and partner found %v", got)
		}
	})
	t.Run("the dead-lettered list redrives two chosen events after a confirmation stating 2", func(t *testing.T) {
		doc := c.get(t, "/admin/bot?state=dead", http.StatusOK)
		if tid(doc, "bulk-events").Length() != 1 || tid(doc, fmt.Sprint("choose-", dead[0])).Length() != 1 {
			t.Fatal("the dead-lettered list has no bulk form or check boxes")
		}
		if tid(c.get(t, "/admin/bot", http.StatusOK), "bulk-events").Length() != 0 {
			t.Fatal("the list of every state offers a bulk redrive")
		}
		form := url.Values{"scope": {"chosen"}, "id": {fmt.Sprint(dead[0]), fmt.Sprint(dead[1])}, "back": {"/admin/bot?state=dead"}}
		resp, body := c.post(t, "/admin/bot/events/redrive", form)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Redrive the 2 chosen dead-lettered events?") {
			t.Fatalf("status %d, want a confirmation of 2:\n%s", resp.StatusCode, body)
		}
		if n, _ := ob.CountEvents(ctx, backend.EventFilter{State: backend.StateDead}, 0); n != 4 {
			t.Fatalf("%d dead before the confirmation, want 4", n)
		}
		landed, flash := c.act(t, "/admin/bot/events/redrive", form)
		if landed != "/admin/bot?state=dead" || !strings.Contains(trimmed(flash), "2 dead-lettered events redriven") {
			t.Fatalf("landed on %s with %q", landed, trimmed(flash))
		}
		if e, _ := ob.GetEvent(ctx, dead[2]); e.State != backend.StateDead {
			t.Fatalf("the event not chosen is %s", e.State)
		}
	})
	t.Run("redrive all matching states the count and redrives them", func(t *testing.T) {
		form := url.Values{"scope": {"all"}, "back": {"/admin/bot?state=dead"}}
		resp, body := c.post(t, "/admin/bot/events/redrive", form)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Redrive all 2 dead-lettered events") {
			t.Fatalf("status %d, want a confirmation of 2:\n%s", resp.StatusCode, body)
		}
		form.Set("user", "uid:99")
		_, body = c.post(t, "/admin/bot/events/redrive", form)
		if !strings.Contains(body, "Redrive all 1 dead-lettered events") {
			t.Fatalf("the user filter is not counted:\n%s", body)
		}
		if _, flash := c.act(t, "/admin/bot/events/redrive", form); !strings.Contains(trimmed(flash), "1 dead-lettered events redriven") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		if e, _ := ob.GetEvent(ctx, dead2); e.State != backend.StatePending {
			t.Fatalf("event %d is %s", dead2, e.State)
		}
	})
}

// The chat inbox at depth: threads in windows with their position, searched
// by message text and Telegram id; a long thread's newest messages first,
// older ones a window away.
func TestInboxList(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	base := time.Date(2026, 2, 1, 10, 0, 0, 0, time.UTC)
	var seeds []omnitest.InboxThread
	for i := range 120 {
		th := omnitest.InboxThread{UserID: fmt.Sprint(7000 + i), Name: fmt.Sprint("Customer ", i), At: base.Add(time.Duration(i) * time.Minute),
			Texts: []string{fmt.Sprint("hello ", i, " #1")}}
		if i == 0 {
			th.Texts = nil
			for seq := 1; seq <= 70; seq++ {
				th.Texts = append(th.Texts, fmt.Sprint("hello 0 #", seq))
			}
		}
		if i == 33 {
			th.Texts = []string{"where is my parcel? #1"}
		}
		seeds = append(seeds, th)
	}
	long := omnitest.Inbox(t, db, seeds)[0]
	c := newConsole(t, web.Options{DB: db, Chat: omni.NewAdmin(omni.AdminOpts{DB: db})})
	threads := func(doc *goquery.Document) []string { return rowIDs(tid(doc, "inbox").Find("li[data-testid]")) }

	t.Run("the inbox pages its threads with their position", func(t *testing.T) {
		doc := c.get(t, "/admin/chat", http.StatusOK)
		if got := trimmed(tid(doc, "threads-pager-position")); got != "1–50 of 120 threads" || len(threads(doc)) != 50 {
			t.Fatalf("first window at %q with %d threads", got, len(threads(doc)))
		}
		doc = c.get(t, tid(doc, "threads-pager-older").AttrOr("href", ""), http.StatusOK)
		doc = c.get(t, tid(doc, "threads-pager-older").AttrOr("href", ""), http.StatusOK)
		if got := trimmed(tid(doc, "threads-pager-position")); got != "101–120 of 120 threads" || len(threads(doc)) != 20 {
			t.Fatalf("last window at %q with %d threads", got, len(threads(doc)))
		}
		if !strings.Contains(trimmed(tid(doc, "inbox").Find("li").Last()), "Customer 0") {
			t.Fatal("the oldest thread is not last")
		}
		doc = c.get(t, tid(doc, "threads-pager-newer").AttrOr("href", ""), http.StatusOK)
		if got := trimmed(tid(doc, "threads-pager-position")); got != "51–100 of 120 threads" {
			t.Fatalf("back a window at %q", got)
		}
		c.get(t, "/admin/chat?before=nonsense", http.StatusBadRequest)
	})
	t.Run("a search finds a thread by message text or Telegram id", func(t *testing.T) {
		doc := c.get(t, "/admin/chat?q=parcel", http.StatusOK)
		if got := threads(doc); len(got) != 1 || !strings.Contains(trimmed(tid(doc, "inbox")), "Customer 33") {
			t.Fatalf("found %v", got)
		}
		doc = c.get(t, "/admin/chat?q=7005&state=open", http.StatusOK)
		if got := threads(doc); len(got) != 1 || !strings.Contains(trimmed(tid(doc, "inbox")), "Customer 5") {
			t.Fatalf("found %v", got)
		}
		if tid(doc, "thread-search").Find(`input[name="state"][value="open"]`).Length() != 1 {
			t.Fatal("the search drops the state")
		}
		if got := trimmed(tid(c.get(t, "/admin/chat?q=nobody+here", http.StatusOK), "inbox-empty")); got != "No conversation matches." {
			t.Fatalf("an empty search says %q", got)
		}
	})
	t.Run("a long thread shows its newest messages, the older ones a window away", func(t *testing.T) {
		doc := c.get(t, fmt.Sprint("/admin/chat/threads/", long), http.StatusOK)
		msgs := tid(doc, "messages").Find("li")
		if got := trimmed(tid(doc, "messages-pager-position")); got != "1–50 of 70 messages" || msgs.Length() != 50 {
			t.Fatalf("newest window at %q with %d messages", got, msgs.Length())
		}
		if !strings.HasSuffix(trimmed(msgs.Last().Find(".text")), "#70") || !strings.HasSuffix(trimmed(msgs.First().Find(".text")), "#21") {
			t.Fatalf("the window runs %q to %q, want #21 to #70", trimmed(msgs.First().Find(".text")), trimmed(msgs.Last().Find(".text")))
		}
		doc = c.get(t, tid(doc, "messages-pager-older").AttrOr("href", ""), http.StatusOK)
		msgs = tid(doc, "messages").Find("li")
		if got := trimmed(tid(doc, "messages-pager-position")); got != "51–70 of 70 messages" || msgs.Length() != 20 ||
			!strings.HasSuffix(trimmed(msgs.First().Find(".text")), "#1") {
			t.Fatalf("older window at %q with %d messages", got, msgs.Length())
		}
	})
}

// The referral links and replicas on their own pages: windows with their
// position, a search, links deleted in bulk through a confirmation that
// states the count, phones masked.
func TestReferralLists(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	ref, err := referral.New(ctx, referral.Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	owner := "11111111-1111-4111-8111-111111111111"
	ids := map[string]string{}
	for i := range 60 {
		l, err := ref.CreateLink(ctx, referral.NewLink{URL: fmt.Sprintf("promo-%03d", i), OwnerUserID: referral.UserID(owner), TenantID: owner, Channel: "web"})
		if err != nil {
			t.Fatal(err)
		}
		ids[l.URL] = string(l.ID)
	}
	referraltest.Replica(t, db, "22222222-2222-4222-8222-222222222222", "Vera", "Demo", "+79991234567", db.Now())
	c := newConsole(t, web.Options{DB: db, Referral: ref})
	links := func(doc *goquery.Document) []string {
		return rowIDs(tid(doc, "link-table").Find("tbody tr[data-testid]"))
	}

	t.Run("the Referral page links to every link and replica", func(t *testing.T) {
		doc := c.get(t, "/admin/referral", http.StatusOK)
		if got := trimmed(tid(doc, "all-links")); !strings.HasPrefix(got, "All 60 links") {
			t.Fatalf("the link to every link says %q", got)
		}
	})
	t.Run("the links page in windows with its position, and a search", func(t *testing.T) {
		doc := c.get(t, "/admin/referral/links", http.StatusOK)
		if got := trimmed(tid(doc, "links-pager-position")); got != "1–50 of 60 links" || len(links(doc)) != 50 {
			t.Fatalf("first window at %q with %d links", got, len(links(doc)))
		}
		doc = c.get(t, tid(doc, "links-pager-older").AttrOr("href", ""), http.StatusOK)
		if got := trimmed(tid(doc, "links-pager-position")); got != "51–60 of 60 links" || len(links(doc)) != 10 {
			t.Fatalf("second window at %q with %d links", got, len(links(doc)))
		}
		doc = c.get(t, "/admin/referral/links?q=PROMO-01", http.StatusOK)
		if got := trimmed(tid(doc, "links-pager-position")); got != "1–10 of 10 links" {
			t.Fatalf("the search shows %q", got)
		}
		c.get(t, "/admin/referral/links?before=x", http.StatusBadRequest)
	})
	t.Run("two chosen links are deleted after a confirmation stating 2", func(t *testing.T) {
		form := url.Values{"scope": {"chosen"}, "id": {ids["promo-000"], ids["promo-001"]}, "back": {"/admin/referral/links"}}
		resp, body := c.post(t, "/admin/referral/links/delete", form)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Delete the 2 chosen links?") {
			t.Fatalf("status %d, want a confirmation of 2:\n%s", resp.StatusCode, body)
		}
		if _, flash := c.act(t, "/admin/referral/links/delete", form); !strings.Contains(trimmed(flash), "2 links deleted") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		if n, _ := ref.CountLinks(ctx, referral.LinkFilter{}, 0); n != 58 {
			t.Fatalf("%d live links, want 58", n)
		}
	})
	t.Run("all links matching the search are deleted after a confirmation stating their count", func(t *testing.T) {
		doc := c.get(t, "/admin/referral/links?q=promo-05", http.StatusOK)
		if tid(doc, "bulk-links").Find(`input[name="q"][value="promo-05"]`).Length() != 1 {
			t.Fatal("the bulk form does not carry the search")
		}
		form := url.Values{"scope": {"all"}, "q": {"promo-05"}, "back": {"/admin/referral/links?q=promo-05"}}
		_, body := c.post(t, "/admin/referral/links/delete", form)
		if !strings.Contains(body, "Delete all 10 live links matching") {
			t.Fatalf("want a confirmation of 10:\n%s", body)
		}
		if _, flash := c.act(t, "/admin/referral/links/delete", form); !strings.Contains(trimmed(flash), "10 links deleted") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		if n, _ := ref.CountLinks(ctx, referral.LinkFilter{}, 0); n != 48 {
			t.Fatalf("%d live links, want 48", n)
		}
	})
	t.Run("replicas are found by a phone's last digits and show it masked", func(t *testing.T) {
		doc := c.get(t, "/admin/referral/replicas?q=4567", http.StatusOK)
		rows := tid(doc, "replica-table").Find("tbody tr[data-testid]")
		if rows.Length() != 1 || trimmed(rows.Find(`[data-testid="phone"]`)) != "+7***4567" || strings.Contains(doc.Text(), "79991234567") {
			t.Fatalf("found %d replicas: %q", rows.Length(), trimmed(rows))
		}
		if got := trimmed(tid(c.get(t, "/admin/referral/replicas?q=vera", http.StatusOK), "replicas-pager-position")); got != "1–1 of 1 replicas" {
			t.Fatalf("a name search shows %q", got)
		}
	})
}

// The funnel's users in windows with their position, at a stage, found by
// Telegram id.
func TestFunnelList(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ob, err := onboarding.New(onboarding.Opts{DB: db, BackendURL: "http://127.0.0.1:1", BackendSecret: "secret-0123456789abcdef",
		TelegramToken: fakebot.Token(4545), TelegramAPIURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	base := db.Now()
	var users []onboardingtest.Funnel
	for i := range 70 {
		users = append(users, onboardingtest.Funnel{TelegramID: contract.TelegramID(fmt.Sprint(9000 + i)), UID: contract.UID(300 + i),
			Stage: onboarding.Stage(1 + i%2), At: base.Add(time.Duration(i) * time.Second)})
	}
	onboardingtest.Funnels(t, db, users)
	c := newConsole(t, web.Options{DB: db, Onboarding: ob, Funnel: onboarding.NewStats(db)})
	doc := c.get(t, "/admin/bot/funnel", http.StatusOK)
	if got := trimmed(tid(doc, "funnel-pager-position")); got != "1–50 of 70 Telegram users" {
		t.Fatalf("first window at %q", got)
	}
	doc = c.get(t, tid(doc, "funnel-pager-older").AttrOr("href", ""), http.StatusOK)
	if got := trimmed(tid(doc, "funnel-pager-position")); got != "51–70 of 70 Telegram users" || tid(doc, "funnel-user-9000").Length() != 1 {
		t.Fatalf("second window at %q", got)
	}
	doc = c.get(t, "/admin/bot/funnel?stage=2&q=9001", http.StatusOK)
	if got := trimmed(tid(doc, "funnel-pager-position")); got != "1–1 of 1 Telegram users" || tid(doc, "funnel-user-9001").Length() != 1 {
		t.Fatalf("the search shows %q", got)
	}
}
