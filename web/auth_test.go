package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"switchyard/adminsession"
	"switchyard/authlimit"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/web"
)

// authBundle is a console on a database with a manual clock, driven through
// its handler so each request can come from the client address a test picks.
type authBundle struct {
	db    *store.DB
	clock *store.ManualClock
	srv   *web.Server
}

func setupAuth(t *testing.T) *authBundle {
	t.Helper()
	db, clock := storetest.NewWithClock(t)
	b := &authBundle{db: db, clock: clock}
	b.srv = b.server(adminToken)
	return b
}

// server is a console on b's database under token.
func (b *authBundle) server(token string) *web.Server {
	return web.New(web.Options{
		DB: b.db, AdminToken: token, Admin: []web.RoutesFunc{echoRoutes},
		AuthLimiter: authlimit.New(authlimit.Opts{Now: b.clock.Now}),
	})
}

// send serves one request from addr on srv.
func send(srv http.Handler, addr string, req *http.Request) *httptest.ResponseRecorder {
	req.RemoteAddr = addr
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

func loginForm(token string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/admin/login", strings.NewReader(url.Values{"token": {token}, "next": {"/admin/queues"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

// login posts the form from addr and returns the answer and its session cookie.
func (b *authBundle) login(t *testing.T, srv http.Handler, addr, token string) (*httptest.ResponseRecorder, *http.Cookie) {
	t.Helper()
	rec := send(srv, addr, loginForm(token))
	for _, c := range rec.Result().Cookies() {
		if c.Name == "switchyard_session" && c.Value != "" {
			return rec, &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	return rec, nil
}

func withCookie(req *http.Request, c *http.Cookie) *http.Request {
	req.AddCookie(c)
	return req
}

// opens reports whether the cookie opens a console page and the admin API.
func opens(t *testing.T, srv http.Handler, c *http.Cookie) bool {
	t.Helper()
	page := send(srv, "192.0.2.1:1", withCookie(httptest.NewRequest(http.MethodGet, "/admin/queues", nil), c))
	echo := httptest.NewRequest(http.MethodPost, "/admin/api/echo", strings.NewReader(`{"name":"x"}`))
	echo.Header.Set("Content-Type", "application/json")
	api := send(srv, "192.0.2.1:1", withCookie(echo, c))
	switch {
	case page.Code == http.StatusOK && api.Code == http.StatusOK:
		return true
	case page.Code == http.StatusSeeOther && strings.HasPrefix(page.Header().Get("Location"), "/admin/login") && api.Code == http.StatusUnauthorized:
		return false
	}
	t.Fatalf("the page answered %d (to %q) and the API %d: neither open nor refused", page.Code, page.Header().Get("Location"), api.Code)
	return false
}

// sessionRows counts the sessions the database keeps, of any token.
func sessionRows(t *testing.T, db *store.DB) int {
	t.Helper()
	n, err := adminsession.New(adminsession.Opts{DB: db, Token: adminToken}).Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestConsoleSessions(t *testing.T) {
	t.Parallel()

	t.Run("two logins in the same second get different sessions", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		_, first := b.login(t, b.srv, "192.0.2.1:1", adminToken)
		_, second := b.login(t, b.srv, "192.0.2.1:2", adminToken)
		if first == nil || second == nil {
			t.Fatal("a login set no session cookie")
		}
		if first.Value == second.Value {
			t.Fatalf("both logins got the session %q", first.Value)
		}
		if !opens(t, b.srv, first) || !opens(t, b.srv, second) {
			t.Fatal("a fresh session does not open the console")
		}
	})

	t.Run("logging out revokes the session on the server, not only in the browser", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		_, kept := b.login(t, b.srv, "192.0.2.1:1", adminToken)
		_, other := b.login(t, b.srv, "192.0.2.1:1", adminToken)
		out := send(b.srv, "192.0.2.1:1", withCookie(httptest.NewRequest(http.MethodPost, "/admin/logout", nil), kept))
		if out.Code != http.StatusSeeOther {
			t.Fatalf("logout: %d %s", out.Code, out.Body)
		}
		// The copy of the cookie a browser would have dropped still exists here.
		if opens(t, b.srv, kept) {
			t.Fatal("the logged-out cookie still opens the console")
		}
		if !opens(t, b.srv, other) {
			t.Fatal("logging out one session ended another")
		}
	})

	t.Run("a session issued under an old admin token is refused after the token changes", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		_, old := b.login(t, b.srv, "192.0.2.1:1", adminToken)
		rotated := b.server("rotated-admin-token-0123456789abcdef")
		if opens(t, rotated, old) {
			t.Fatal("a session of the old token opens the console under the new one")
		}
		_, fresh := b.login(t, rotated, "192.0.2.1:1", "rotated-admin-token-0123456789abcdef")
		if fresh == nil || !opens(t, rotated, fresh) {
			t.Fatal("a session of the new token does not open the console")
		}
		if n := sessionRows(t, b.db); n != 1 {
			t.Fatalf("%d session rows after a login under the new token, want the old one pruned", n)
		}
	})

	t.Run("a session ends after 12 hours and is pruned at the next login", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		_, c := b.login(t, b.srv, "192.0.2.1:1", adminToken)
		b.clock.Advance(12*time.Hour - time.Second)
		if !opens(t, b.srv, c) {
			t.Fatal("the session ended early")
		}
		b.clock.Advance(time.Second)
		if opens(t, b.srv, c) {
			t.Fatal("the session outlived 12 hours")
		}
		b.login(t, b.srv, "192.0.2.1:1", adminToken)
		if n := sessionRows(t, b.db); n != 1 {
			t.Fatalf("%d session rows, want the expired one pruned", n)
		}
	})

	// That the database keeps the id only hashed is adminsession's
	// TestSessions ("the id is kept only as its SHA-256").
	t.Run("the cookie holds the session's random id", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		_, c := b.login(t, b.srv, "192.0.2.1:1", adminToken)
		if len(c.Value) != 43 {
			t.Fatalf("cookie %q", c.Value)
		}
	})
}

