package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/httpjson/httpjsontest"
	"switchyard/openapi/openapitest"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
	"switchyard/web"
)

// wiredApp is the whole application as serve builds it — every role, the
// sandbox Bot API — on a migrated database, with known secrets and its log
// in a buffer, served over real HTTP. Its workers do not run.
type wiredApp struct {
	srv  *httptest.Server
	app  *app
	db   *store.DB
	sec  secrets
	logs *syncLog
	// openapi validates every exchange on a documented route (Handler).
	openapi *openapitest.Validator
}

// syncLog is a log destination tests can read while the app writes.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func newWiredApp(t testing.TB, sec secrets, env map[string]string, args ...string) *wiredApp {
	t.Helper()
	cfg, err := parseConfig("serve", append([]string{"--log-level", "debug", "--log-format", "json"}, args...),
		func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// With --clock manual the store's clock is the manual one, as serve opens it.
	db := storetest.NewWith(t, store.Options{Clock: cfg.Clock.storeClock()})
	logs := &syncLog{}
	var handler http.Handler = http.NotFoundHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handler.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	a, err := wire(context.Background(), cfg, db, sec, newLogger(cfg, logs), urls{self: srv.URL, public: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	// Every exchange on a documented route is validated against the served
	// OpenAPI document (openapitest).
	v := openapitest.Served(t, a.handler)
	handler = v.Handler(t, a.handler)
	return &wiredApp{srv: srv, app: a, db: db, sec: sec, logs: logs, openapi: v}
}

// walkSecrets are the secrets of the route walk.
var walkSecrets = secrets{
	AdminToken:   "walk-admin-token-0123456789abcdef",
	BotToBackend: "walk-bot-to-backend-0123456789",
	BotWebhook:   "walkBotWebhookSecret_0123",
	OmniWebhook:  "walkOmniWebhookSecret_0123",
}

// guard is how a route is protected.
type guard string

const (
	guardAdminAPI guard = "admin API"      // the admin Bearer token or a console session
	guardConsole  guard = "console"        // a console session
	guardBot      guard = "bot contract"   // BOT_TO_BACKEND_SECRET as a Bearer token
	guardWebhook  guard = "webhook secret" // X-Telegram-Bot-Api-Secret-Token
	guardOpen     guard = "open"           // health, readiness, metrics, OpenAPI, assets, the login page
)

// walkRoute is one route and method of the app.
type walkRoute struct {
	method, template string
	guard            guard
}

func (r walkRoute) String() string { return r.method + " " + r.template }

// stateChanging reports whether the method changes state.
func (r walkRoute) stateChanging() bool {
	return r.method != http.MethodGet && r.method != http.MethodHead && r.method != http.MethodOptions
}

// allRoutes walks every route the wired server answers (web.Server.Walk) and
// names the guard each must have from where it lives. A route in no known
// place fails the walk: someone must say what protects it.
func allRoutes(t *testing.T, h http.Handler) (routes []walkRoute, prefixes []string) {
	t.Helper()
	srv, ok := h.(*web.Server)
	if !ok {
		t.Fatalf("the app's handler is a %T, not a *web.Server", h)
	}
	err := srv.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		if route.GetHandler() == nil {
			return nil // a subrouter's own route
		}
		tmpl, err := route.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := route.GetMethods()
		if err != nil { // a prefix for any method
			if tmpl != "/admin/api/" { // the admin API's router, walked on its own
				prefixes = append(prefixes, tmpl)
			}
			return nil
		}
		g, known := guardOf(tmpl)
		if !known {
			t.Errorf("route %s is in no place whose guard the walk knows: which guard protects it?", tmpl)
		}
		for _, m := range methods {
			if m == http.MethodHead && slices.Contains(methods, http.MethodGet) {
				continue
			}
			routes = append(routes, walkRoute{m, tmpl, g})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return routes, prefixes
}

// guardOf is the guard a route must have, by where it lives.
func guardOf(tmpl string) (guard, bool) {
	switch {
	case strings.HasPrefix(tmpl, "/admin/api/"):
		return guardAdminAPI, true
	case tmpl == "/admin/login" || tmpl == "/admin/logout":
		return guardOpen, true
	case tmpl == "/admin" || strings.HasPrefix(tmpl, "/admin/"):
		return guardConsole, true
	case strings.HasPrefix(tmpl, "/bot/"), strings.HasPrefix(tmpl, "/auth/"):
		return guardBot, true
	case strings.HasPrefix(tmpl, "/webhooks/"):
		return guardWebhook, true
	case slices.Contains([]string{"/", "/healthz", "/readyz", "/metrics", "/static/", "/openapi.json"}, tmpl):
		return guardOpen, true
	}
	return guardOpen, false
}

var pathVar = regexp.MustCompile(`\{([A-Za-z]+)(?::[^}]*)?\}`)

// concrete fills a route template's variables with plausible values.
func concrete(tmpl string) string {
	return pathVar.ReplaceAllStringFunc(tmpl, func(v string) string {
		switch name := pathVar.FindStringSubmatch(v)[1]; name {
		case "userId":
			return "11111111-1111-4111-8111-111111111111"
		case "name", "queue":
			return "receiver.flow"
		case "topic":
			return "pin.identity.users.v1"
		case "group":
			return "referral-identity-users"
		default:
			return "1"
		}
	})
}

// walker sends the walk's requests and reads their access-log lines.
type walker struct {
	t       *testing.T
	w       *wiredApp
	session *http.Cookie
	n       int
}

type walkAnswer struct {
	status int
	header http.Header
	body   []byte
	route  string // the route template the access log names
}

func (wk *walker) do(method, path string, header http.Header, body string) walkAnswer {
	wk.t.Helper()
	wk.n++
	id := fmt.Sprintf("walk-%d", wk.n)
	req, err := http.NewRequest(method, wk.w.srv.URL+path, strings.NewReader(body))
	if err != nil {
		wk.t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	req.Header.Set("X-Request-Id", id)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		wk.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return walkAnswer{status: resp.StatusCode, header: resp.Header, body: raw, route: wk.loggedRoute(id)}
}

// loggedRoute waits for the access-log line of request id (written once the
// handler returned, which can be after the client has the answer) and
// returns its route.
func (wk *walker) loggedRoute(id string) string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		if route, ok := findRoute(wk.w.logs.String(), id); ok || time.Now().After(deadline) {
			return route
		}
		time.Sleep(time.Millisecond)
	}
}

func findRoute(logs, id string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg       string `json:"msg"`
			RequestID string `json:"request_id"`
			Route     string `json:"route"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "http" && line.RequestID == id {
			return line.Route, true
		}
	}
	return "", false
}

// errorCode is the code of a {"error":{"code","message"}} body, or "".
func errorCode(body []byte) string {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
		return ""
	}
	return e.Error.Code
}

// credentials are the headers that pass a route's guard.
func (wk *walker) credentials(g guard) http.Header {
	switch g {
	case guardAdminAPI:
		return http.Header{"Authorization": {"Bearer " + wk.w.sec.AdminToken}}
	case guardConsole:
		return http.Header{"Cookie": {wk.session.String()}}
	case guardBot:
		return http.Header{"Authorization": {"Bearer " + wk.w.sec.BotToBackend}}
	case guardWebhook:
		return http.Header{}
	}
	return http.Header{}
}

func TestEveryRouteIsGuarded(t *testing.T) {
	t.Parallel()
	w := newWiredApp(t, walkSecrets, nil)
	wk := &walker{t: t, w: w}

	login := wk.do(http.MethodGet, "/admin/login?token="+url.QueryEscape(w.sec.AdminToken), nil, "")
	for _, c := range (&http.Response{Header: login.header}).Cookies() {
		if c.Name == "switchyard_session" {
			wk.session = &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	if login.status != http.StatusSeeOther || wk.session == nil {
		t.Fatalf("the login link answered %d without a session cookie", login.status)
	}

	routes, prefixes := allRoutes(t, w.app.handler)
	if len(routes) < 90 {
		t.Fatalf("the walk found only %d routes: %v", len(routes), routes)
	}
	if !slices.Equal(prefixes, []string{sandboxPath + "/"}) {
		t.Fatalf("routes for any method: %v, want only the sandbox Bot API at %s/", prefixes, sandboxPath)
	}
	// A user, an outbox event and a topic record, so that answers carry
	// times for the walk to check.
	seed := http.Header{"Authorization": {"Bearer " + w.sec.AdminToken}, "Content-Type": {"application/json"}, "Sec-Fetch-Site": {"same-origin"}}
	for _, s := range []struct{ path, body string }{
		{"/admin/api/users", `{"link":"walker","name":"Walker"}`},
		{"/admin/api/bot/events", `{"eventType":"wallet_connected","magnetUid":1,"payload":{"addr":"EQwalk"}}`},
		{"/admin/api/topics/pin.identity.users.v1/messages?key=walk", `{"aggregateId":"walk"}`},
	} {
		if a := wk.do(http.MethodPost, s.path, seed, s.body); a.status >= 300 {
			t.Fatalf("seeding %s: %d %s", s.path, a.status, a.body)
		}
	}
	var refused, crossOrigin, times int
	for _, r := range routes {
		path := concrete(r.template)
		if r.template == "/static/" {
			path = "/static/console.css"
		}
		t.Run(fmt.Sprintf("%s %s (%s)", r.method, r.template, r.guard), func(t *testing.T) {
			wk.t = t
			// Without credentials.
			a := wk.do(r.method, path, nil, "")
			switch r.guard {
			case guardAdminAPI, guardBot:
				if a.status != http.StatusUnauthorized || errorCode(a.body) != "unauthorized" {
					t.Fatalf("without credentials: %d %s, want 401 with the JSON error", a.status, a.body)
				}
				wrong := http.Header{"Authorization": {"Bearer " + strings.Repeat("x", 32)}}
				if b := wk.do(r.method, path, wrong, ""); b.status != http.StatusUnauthorized {
					t.Fatalf("with a wrong token: %d %s, want 401", b.status, b.body)
				}
				refused++
			case guardConsole:
				if r.method == http.MethodGet {
					if loc := a.header.Get("Location"); a.status != http.StatusSeeOther || !strings.HasPrefix(loc, "/admin/login?next=") {
						t.Fatalf("without a session: %d to %q, want 303 to the login page", a.status, loc)
					}
				} else if a.status != http.StatusUnauthorized || errorCode(a.body) != "unauthorized" {
					t.Fatalf("without a session: %d %s, want 401 with the JSON error", a.status, a.body)
				}
				forged := http.Header{"Cookie": {"switchyard_session=9999999999.deadbeef"}}
				if b := wk.do(r.method, path, forged, ""); b.status != a.status {
					t.Fatalf("with a forged session: %d, want %d as without one", b.status, a.status)
				}
				refused++
			case guardWebhook:
				for _, secret := range []string{"", "wrong-secret"} {
					b := wk.do(r.method, path, http.Header{"X-Telegram-Bot-Api-Secret-Token": {secret}}, `{"update_id":1}`)
					if b.status != http.StatusUnauthorized || errorCode(b.body) != "unauthorized" {
						t.Fatalf("with the secret %q: %d %s, want 401", secret, b.status, b.body)
					}
				}
				refused++
			case guardOpen:
				if a.status >= 500 || a.status == http.StatusUnauthorized && r.template != "/admin/login" {
					t.Fatalf("an open route answered %d %s", a.status, a.body)
				}
			}

			// With credentials: the route exists where the walk says, and
			// the guard lets it through.
			creds := wk.credentials(r.guard)
			if r.guard == guardWebhook {
				secret := w.sec.OmniWebhook
				if r.template == "/webhooks/bot" {
					secret = w.sec.BotWebhook
				}
				creds.Set("X-Telegram-Bot-Api-Secret-Token", secret)
			}
			if r.stateChanging() {
				creds.Set("Sec-Fetch-Site", "same-origin")
			}
			body := ""
			if r.String() == "POST /admin/login" {
				creds.Set("Content-Type", "application/x-www-form-urlencoded")
				body = "token=" + url.QueryEscape(w.sec.AdminToken)
			}
			b := wk.do(r.method, path, creds, body)
			if b.status == http.StatusUnauthorized || b.status == http.StatusForbidden || b.status >= 500 {
				t.Fatalf("with credentials: %d %s", b.status, b.body)
			}
			if b.route != r.template {
				t.Fatalf("the access log names the route %q, want %q: the walk's list is out of date", b.route, r.template)
			}
			if strings.HasPrefix(b.header.Get("Content-Type"), "application/json") {
				if bad, err := httpjsontest.BadTimes(b.body); err != nil || len(bad) > 0 {
					t.Fatalf("with credentials: times not in httpjson.TimeLayout %v (%v) in %s", bad, err, b.body)
				}
				times += httpjsontest.Times(b.body)
			}

			// A state change under /admin refuses another origin, with
			// credentials or without.
			if !r.stateChanging() || !strings.HasPrefix(r.template, "/admin") {
				return
			}
			for _, h := range []http.Header{
				{"Sec-Fetch-Site": {"cross-site"}},
				{"Sec-Fetch-Site": {"same-site"}},
				{"Origin": {"https://evil.example"}},
			} {
				for k, vs := range wk.credentials(r.guard) {
					h[k] = vs
				}
				c := wk.do(r.method, path, h, "")
				if c.status != http.StatusForbidden || errorCode(c.body) != "cross_origin" {
					t.Fatalf("cross-origin %v: %d %s, want 403 cross_origin", h, c.status, c.body)
				}
			}
			crossOrigin++
		})
	}
	wk.t = t
	t.Logf("%d routes walked: %d refused without credentials, %d state changes refused from another origin, %d times checked",
		len(routes), refused, crossOrigin, times)
	if times == 0 {
		t.Error("no answer of the walk carried a time: the time format went unchecked")
	}

	t.Run("paths under /admin/api that match no route still ask for credentials", func(t *testing.T) {
		wk.t = t
		for _, p := range []string{"/admin/api/", "/admin/api/nothing", "/admin/api/users/1/nothing", "/admin/api/../api/queues"} {
			if a := wk.do(http.MethodGet, p, nil, ""); a.status != http.StatusUnauthorized && a.status != http.StatusMovedPermanently {
				t.Errorf("GET %s: %d %s, want 401", p, a.status, a.body)
			}
		}
	})

	t.Run("the sandbox Bot API answers like Telegram", func(t *testing.T) {
		wk.t = t
		good := sandboxTokens(t, wk.w.srv.URL, wk.w.sec.AdminToken)["onboarding"]
		telegramError := func(a walkAnswer) int {
			var e struct {
				Ok        bool `json:"ok"`
				ErrorCode int  `json:"error_code"`
			}
			if json.Unmarshal(a.body, &e) != nil || e.Ok {
				return 0
			}
			return e.ErrorCode
		}
		if a := wk.do(http.MethodGet, sandboxPath+"/bot"+good+"/getMe", nil, ""); a.status != http.StatusOK || !bytes.Contains(a.body, []byte(`"ok":true`)) {
			t.Fatalf("getMe with the sandbox bot's token: %d %s", a.status, a.body)
		}
		botID, _, _ := strings.Cut(good, ":")
		for _, tc := range []struct {
			path string
			want int
		}{
			{sandboxPath + "/bot" + botID + ":wrong-secret/getMe", http.StatusUnauthorized},
			{sandboxPath + "/bot" + fakebot.Token(sandboxOnboardingBotID) + "/getMe", http.StatusUnauthorized},
			{sandboxPath + "/bot" + botID + ":" + strings.Repeat("A", 35) + "/getUpdates", http.StatusUnauthorized},
			{sandboxPath + "/botnot-a-token/getMe", http.StatusNotFound},
			{sandboxPath + "/bot/getMe", http.StatusNotFound},
			{sandboxPath + "/bot" + good + "/noSuchMethod", http.StatusNotFound},
			{sandboxPath + "/", http.StatusNotFound},
		} {
			a := wk.do(http.MethodPost, tc.path, nil, "")
			if a.status != tc.want || telegramError(a) != tc.want {
				t.Errorf("POST %s: %d %s, want %d with Telegram's error body", tc.path, a.status, a.body, tc.want)
			}
		}
	})
}
