package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/store/storetest"
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
