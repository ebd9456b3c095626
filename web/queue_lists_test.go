package web_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"switchyard/queue"
	"switchyard/queue/queuetest"
	"switchyard/store/storetest"
	"switchyard/web"
)

// deadOnPage are the ids of the dead letters a queue page lists, in order.
func deadOnPage(doc *goquery.Document) []string {
	var ids []string
	tid(doc, "dead-list").Find(`li[data-testid^="dead-"]`).Each(func(_ int, s *goquery.Selection) {
		id, _ := s.Attr("data-testid")
		ids = append(ids, strings.TrimPrefix(id, "dead-"))
	})
	return ids
}

func href(t *testing.T, doc *goquery.Document, testid string) string {
	t.Helper()
	h, ok := tid(doc, testid).Attr("href")
	if !ok {
		t.Fatalf("no %s link", testid)
	}
	return h
}

func TestQueueDeadLetterList(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := storetest.New(t)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	c := newConsole(t, web.Options{DB: db, Queues: qa})
	ids, err := queuetest.SeedDead(ctx, db, queuetest.DeadOpts{Queue: "lists.q", N: 120,
		Body: func(i int) []byte { return fmt.Appendf(nil, `{"n":%d,"note":"parcel %03d"}`, i, i) }})
	if err != nil {
		t.Fatal(err)
	}
	newest := slices.Clone(ids)
	slices.Reverse(newest)

	t.Run("the list pages newest first with its position, to the last window and back", func(t *testing.T) {
		doc := c.get(t, "/admin/queues/lists.q", http.StatusOK)
		if got := trimmed(tid(doc, "dead-pager-position")); got != "1–50 of 120 dead letters" {
			t.Fatalf("position %q", got)
		}
		if !slices.Equal(deadOnPage(doc), newest[:50]) || tid(doc, "dead-pager-newer").Length() != 0 {
			t.Fatal("the first window is not the 50 newest, or links to newer ones")
		}
		doc = c.get(t, href(t, doc, "dead-pager-older"), http.StatusOK)
		if got := trimmed(tid(doc, "dead-pager-position")); got != "51–100 of 120 dead letters" || !slices.Equal(deadOnPage(doc), newest[50:100]) {
			t.Fatalf("second window at %q", got)
		}
		doc = c.get(t, href(t, doc, "dead-pager-older"), http.StatusOK)
		if got := trimmed(tid(doc, "dead-pager-position")); got != "101–120 of 120 dead letters" || !slices.Equal(deadOnPage(doc), newest[100:]) {
			t.Fatalf("last window at %q", got)
		}
		if tid(doc, "dead-pager-older").Length() != 0 || tid(doc, "dead-pager-last").Length() != 0 {
			t.Fatal("the last window links to an older one")
		}
		doc = c.get(t, href(t, doc, "dead-pager-newer"), http.StatusOK)
		if got := trimmed(tid(doc, "dead-pager-position")); got != "51–100 of 120 dead letters" || !slices.Equal(deadOnPage(doc), newest[50:100]) {
			t.Fatalf("back to the newer window at %q", got)
		}
		doc = c.get(t, href(t, c.get(t, "/admin/queues/lists.q", http.StatusOK), "dead-pager-last"), http.StatusOK)
		if got := trimmed(tid(doc, "dead-pager-position")); got != "71–120 of 120 dead letters" || !slices.Equal(deadOnPage(doc), newest[70:]) ||
			tid(doc, "dead-pager-older").Length() != 0 {
			t.Fatalf("the oldest window at %q, or it links to an older one", got)
		}
		c.get(t, "/admin/queues/lists.q?before=nonsense", http.StatusBadRequest)
	})

	t.Run("the search finds dead letters by payload text and by id, and keeps it in the pager", func(t *testing.T) {
		doc := c.get(t, "/admin/queues/lists.q?q="+url.QueryEscape("parcel 07"), http.StatusOK)
		want := []string{ids[79], ids[78], ids[77], ids[76], ids[75], ids[74], ids[73], ids[72], ids[71], ids[70]}
		if got := deadOnPage(doc); !slices.Equal(got, want) {
			t.Fatalf("found %d, want parcels 070–079", len(got))
		}
		if got := trimmed(tid(doc, "dead-pager-position")); got != "1–10 of 10 dead letters" {
			t.Fatalf("position %q", got)
		}
		if v, _ := tid(doc, "dead-search-input").Attr("value"); v != "parcel 07" {
			t.Fatalf("search box holds %q", v)
		}
		if !strings.Contains(trimmed(tid(doc, "search-note")), "first 4 KB of its payload") {
			t.Fatal("the page does not say what the search looks at")
		}
		doc = c.get(t, "/admin/queues/lists.q?q="+ids[5], http.StatusOK)
		if got := deadOnPage(doc); !slices.Equal(got, []string{ids[5]}) {
			t.Fatalf("by id: %v", got)
		}
		doc = c.get(t, "/admin/queues/lists.q?q=parcel", http.StatusOK)
		if older := href(t, doc, "dead-pager-older"); !strings.Contains(older, "q=parcel") {
			t.Fatalf("the older link %q drops the search", older)
		}
	})

	t.Run("chosen rows are redriven after a confirmation that states their number", func(t *testing.T) {
		doc := c.get(t, "/admin/queues/lists.q", http.StatusOK)
		form := tid(doc, "dead-bulk")
		if tid(doc, "choose-"+newest[0]).AttrOr("form", "") != "dead-bulk" || form.Find(`button[value="chosen"]`).Length() != 2 {
			t.Fatal("rows have no check boxes in the bulk form")
		}
		chosen := []string{newest[1], newest[2], newest[3]}
		values := url.Values{"scope": {"chosen"}, "id": chosen, "back": {"/admin/queues/lists.q"}}
		resp, body := c.post(t, "/admin/queues/lists.q/dead/redrive", values)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Redrive the 3 chosen dead letters of lists.q?") {
			t.Fatalf("confirmation:\n%s", body)
		}
		if n, _ := qa.CountDead(ctx, queue.DeadFilter{Queue: "lists.q"}, ""); n.Total != 120 {
			t.Fatal("the redrive ran before the confirmation")
		}
		landed, flash := c.act(t, "/admin/queues/lists.q/dead/redrive", values)
		if landed != "/admin/queues/lists.q" || !strings.Contains(trimmed(flash), "Redrove 3 dead letter(s)") {
			t.Fatalf("landed %s, flash %q", landed, trimmed(flash))
		}
		doc = c.get(t, "/admin/queues/lists.q", http.StatusOK)
		if got := deadOnPage(doc); slices.ContainsFunc(got, func(id string) bool { return slices.Contains(chosen, id) }) || len(got) != 50 {
			t.Fatal("a redriven dead letter is still listed")
		}
		live := c.get(t, "/admin/queues/lists.q?list=live", http.StatusOK)
		for _, id := range chosen {
			if tid(live, "live-"+id).Length() != 1 {
				t.Errorf("%s is not a live message again", id)
			}
		}
		if _, flash := c.act(t, "/admin/queues/lists.q/dead/redrive", url.Values{"scope": {"chosen"}}); !flash.HasClass("bad") {
			t.Errorf("nothing chosen says %q", trimmed(flash))
		}
	})

	t.Run("all matching the search are deleted after a confirmation that states their number", func(t *testing.T) {
		// Parcels 110–119, less the three redriven above (116–118).
		values := url.Values{"scope": {"all"}, "q": {"parcel 11"}, "back": {"/admin/queues/lists.q?q=parcel+11"}}
		_, body := c.post(t, "/admin/queues/lists.q/dead/purge", values)
		if !strings.Contains(body, "Delete all 7 dead letters of lists.q matching “parcel 11” for good?") {
			t.Fatalf("confirmation:\n%s", body)
		}
		_, flash := c.act(t, "/admin/queues/lists.q/dead/purge", values)
		if !strings.Contains(trimmed(flash), "Deleted 7 dead letter(s)") {
			t.Fatalf("flash %q", trimmed(flash))
		}
		if n, _ := qa.CountDead(ctx, queue.DeadFilter{Queue: "lists.q"}, ""); n.Total != 110 {
			t.Fatalf("%d dead letters left, want 110", n.Total)
		}
	})

	t.Run("a consumer group's dead letters page the same way", func(t *testing.T) {
		topic, err := queue.NewTopic(ctx, queue.TopicOpts{DB: db, Name: "lists.t", Partitions: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topic.CreateGroup(ctx, "g", queue.StartEarliest); err != nil {
			t.Fatal(err)
		}
		recs, err := queuetest.SeedDead(ctx, db, queuetest.DeadOpts{Queue: "lists.t", Group: "g", N: 60})
		if err != nil {
			t.Fatal(err)
		}
		doc := c.get(t, "/admin/queues/lists.t?group=g", http.StatusOK)
		if got := trimmed(tid(doc, "dead-pager-position")); got != "1–50 of 60 dead letters" || deadOnPage(doc)[0] != recs[59] {
			t.Fatalf("position %q", got)
		}
		older := href(t, doc, "dead-pager-older")
		if !strings.Contains(older, "group=g") {
			t.Fatalf("the older link %q drops the group", older)
		}
		if tid(doc, "dead-bulk").Find(`input[name="group"][value="g"]`).Length() != 1 {
			t.Fatal("the bulk form does not name the group")
		}
		doc = c.get(t, "/admin/queues/lists.t?group=g&q=k7", http.StatusOK)
		if got := deadOnPage(doc); !slices.Equal(got, []string{recs[7]}) {
			t.Fatalf("search by record key: %v", got)
		}
		values := url.Values{"group": {"g"}, "scope": {"chosen"}, "id": {recs[0], recs[1]}}
		if _, body := c.post(t, "/admin/queues/lists.t/dead/redrive", values); !strings.Contains(body, "Redrive the 2 chosen dead letters of lists.t (group g)?") {
			t.Fatalf("confirmation:\n%s", body)
		}
		if _, flash := c.act(t, "/admin/queues/lists.t/dead/redrive", values); !strings.Contains(trimmed(flash), "Redrove 2 dead letter(s)") {
			t.Fatalf("flash %q", trimmed(flash))
		}
	})
}

func TestQueueLiveList(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := storetest.New(t)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	c := newConsole(t, web.Options{DB: db, Queues: qa})
	q := queue.New(queue.NewOpts{DB: db, Name: "lists.live"})
	for i := range 60 {
		if _, err := q.Send(ctx, queue.Message{Body: fmt.Appendf(nil, `{"n":%d,"note":"crate %02d"}`, i, i)}); err != nil {
			t.Fatal(err)
		}
	}
	doc := c.get(t, "/admin/queues/lists.live?list=live", http.StatusOK)
	if got := trimmed(tid(doc, "live-pager-position")); got != "1–50 of 60 live messages" {
		t.Fatalf("position %q", got)
	}
	doc = c.get(t, href(t, doc, "live-pager-older"), http.StatusOK)
	if got := trimmed(tid(doc, "live-pager-position")); got != "51–60 of 60 live messages" || doc.Find(`[data-testid="live-table"] tbody tr`).Length() != 10 {
		t.Fatalf("second window at %q", got)
	}
	doc = c.get(t, "/admin/queues/lists.live?list=live&q=crate+42", http.StatusOK)
	if rows := doc.Find(`[data-testid="live-table"] tbody tr`); rows.Length() != 1 || !strings.Contains(trimmed(rows), "crate 42") {
		t.Fatalf("search for crate 42 found %d", rows.Length())
	}
	if tid(doc, "live-state-ready").Length() != 1 || !strings.Contains(href(t, doc, "live-state-ready"), "q=crate+42") {
		t.Fatal("the state filters do not keep the search")
	}
}
