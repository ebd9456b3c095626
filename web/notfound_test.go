package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
	"switchyard/web"
)

// A console address that no route takes is a page inside the layout —
// behind the session like every console page — not the API's JSON; the API
// and every other address keep their JSON errors.
func TestConsoleNotFoundIsAPage(t *testing.T) {
	t.Parallel()
	c := newConsole(t, web.Options{DB: storetest.New(t)})

	t.Run("a mistyped console address is a 404 page in the layout", func(t *testing.T) {
		doc := c.get(t, "/admin/queuez", http.StatusNotFound)
		if msg := trimmed(doc.Find(`[data-testid="message"]`)); !strings.Contains(msg, "/admin/queuez") {
			t.Fatalf("message %q, want one naming the address", msg)
		}
		if doc.Find(`nav a[href="/admin/queues"]`).Length() == 0 || doc.Find(`form[action="/admin/search"]`).Length() == 0 {
			t.Fatal("the 404 page is not inside the layout (no nav, no search box)")
		}
	})

	t.Run("a console address asked with the wrong method is a 405 page saying which it takes", func(t *testing.T) {
		// Every POST-only console address, whichever routes come after it:
		// mux alone answers some of them 404.
		for _, path := range []string{
			"/admin/queues/some.queue/purge", "/admin/queues/some.queue/pause",
			"/admin/chat/threads/1/reply", "/admin/referral/links/delete", "/admin/bot/events/redrive", "/admin/theme",
		} {
			resp, err := c.client.Get(c.base + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" ||
				!strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), `data-testid="message"`) {
				t.Errorf("GET %s: status %d, Allow %q, Content-Type %q:\n%.300s", path, resp.StatusCode, resp.Header.Get("Allow"), resp.Header.Get("Content-Type"), body)
			}
		}
	})

	t.Run("without a session the console's 404 sends the browser to log in, as any console page does", func(t *testing.T) {
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Get(c.base + "/admin/queuez")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/admin/login") {
			t.Fatalf("status %d, Location %q; want a redirect to the login", resp.StatusCode, resp.Header.Get("Location"))
		}
	})

	for _, path := range []string{"/admin/api/queuez", "/nope"} {
		t.Run("outside the console "+path+" answers the API's JSON 404", func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+adminToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct {
				Error struct{ Code string } `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != http.StatusNotFound || e.Error.Code == "" {
				t.Fatalf("status %d, error %+v (%v); want a JSON 404", resp.StatusCode, e, err)
			}
		})
	}
}

// A queue with more dead letters than its page lists says how many there
// are and which it shows: the page said "Dead letters (100)" for 116.
func TestQueuePageCountsEveryDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	c := newConsole(t, web.Options{DB: db, Queues: qa})
	q := queue.New(queue.NewOpts{DB: db, Name: "console.many"})
	const n = 116
	for i := range n {
		if _, err := q.Send(ctx, queue.Message{Body: fmt.Appendf(nil, `{"i":%d}`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	w := q.Start(ctx, queue.WorkerOpts{Handler: failingHandler, PollInterval: 10 * time.Millisecond})
	testwait.Until(t, 20*time.Second, "every message dead-lettered", func() bool {
		st, err := qa.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st.Queues {
			if s.Name == "console.many" {
				return s.Dead == n
			}
		}
		return false
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	doc := c.get(t, "/admin/queues/console.many", http.StatusOK)
	if got := trimmed(tid(doc, "dead-total")); got != fmt.Sprint(n) {
		t.Errorf("the heading counts %q dead letters, want %d", got, n)
	}
	if got, want := trimmed(tid(doc, "dead-pager-position")), fmt.Sprintf("1–50 of %d dead letters", n); got != want {
		t.Errorf("the page says it shows %q, want %q", got, want)
	}
	if tid(doc, "dead-pager-older").Length() != 1 {
		t.Error("no link to the older dead letters")
	}
}
