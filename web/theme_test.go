package web_test

import (
	"net/http"
	"net/url"
	"testing"

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
}