func TestAuthThrottle(t *testing.T) {
	t.Parallel()
	const guesser = "203.0.113.66:4000"
	wrongLogins := func(t *testing.T, b *authBundle, addr string, n int) {
		t.Helper()
		for i := range n {
			if rec, _ := b.login(t, b.srv, addr, "wrong-token-guess"); rec.Code != http.StatusUnauthorized {
				t.Fatalf("wrong login %d: %d, want 401", i+1, rec.Code)
			}
		}
	}
	throttled := func(t *testing.T, rec *httptest.ResponseRecorder, retryAfter string) {
		t.Helper()
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != retryAfter {
			t.Fatalf("%d with Retry-After %q, want 429 with Retry-After %s: %s", rec.Code, rec.Header().Get("Retry-After"), retryAfter, rec.Body)
		}
	}

	t.Run("after five failed logins the next gets 429 with Retry-After, even with the right token", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		wrongLogins(t, b, guesser, 5)
		rec, c := b.login(t, b.srv, guesser, adminToken)
		throttled(t, rec, "1")
		if c != nil || !strings.Contains(rec.Body.String(), "Too many failed attempts") {
			t.Fatalf("a throttled login got a session or no explanation: %s", rec.Body)
		}
		link := send(b.srv, guesser, httptest.NewRequest(http.MethodGet, "/admin/login?token="+adminToken, nil))
		throttled(t, link, "1")
	})

	t.Run("the wait grows with each failure after it", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		wrongLogins(t, b, guesser, 5)
		for _, want := range []string{"2", "4", "8"} {
			b.clock.Advance(time.Minute)
			wrongLogins(t, b, guesser, 1)
			rec, _ := b.login(t, b.srv, guesser, adminToken)
			throttled(t, rec, want)
		}
	})

	t.Run("a different client address is unaffected", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		wrongLogins(t, b, guesser, 5)
		if rec, c := b.login(t, b.srv, "198.51.100.20:1", adminToken); rec.Code != http.StatusSeeOther || c == nil {
			t.Fatalf("another address: %d", rec.Code)
		}
	})

	t.Run("a success resets the count", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		for range 3 {
			wrongLogins(t, b, guesser, 4)
			if rec, _ := b.login(t, b.srv, guesser, adminToken); rec.Code != http.StatusSeeOther {
				t.Fatalf("the right token after four failures: %d", rec.Code)
			}
		}
	})

	t.Run("the admin Bearer token is throttled, and counts with the login", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		bearer := func(token string) *httptest.ResponseRecorder {
			req := httptest.NewRequest(http.MethodPost, "/admin/api/echo", strings.NewReader(`{"name":"x"}`))
			req.Header.Set("Authorization", "Bearer "+token)
			return send(b.srv, guesser, req)
		}
		for range 3 {
			if rec := bearer("wrong-token-guess"); rec.Code != http.StatusUnauthorized {
				t.Fatalf("wrong Bearer: %d", rec.Code)
			}
		}
		wrongLogins(t, b, guesser, 2)
		rec := bearer(adminToken)
		throttled(t, rec, "1")
		if !strings.Contains(rec.Body.String(), `"code":"too_many_attempts"`) {
			t.Fatalf("429 body %s, want the JSON error", rec.Body)
		}
		if rec, _ := b.login(t, b.srv, guesser, adminToken); rec.Code != http.StatusTooManyRequests {
			t.Fatalf("login after Bearer failures: %d, want 429", rec.Code)
		}
	})

	t.Run("requests without a token count for nothing", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		for range 20 {
			send(b.srv, guesser, httptest.NewRequest(http.MethodGet, "/admin/api/echo", nil))
			send(b.srv, guesser, loginForm(""))
			send(b.srv, guesser, withCookie(httptest.NewRequest(http.MethodGet, "/admin/queues", nil), &http.Cookie{Name: "switchyard_session", Value: strings.Repeat("A", 43)}))
		}
		if rec, _ := b.login(t, b.srv, guesser, adminToken); rec.Code != http.StatusSeeOther {
			t.Fatalf("login: %d", rec.Code)
		}
	})

	t.Run("a live session works while its address is throttled", func(t *testing.T) {
		t.Parallel()
		b := setupAuth(t)
		_, c := b.login(t, b.srv, guesser, adminToken)
		wrongLogins(t, b, guesser, 5)
		page := send(b.srv, guesser, withCookie(httptest.NewRequest(http.MethodGet, "/admin/queues", nil), c))
		if page.Code != http.StatusOK {
			t.Fatalf("the console with a session from a throttled address: %d", page.Code)
		}
	})
}

func TestLoginBodyLimit(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	form := url.Values{"token": {"x"}, "pad": {strings.Repeat("a", 8<<10)}}.Encode()
	req := httptest.NewRequest(http.MethodPost, "/admin/login", strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if rec := send(b.srv, "192.0.2.1:1", req); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("an 8 KiB login form: %d, want 413", rec.Code)
	}
}
