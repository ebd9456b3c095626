package web_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/web"
)

// The header's theme switch without JavaScript: a POST that sets the cookie
// and leads back to the page, which the server then draws in that theme.
func TestThemeSwitch(t *testing.T) {
	t.Parallel()
	c := newConsole(t, web.Options{DB: storetest.New(t)})
	theme := func(t *testing.T) (string, bool) {
		t.Helper()
		return c.get(t, "/admin/queues", http.StatusOK).Find("html").Attr("data-theme")
	}

	t.Run("with no choice the page names no theme, so the system's preference holds", func(t *testing.T) {
		if v, ok := theme(t); ok {
			t.Fatalf("data-theme=%q before any choice", v)
		}
	})

	for _, want := range []string{"dark", "light"} {
		t.Run("choosing "+want+" leads back to the page, drawn "+want, func(t *testing.T) {
			resp, body := c.post(t, "/admin/theme", url.Values{"theme": {want}, "next": {"/admin/queues?x=1"}})
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/admin/queues?x=1" {
				t.Fatalf("status %d, Location %q\n%s", resp.StatusCode, resp.Header.Get("Location"), body)
			}
			if v, _ := theme(t); v != want {
				t.Fatalf("data-theme=%q, want %q", v, want)
			}
		})
	}

	t.Run("choosing system forgets the choice", func(t *testing.T) {
		c.post(t, "/admin/theme", url.Values{"theme": {"system"}, "next": {"/admin"}})
		if v, ok := theme(t); ok {
			t.Fatalf("data-theme=%q after choosing the system's", v)
		}
	})

	t.Run("another theme is refused and the next address stays inside the console", func(t *testing.T) {
		if resp, _ := c.post(t, "/admin/theme", url.Values{"theme": {"neon"}}); resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("theme=neon: status %d, want 400", resp.StatusCode)
		}
		resp, _ := c.post(t, "/admin/theme", url.Values{"theme": {"dark"}, "next": {"https://evil.example/"}})
		if loc := resp.Header.Get("Location"); loc != "/admin" {
			t.Fatalf("next=https://evil.example/ led to %q", loc)
		}
	})

	t.Run("on a confirmation page the switch leads back to where Cancel does, not to the POST-only action", func(t *testing.T) {
		db := storetest.New(t)
		c := newConsole(t, web.Options{DB: db, Queues: queue.NewAdmin(queue.AdminOpts{DB: db})})
		_, body := c.post(t, "/admin/queues/some.queue/purge", url.Values{"back": {"/admin/queues/some.queue"}})
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		form := doc.Find(`form[action="/admin/theme"]`)
		if form.Length() == 0 {
			t.Fatalf("no theme switch on the confirmation page:\n%.500s", body)
		}
		if next := form.First().Find(`input[name="next"]`).AttrOr("value", ""); next != "/admin/queues/some.queue" {
			t.Fatalf("the switch leads to %q", next)
		}
	})
}
