// Package webtest starts the app's HTTP server (web.New) on a test's
// database, over real HTTP, and logs in to its console:
//
//	db := storetest.New(t)
//	srv := webtest.New(t, db)
//	console := srv.Login(t)
//
// The server is closed when the test ends.
package webtest

import (
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"switchyard/store"
	"switchyard/web"
)

// AdminToken is the admin token of a server whose options name none.
const AdminToken = "webtest-admin-token-0123456789abcdef"

// Server is the app's HTTP server on a test database.
type Server struct {
	*httptest.Server
	// Handler is the web.Server behind it, for requests served in-process.
	Handler *web.Server
	// Token is its admin token.
	Token string
}

// New starts web.New on db with no subsystem wired: health, readiness,
// metrics, the login and every console page in its "not wired" state.
func New(t testing.TB, db *store.DB) *Server {
	t.Helper()
	return NewWith(t, web.Options{DB: db})
}

// NewWith starts web.New with opts; an empty AdminToken is AdminToken. A
// nil opts.DB fails the test.
func NewWith(t testing.TB, opts web.Options) *Server {
	t.Helper()
	if opts.DB == nil {
		t.Fatal("webtest: the options name no database")
	}
	if opts.AdminToken == "" {
		opts.AdminToken = AdminToken
	}
	h := web.New(opts)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Server{Server: srv, Handler: h, Token: opts.AdminToken}
}

// Login signs in to the console with the admin token and returns a browser
// without JavaScript: a client with the session cookie in its jar that
// leaves redirects to the caller, so a test sees where an action leads.
func (s *Server) Login(t testing.TB) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(s.URL+"/admin/login", url.Values{"token": {s.Token}, "next": {"/admin"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/admin") {
		t.Fatalf("webtest: login answered %d to %q, want 303 to the console", resp.StatusCode, resp.Header.Get("Location"))
	}
	return c
}
