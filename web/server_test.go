package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
	"switchyard/web"
	"switchyard/web/webtest"
)

const adminToken = "0123456789abcdef0123456789abcdef"

// echoRoutes is a JSON endpoint for the tests: it decodes a body and echoes it.
func echoRoutes(r *mux.Router) {
	r.Handle("/echo", httpjson.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		var body struct {
			Name string `json:"name"`
		}
		if err := httpjson.Decode(r, &body); err != nil {
			return err
		}
		httpjson.Write(w, http.StatusOK, body)
		return nil
	})).Methods(http.MethodPost)
	r.Handle("/panic", http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
}

func newServer(t *testing.T, db *store.DB) *httptest.Server {
	t.Helper()
	q := queue.New(queue.NewOpts{DB: db, Name: "receiver.flow"})
	for i := range 3 {
		if _, err := q.Send(context.Background(), queue.Message{Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	return webtest.NewWith(t, web.Options{
		DB: db, AdminToken: adminToken, BodyLimit: 1024,
		Admin:  []web.RoutesFunc{echoRoutes},
		Queues: queue.NewAdmin(queue.AdminOpts{DB: db}),
	}).Server
}

type errorBody struct {
	Error struct{ Code, Message string } `json:"error"`
}

func do(t *testing.T, req *http.Request) (*http.Response, errorBody) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var eb errorBody
	if resp.StatusCode >= 400 {
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s %s: status %d with content type %q, want JSON", req.Method, req.URL.Path, resp.StatusCode, ct)
		}
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Error.Code == "" {
			t.Fatalf("%s %s: status %d body %q is not a JSON error", req.Method, req.URL.Path, resp.StatusCode, raw)
		}
	}
	return resp, eb
}

func request(t *testing.T, method, url, token, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func TestAdminAPIAuth(t *testing.T) {
	t.Parallel()
	srv := newServer(t, storetest.New(t))
	sameLength := strings.Repeat("x", len(adminToken))
	cases := []struct {
		name, header string
		want         int
	}{
		{"no Authorization header is refused", "", 401},
		{"a wrong token of the same length is refused", "Bearer " + sameLength, 401},
		{"a wrong token of another length is refused", "Bearer short", 401},
		{"a malformed header is refused", "Basic " + adminToken, 401},
		{"an empty bearer is refused", "Bearer ", 401},
		{"the right token is let through", "Bearer " + adminToken, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := request(t, http.MethodPost, srv.URL+"/admin/api/echo", "", `{"name":"x"}`)
			if c.header != "" {
				req.Header.Set("Authorization", c.header)
			}
			resp, eb := do(t, req)
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
			if c.want == 401 && eb.Error.Code != "unauthorized" {
				t.Fatalf("code %q", eb.Error.Code)
			}
		})
	}
	t.Run("an unknown admin path without a token is 401, not 404", func(t *testing.T) {
		resp, _ := do(t, request(t, http.MethodGet, srv.URL+"/admin/api/nothing-here", "", ""))
		if resp.StatusCode != 401 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func TestBodies(t *testing.T) {
	t.Parallel()
	srv := newServer(t, storetest.New(t))
	cases := []struct {
		name, body string
		want       int
		code       string
	}{
		{"a body over the cap is 413", `{"name":"` + strings.Repeat("a", 2000) + `"}`, 413, "body_too_large"},
		{"malformed JSON is 400", `{"name":`, 400, "bad_request"},
		{"an unknown field is 400", `{"nom":"x"}`, 400, "bad_request"},
		{"two values are 400", `{"name":"x"}{"name":"y"}`, 400, "bad_request"},
		{"an empty body is 400", ``, 400, "bad_request"},
		{"a good body is 200", `{"name":"x"}`, 200, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, eb := do(t, request(t, http.MethodPost, srv.URL+"/admin/api/echo", adminToken, c.body))
			if resp.StatusCode != c.want || eb.Error.Code != c.code {
				t.Fatalf("status %d code %q, want %d %q", resp.StatusCode, eb.Error.Code, c.want, c.code)
			}
		})
	}
	t.Run("a body over the cap without Content-Length is 413", func(t *testing.T) {
		req := request(t, http.MethodPost, srv.URL+"/admin/api/echo", adminToken, "")
		req.Body = io.NopCloser(strings.NewReader(`{"name":"` + strings.Repeat("a", 2000) + `"}`))
		req.ContentLength = -1
		resp, _ := do(t, req)
		if resp.StatusCode != 413 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
	t.Run("a panic is a JSON 500", func(t *testing.T) {
		resp, eb := do(t, request(t, http.MethodGet, srv.URL+"/admin/api/panic", adminToken, ""))
		if resp.StatusCode != 500 || eb.Error.Code != "internal" {
			t.Fatalf("status %d code %q", resp.StatusCode, eb.Error.Code)
		}
	})
}

func TestMethodNotAllowedListsAllow(t *testing.T) {
	t.Parallel()
	srv := newServer(t, storetest.New(t))
	cases := []struct {
		name, method, path, token, allow string
	}{
		{"a root route lists its methods", http.MethodPost, "/healthz", "", "GET, HEAD"},
		{"a route of one method lists it", http.MethodDelete, "/metrics", "", "GET"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, eb := do(t, request(t, c.method, srv.URL+c.path, c.token, ""))
			if resp.StatusCode != http.StatusMethodNotAllowed || eb.Error.Code != "method_not_allowed" {
				t.Fatalf("status %d code %q, want 405 method_not_allowed", resp.StatusCode, eb.Error.Code)
			}
			if got := resp.Header.Get("Allow"); got != c.allow {
				t.Fatalf("Allow %q, want %q (RFC 9110 asks a 405 to list the methods)", got, c.allow)
			}
		})
	}
}

func TestCrossOrigin(t *testing.T) {
	t.Parallel()
	srv := newServer(t, storetest.New(t))
	req := request(t, http.MethodPost, srv.URL+"/admin/api/echo", adminToken, `{"name":"x"}`)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, eb := do(t, req)
	if resp.StatusCode != 403 || eb.Error.Code != "cross_origin" {
		t.Fatalf("cross-site POST: status %d code %q", resp.StatusCode, eb.Error.Code)
	}
	req = request(t, http.MethodPost, srv.URL+"/admin/logout", "", "")
	req.Header.Set("Origin", "https://evil.example")
	if resp, _ := do(t, req); resp.StatusCode != 403 {
		t.Fatalf("cross-origin logout: status %d", resp.StatusCode)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	srv := newServer(t, db)
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, _ := do(t, request(t, http.MethodGet, srv.URL+path, "", "")); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, resp.StatusCode)
		}
	}
	resp, _ := do(t, request(t, http.MethodGet, srv.URL+"/metrics", "", ""))
	if resp.StatusCode != 200 {
		t.Fatalf("metrics: %d", resp.StatusCode)
	}

	t.Run("a database that cannot be written makes readyz 503 and the process keeps serving", func(t *testing.T) {
		// Every write now fails as on a read-only file.
		allowWrites := storetest.RefuseWrites(t, db)
		// Readiness is cached for a couple of seconds (so probes stay cheap):
		// it turns within that time.
		testwait.Until(t, 10*time.Second, "readyz 503 unavailable", func() bool {
			resp, eb := do(t, request(t, http.MethodGet, srv.URL+"/readyz", "", ""))
			return resp.StatusCode == 503 && eb.Error.Code == "unavailable"
		})
		if resp, _ := do(t, request(t, http.MethodGet, srv.URL+"/healthz", "", "")); resp.StatusCode != 200 {
			t.Fatalf("healthz after: %d", resp.StatusCode)
		}
		allowWrites()
		testwait.Until(t, 10*time.Second, "readyz 200 after recovery", func() bool {
			resp, _ := do(t, request(t, http.MethodGet, srv.URL+"/readyz", "", ""))
			return resp.StatusCode == 200
		})
	})
}

func TestConsoleLogin(t *testing.T) {
	t.Parallel()
	srv := newServer(t, storetest.New(t))
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}

	resp, err := client.Get(srv.URL + "/admin/queues")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Request.URL.Path != "/admin/login" {
		t.Fatalf("without a session the console sent us to %s", resp.Request.URL)
	}

	resp, err = client.PostForm(srv.URL+"/admin/login", url.Values{"token": {"wrong"}, "next": {"/admin/queues"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("wrong token: status %d", resp.StatusCode)
	}

	resp, err = client.PostForm(srv.URL+"/admin/login", url.Values{"token": {adminToken}, "next": {"/admin/queues"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/admin/queues" {
		t.Fatalf("after login: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	if !strings.Contains(string(body), `data-testid="queue-receiver.flow"`) {
		t.Fatalf("queues page does not list the queue:\n%s", body)
	}
	var session *http.Cookie
	for _, c := range resp.Request.Response.Cookies() {
		if c.Name == "switchyard_session" {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v, want HttpOnly SameSite=Strict", session)
	}

	t.Run("the session also opens the admin API", func(t *testing.T) {
		req := request(t, http.MethodPost, srv.URL+"/admin/api/echo", "", `{"name":"x"}`)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})

	t.Run("a forged session cookie is refused", func(t *testing.T) {
		req := request(t, http.MethodGet, srv.URL+"/admin/api/echo", "", "")
		req.AddCookie(&http.Cookie{Name: "switchyard_session", Value: "9999999999.deadbeef"})
		if resp, _ := do(t, req); resp.StatusCode != 401 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	})
}

func TestAccessLogHidesBotTokens(t *testing.T) {
	t.Parallel()
	var buf testwait.Buffer
	srv := webtest.NewWith(t, web.Options{
		DB: storetest.New(t), AdminToken: adminToken,
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
	})
	resp, err := http.Get(srv.URL + "/sandbox/telegram/bot123:AAsecretPART_x-y/getMe?token=" + adminToken)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	logged := buf.String()
	if !strings.Contains(logged, "/bot123:<token>/getMe") || strings.Contains(logged, "AAsecretPART") || strings.Contains(logged, adminToken) {
		t.Fatalf("access log shows a secret or lost the path:\n%s", logged)
	}
}
