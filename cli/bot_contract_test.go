package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"switchyard/authlimit"
	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/httpjson/httpjsontest"
	"switchyard/openapi"
	"switchyard/openapi/openapitest"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
	"switchyard/web"
)

const (
	contractSecret     = "contract-bot-to-backend-secret-0123456789"
	contractAdminToken = "contract-admin-token-0123456789abcdef"
	// contractBodyLimit is the wired server's body cap, small so a 413 is cheap.
	contractBodyLimit = 4096
)

// contractStack is the bot's service API as serve mounts it — web.New's
// middleware (body cap, JSON 404/405), the bot routes on the root router and
// the backend's admin routes under /admin/api — on a migrated database,
// served over real HTTP.
type contractStack struct {
	db    *store.DB
	clock *store.ManualClock
	srv   *httptest.Server
}

func newContractStack(t *testing.T, limiter authlimit.Opts, readTimeout time.Duration) *contractStack {
	t.Helper()
	db, clock := storetest.NewWithClock(t)
	lim := authlimit.New(limiter)
	b := backend.New(backend.Opts{
		DB: db, Secret: contractSecret, BotUsername: "contract_bot", AuthLimiter: lim,
		PollInterval: 50 * time.Millisecond,
	})
	t.Cleanup(b.Shutdown)
	h := web.New(web.Options{
		DB: db, AdminToken: contractAdminToken, BodyLimit: contractBodyLimit, AuthLimiter: lim,
		Public:  []web.RoutesFunc{b.Routes},
		Admin:   []web.RoutesFunc{b.AdminRoutes},
		OpenAPI: apiDocument([]openapi.Part{backend.OpenAPI()}, []openapi.Part{backend.AdminOpenAPI()}),
	})
	// The fixtures' admin calls are validated against the document too.
	srv := httptest.NewUnstartedServer(openapitest.Served(t, h).Handler(t, h))
	srv.Config.ReadTimeout = readTimeout
	srv.Start()
	t.Cleanup(srv.Close)
	return &contractStack{db: db, clock: clock, srv: srv}
}

// unthrottled lets every wrong secret be checked (the 401 cases send many).
var unthrottled = authlimit.Opts{Free: math.MaxInt32}

// exchange is one request of the contract test and what must come of it.
type exchange struct {
	name   string
	method string
	path   string // with the query
	header http.Header
	body   string
	// noAuth sends no Authorization header (header may set another).
	noAuth bool
	// noType sends a body without a Content-Type (header may set another).
	noType bool
	want   int
	// valid says whether the document accepts the request: a request the
	// server refuses for its shape must be one the document refuses too,
	// and one the server takes (or refuses for the state it finds) one the
	// document accepts.
	valid bool
}

// openapiContract validates exchanges against the served document and records
// which documented answer each exercised.
type openapiContract struct {
	doc    *openapi3.T
	router routers.Router
	// seen is "operationId status" of every validated answer.
	mu      sync.Mutex
	seen    map[string]bool
	answers [][]byte
}

func loadContract(t *testing.T, s *contractStack) *openapiContract {
	t.Helper()
	resp, err := http.Get(s.srv.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %s", resp.StatusCode, raw)
	}
	if out := os.Getenv("SWITCHYARD_OPENAPI_OUT"); out != "" {
		// .ci/openapi-lint lints the document as served.
		if err := os.WriteFile(out, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("the served document does not load: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("the served document is not valid OpenAPI: %v", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &openapiContract{doc: doc, router: router, seen: map[string]bool{}}
}

func (c *openapiContract) options() *openapi3filter.Options {
	return &openapi3filter.Options{
		IncludeResponseStatus:             true,
		RejectWhenRequestBodyNotSpecified: true,
		MultiError:                        true,
		AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
			if in.SecuritySchemeName != "botAuth" {
				return fmt.Errorf("unknown security scheme %q", in.SecuritySchemeName)
			}
			if in.RequestValidationInput.Request.Header.Get("Authorization") != "Bearer "+contractSecret {
				return errors.New("no or a wrong BOT_TO_BACKEND_SECRET")
			}
			return nil
		},
	}
}

func (ex exchange) request(t *testing.T, base string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(ex.method, base+ex.path, strings.NewReader(ex.body))
	if err != nil {
		t.Fatal(err)
	}
	if ex.body == "" {
		req.Body, req.GetBody, req.ContentLength = http.NoBody, nil, 0
	}
	if !ex.noAuth {
		req.Header.Set("Authorization", "Bearer "+contractSecret)
	}
	if ex.body != "" && !ex.noType {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range ex.header {
		req.Header[k] = vs
	}
	return req
}

// route finds the documented operation of a request. A method the path
// does not take (405) is checked against the path's operation.
func (c *openapiContract) route(t *testing.T, req *http.Request) (*routers.Route, map[string]string) {
	t.Helper()
	route, params, err := c.router.FindRoute(req)
	if errors.Is(err, routers.ErrMethodNotAllowed) {
		probe := req.Clone(req.Context())
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			probe.Method = m
			if route, params, err = c.router.FindRoute(probe); err == nil {
				return route, params
			}
		}
	}
	if err != nil {
		t.Fatalf("%s %s is not in the document: %v", req.Method, req.URL.Path, err)
	}
	return route, params
}

// check sends ex to s, checks its status and validates request and answer
// against the document.
func (c *openapiContract) check(t *testing.T, s *contractStack, ex exchange) []byte {
	t.Helper()
	resp, err := s.srv.Client().Do(ex.request(t, s.srv.URL))
	if err != nil {
		t.Fatalf("%s: %v", ex.name, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != ex.want {
		t.Fatalf("%s: %s %s answered %d %s, want %d", ex.name, ex.method, ex.path, resp.StatusCode, body, ex.want)
	}
	c.validate(t, s, ex, resp.StatusCode, resp.Header, body)
	return body
}

func (c *openapiContract) validate(t *testing.T, s *contractStack, ex exchange, status int, header http.Header, body []byte) {
	t.Helper()
	// A fresh request, as sent, for the validator to read.
	req := ex.request(t, s.srv.URL)
	route, params := c.route(t, req)
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: c.options()}
	if status != http.StatusMethodNotAllowed {
		err := openapi3filter.ValidateRequest(context.Background(), in)
		switch {
		case ex.valid && err != nil:
			t.Fatalf("%s: the server answered %d, but the document refuses the request: %v", ex.name, status, err)
		case !ex.valid && err == nil:
			t.Fatalf("%s: the server refused the request with %d %s, but the document accepts it", ex.name, status, body)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: c.options()}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Fatalf("%s: the answer %d %s does not match the document: %v", ex.name, status, body, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[route.Operation.OperationID+" "+strconv.Itoa(status)] = true
	c.answers = append(c.answers, body)
}

// admin calls the backend's admin API (for the fixtures) and returns the
// answer, which the time check reads too.
func (c *openapiContract) admin(t *testing.T, s *contractStack, method, path, body string, want int, out any) {
	t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+"/admin/api"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+contractAdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("admin %s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	c.answers = append(c.answers, raw)
	c.mu.Unlock()
}

// operations are the document's operations of the bot's service API (tag
// bot), "METHOD /path" → operation; the admin API's are the route walk's.
func (c *openapiContract) operations() map[string]*openapi3.Operation {
	ops := map[string]*openapi3.Operation{}
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if slices.Contains(op.Tags, "bot") {
				ops[method+" "+path] = op
			}
		}
	}
	return ops
}

// concretePath fills the document's path template with a valid value.
func concretePath(tmpl string) string {
	return strings.ReplaceAll(tmpl, "{id}", "4242")
}

// TestOpenAPIContract sends every documented operation's requests — a
// success and each documented error — to a wired server and validates each
// request and answer against the served document with kin-openapi's
// openapi3filter. A documented answer no exchange produced fails the test,
// so a new operation or status needs its case; an answer the document does
// not list, or a request the document and the server judge differently,
// fails it too.
func TestOpenAPIContract(t *testing.T) {
	t.Parallel()
	s := newContractStack(t, unthrottled, 0)
	c := loadContract(t, s)

	// Fixtures, through the admin API: alice (bound to 4242) leads bob
	// (registered, with a wallet and an NFT, so the outbox has events);
	// carol has no Telegram id yet.
	var alice, bob, carol, dave backend.User
	c.admin(t, s, "POST", "/users", `{"link":"alice","name":"Alice","telegramId":"4242"}`, 201, &alice)
	c.admin(t, s, "POST", "/users", `{"link":"bob","name":"Bob","telegramId":"4343"}`, 201, &bob)
	c.admin(t, s, "POST", "/users", `{"link":"carol","name":"Carol"}`, 201, &carol)
	c.admin(t, s, "POST", "/users", `{"link":"dave","name":"Dave"}`, 201, &dave)
	s.clock.Advance(1234567 * time.Nanosecond) // a clock with sub-microsecond digits, as a real one has
	c.admin(t, s, "POST", fmt.Sprintf("/users/%d/wallet", bob.UID), `{"addr":"EQwallet"}`, 200, nil)
	c.admin(t, s, "POST", fmt.Sprintf("/users/%d/register", bob.UID), fmt.Sprintf(`{"leaderUid":%d}`, alice.UID), 200, nil)
	c.admin(t, s, "POST", fmt.Sprintf("/users/%d/nft", bob.UID), `{"level":"lp1"}`, 200, nil)
	c.admin(t, s, "GET", fmt.Sprintf("/users/%d", bob.UID), "", 200, nil)
	c.admin(t, s, "GET", "/bot/events", "", 200, nil)
	c.admin(t, s, "GET", "/bot/events/1", "", 200, nil)

	var pending contract.PendingResponse
	ack := func(name, body string, want int, valid bool) exchange {
		return exchange{name: name, method: "POST", path: "/bot/events/ack", body: body, want: want, valid: valid}
	}
	get := func(name, path string, want int, valid bool) exchange {
		return exchange{name: name, method: "GET", path: path, want: want, valid: valid}
	}
	post := func(name, path, body string, want int, valid bool) exchange {
		return exchange{name: name, method: "POST", path: path, body: body, want: want, valid: valid}
	}
	uid := func(u backend.User) string { return strconv.FormatInt(int64(u.UID), 10) }

	// Successes and the errors of each operation's own, in an order that
	// builds the state each needs.
	steps := []exchange{
		get("a page of pending events", "/bot/events/pending?limit=2", 200, true),
		get("a long poll that finds events at once", "/bot/events/pending?wait=30", 200, true),
		get("a wait above 30 is capped, not refused", "/bot/events/pending?wait=3600&limit=100000", 200, true),
		get("a limit of 0 is refused", "/bot/events/pending?limit=0", 400, false),
		get("a limit that is not a number is refused", "/bot/events/pending?limit=many", 400, false),
		get("a negative wait is refused", "/bot/events/pending?wait=-1", 400, false),
		get("a fractional wait is refused", "/bot/events/pending?wait=1.5", 400, false),
		ack("ack with null lists, as the Go zero value marshals", `{"processedIds":null,"retryIds":null}`, 200, true),
		ack("ack an event processed and retry another with a reason", `{"processedIds":[1],"retryIds":[2],"errors":{"2":"boom"}}`, 200, true),
		ack("ack an id in both lists", `{"processedIds":[3],"retryIds":[3]}`, 400, true),
		ack("ack with an errors key that is not an id", `{"processedIds":[],"retryIds":[4],"errors":{"x":"y"}}`, 400, false),
		ack("ack with an unknown field", `{"processedIds":[],"acked":[1]}`, 400, false),
		ack("ack with malformed JSON", `{"processedIds":[`, 400, false),
		{name: "ack with an empty JSON body", method: "POST", path: "/bot/events/ack",
			header: http.Header{"Content-Type": {"application/json"}}, want: 400},
		get("resolve alice's code", "/bot/leader/resolve?code=alice", 200, true),
		get("resolve an unknown code", "/bot/leader/resolve?code=nobody", 404, true),
		get("resolve without a code", "/bot/leader/resolve", 400, false),
		get("the state of bob, registered", "/bot/user/state?telegramId=4343", 200, true),
		get("the state of an unbound id", "/bot/user/state?telegramId=777", 404, true),
		get("the state of a signed id", "/bot/user/state?telegramId=%2B4343", 400, false),
		get("the state of a padded id", "/bot/user/state?telegramId=04343", 400, false),
		get("the state without an id", "/bot/user/state", 400, false),
		get("check a bound id", "/auth/check-account-by-telegram/4242", 200, true),
		get("check an unbound id", "/auth/check-account-by-telegram/777", 200, true),
		get("check an id that is not a number", "/auth/check-account-by-telegram/abc", 400, false),
		get("check an id beyond int64", "/auth/check-account-by-telegram/99999999999999999999", 400, false),
		post("a notification by uid", "/bot/notification", `{"uid":`+uid(alice)+`,"kind":"dm_failed","text":"Hi","dedupKey":"n-1"}`, 201, true),
		post("the same notification again", "/bot/notification", `{"uid":`+uid(alice)+`,"kind":"dm_failed","text":"Hi","dedupKey":"n-1"}`, 200, true),
		post("a notification by a Telegram id as a JSON integer", "/bot/notification", `{"telegramId":4343,"kind":"dm_failed","text":"Hi"}`, 201, true),
		post("a notification for an unbound id", "/bot/notification", `{"telegramId":"777","kind":"k","text":"t"}`, 404, true),
		post("a notification without text", "/bot/notification", `{"uid":`+uid(alice)+`,"kind":"k","text":""}`, 400, false),
		post("a notification with a bad kind", "/bot/notification", `{"uid":`+uid(alice)+`,"kind":"Bad Kind","text":"t"}`, 400, false),
		post("mint carol's connect link", "/bot/telegram/connect-link", `{"uid":`+uid(carol)+`}`, 200, true),
		post("reuse carol's connect link", "/bot/telegram/connect-link", `{"uid":`+uid(carol)+`}`, 200, true),
		post("a connect link for an unknown user", "/bot/telegram/connect-link", `{"uid":99999}`, 404, true),
		post("a connect link for uid 0", "/bot/telegram/connect-link", `{"uid":0}`, 400, false),
	}
	for _, ex := range steps {
		c.check(t, s, ex)
	}
	if err := json.Unmarshal(c.check(t, s, get("the page after the acks", "/bot/events/pending", 200, true)), &pending); err != nil {
		t.Fatal(err)
	}
	if len(pending.Events) == 0 {
		t.Fatal("no pending events: the fixtures changed")
	}

	// The connect flow: redeem carol's token, bind, and the redeem errors.
	var link contract.ConnectLink
	if err := json.Unmarshal(c.check(t, s, post("carol's link once more", "/bot/telegram/connect-link", `{"uid":`+uid(carol)+`}`, 200, true)), &link); err != nil {
		t.Fatal(err)
	}
	redeem := func(name, token, tg string, want int, valid bool) exchange {
		return post(name, "/bot/telegram/connect-link/redeem", `{"token":"`+token+`","telegramId":`+tg+`}`, want, valid)
	}
	for _, ex := range []exchange{
		redeem("redeem carol's token", link.Token, `"5550001"`, 200, true),
		redeem("redeem it again with the same id, by its start parameter", link.StartParam, `5550001`, 200, true),
		redeem("redeem it with another id", link.Token, `"5550002"`, 409, true),
		redeem("redeem an unknown token", "telegramConnect=11111111-1111-4111-8111-111111111111", `"5550003"`, 404, true),
		redeem("redeem something that is not a token", "hello", `"5550003"`, 400, true),
		redeem("redeem with a Telegram id of 0", link.Token, `0`, 400, false),
		post("bind carol's previewed id", "/bot/telegram/bind", `{"uid":`+uid(carol)+`,"telegramId":"5550001"}`, 200, true),
		post("bind it again (idempotent)", "/bot/telegram/bind", `{"uid":`+uid(carol)+`,"telegramId":5550001}`, 200, true),
		post("bind alice's id to carol", "/bot/telegram/bind", `{"uid":`+uid(carol)+`,"telegramId":"4242"}`, 409, true),
		post("bind for an unknown user", "/bot/telegram/bind", `{"uid":99999,"telegramId":"5550009"}`, 404, true),
		post("bind without a Telegram id", "/bot/telegram/bind", `{"uid":`+uid(carol)+`}`, 400, false),
	} {
		c.check(t, s, ex)
	}
	var daveLink contract.ConnectLink
	if err := json.Unmarshal(c.check(t, s, post("mint dave's link", "/bot/telegram/connect-link", `{"uid":`+uid(dave)+`}`, 200, true)), &daveLink); err != nil {
		t.Fatal(err)
	}
	s.clock.Advance(25 * time.Hour)
	c.check(t, s, redeem("redeem dave's expired token", daveLink.Token, `"5550004"`, 410, true))

	// The errors every operation shares.
	ops := c.operations()
	for key, op := range ops {
		method, tmpl, _ := strings.Cut(key, " ")
		path := concretePath(tmpl)
		body := ""
		if op.RequestBody != nil {
			body = `{"uid":1}`
		}
		// An oversized body: valid JSON for a POST, any body for a GET.
		big := `{"processedIds":[` + strings.Repeat("1,", contractBodyLimit/2) + `1]}`
		for _, ex := range []exchange{
			{name: key + " without credentials", method: method, path: path, body: body, noAuth: true, want: 401},
			{name: key + " with a wrong secret", method: method, path: path, body: body, noAuth: true,
				header: http.Header{"Authorization": {"Bearer " + strings.Repeat("x", len(contractSecret))}}, want: 401},
			{name: key + " with the wrong method", method: http.MethodDelete, path: path, want: 405},
			{name: key + " with a body over the cap", method: method, path: path, body: big, want: 413, valid: op.RequestBody != nil && method == http.MethodPost && tmpl == "/bot/events/ack"},
		} {
			c.check(t, s, ex)
		}
		if op.RequestBody == nil {
			continue
		}
		for _, ex := range []exchange{
			{name: key + " without a Content-Type", method: method, path: path, body: body, noType: true, want: 415},
			{name: key + " as text/plain", method: method, path: path, body: body, header: http.Header{"Content-Type": {"text/plain"}}, want: 415},
			{name: key + " as a form", method: method, path: path, body: "uid=1", header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, want: 415},
			{name: key + " as JSON with a +json suffix", method: method, path: path, body: body, header: http.Header{"Content-Type": {"application/problem+json"}}, want: 415},
		} {
			c.check(t, s, ex)
		}
	}

	t.Run("a body cut by the read timeout is a 408", func(t *testing.T) {
		slow := newContractStack(t, unthrottled, 2*time.Second)
		type cut struct {
			method, tmpl string
			op           *openapi3.Operation
			resp         *http.Response
			body         []byte
			err          error
		}
		var cuts []*cut
		for key, op := range ops {
			if op.RequestBody != nil {
				method, tmpl, _ := strings.Cut(key, " ")
				cuts = append(cuts, &cut{method: method, tmpl: tmpl, op: op})
			}
		}
		var wg sync.WaitGroup
		for _, x := range cuts {
			wg.Go(func() { x.resp, x.body, x.err = cutBody(slow, x.method, concretePath(x.tmpl)) })
		}
		wg.Wait()
		for _, x := range cuts {
			if x.err != nil {
				t.Fatalf("%s %s with a cut body: %v", x.method, x.tmpl, x.err)
			}
			// Validated as the document sees the request: its headers, the
			// body it was to have.
			ex := exchange{name: x.method + " " + x.tmpl + " with a cut body", method: x.method, path: concretePath(x.tmpl), body: validBody(x.op), valid: true}
			if x.resp.StatusCode != http.StatusRequestTimeout {
				t.Fatalf("%s: %d %s, want 408", ex.name, x.resp.StatusCode, x.body)
			}
			c.validate(t, slow, ex, x.resp.StatusCode, x.resp.Header, x.body)
		}
	})

	t.Run("a throttled client gets 429 with Retry-After, even with the right secret", func(t *testing.T) {
		throttled := newContractStack(t, authlimit.Opts{Free: 1, FirstWait: time.Hour, MaxWait: time.Hour, Forget: time.Hour}, 0)
		wrong := exchange{name: "a wrong secret", method: "GET", path: "/bot/user/state?telegramId=1", noAuth: true,
			header: http.Header{"Authorization": {"Bearer wrong"}}, want: 401}
		c.check(t, throttled, wrong)
		for key, op := range ops {
			method, tmpl, _ := strings.Cut(key, " ")
			ex := exchange{name: key + " while throttled", method: method, path: validPath(tmpl), body: validBody(op), want: 429, valid: true}
			c.check(t, throttled, ex)
		}
	})

	t.Run("a server whose database fails answers 500", func(t *testing.T) {
		broken := newContractStack(t, unthrottled, 0)
		if err := broken.db.Close(); err != nil {
			t.Fatal(err)
		}
		for key, op := range ops {
			method, tmpl, _ := strings.Cut(key, " ")
			ex := exchange{name: key + " on a closed database", method: method, path: validPath(tmpl), body: validBody(op), want: 500, valid: true}
			c.check(t, broken, ex)
		}
	})

	t.Run("every documented answer of every operation was exercised", func(t *testing.T) {
		for key, op := range ops {
			for status := range op.Responses.Map() {
				if !c.seen[op.OperationID+" "+status] {
					t.Errorf("%s (%s) documents %s, but no exchange produced it: add a case", key, op.OperationID, status)
				}
			}
		}
	})

	t.Run("every time in every answer is RFC 3339 UTC with six fractional digits", func(t *testing.T) {
		times := 0
		for _, body := range c.answers {
			bad, err := httpjsontest.BadTimes(body)
			if err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			if len(bad) > 0 {
				t.Errorf("times in another format: %v in %s", bad, body)
			}
			times += httpjsontest.Times(body)
		}
		if times < 10 {
			t.Fatalf("only %d times in %d answers: the check saw too little", times, len(c.answers))
		}
	})
}

// TestOpenAPIContractCarriesTraceparent: an event emitted while tracing
// carries the emit's traceparent in GET /bot/events/pending, and the
// document accepts the answer (the field is optional: TestOpenAPIContract's
// answers, untraced, have none). Not parallel: it records spans process-wide.
func TestOpenAPIContractCarriesTraceparent(t *testing.T) {
	telemetrytest.Record(t)
	s := newContractStack(t, unthrottled, 0)
	c := loadContract(t, s)
	var erin backend.User
	c.admin(t, s, "POST", "/users", `{"link":"erin","name":"Erin","telegramId":"4545"}`, 201, &erin)
	c.admin(t, s, "POST", fmt.Sprintf("/users/%d/nft", erin.UID), `{"level":"lp2"}`, 200, nil)
	var pending contract.PendingResponse
	body := c.check(t, s, exchange{name: "a page with a traced event", method: "GET", path: "/bot/events/pending", want: 200, valid: true})
	if err := json.Unmarshal(body, &pending); err != nil {
		t.Fatal(err)
	}
	if len(pending.Events) != 1 {
		t.Fatalf("%d events, want the one emitted: %s", len(pending.Events), body)
	}
	if _, ok := telemetry.Parse(pending.Events[0].Traceparent); !ok {
		t.Fatalf("the event's traceparent %q is not a valid one: %s", pending.Events[0].Traceparent, body)
	}
}

// validPath is a documented path with valid parameters.
func validPath(tmpl string) string {
	switch tmpl {
	case "/bot/leader/resolve":
		return tmpl + "?code=alice"
	case "/bot/user/state":
		return tmpl + "?telegramId=4242"
	case "/bot/events/pending":
		return tmpl + "?limit=10"
	}
	return concretePath(tmpl)
}

// validBody is a request body the document accepts for op (nil: none).
func validBody(op *openapi3.Operation) string {
	if op.RequestBody == nil {
		return ""
	}
	switch op.OperationID {
	case "ackEvents":
		return `{"processedIds":[1],"retryIds":[]}`
	case "bindTelegram":
		return `{"uid":1,"telegramId":"5550001"}`
	case "addNotification":
		return `{"uid":1,"kind":"k","text":"t"}`
	case "mintConnectLink":
		return `{"uid":1}`
	case "redeemConnectLink":
		return `{"token":"telegramConnect=11111111-1111-4111-8111-111111111111","telegramId":"5550001"}`
	}
	panic("validBody: no body for " + op.OperationID)
}

// cutBody sends a request whose body stops short of its Content-Length and
// reads the answer the server gives when its read timeout passes.
func cutBody(s *contractStack, method, path string) (*http.Response, []byte, error) {
	conn, err := net.Dial("tcp", s.srv.Listener.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close()
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: switchyard.test\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"uid\":", method, path, contractSecret)
	if _, err := io.WriteString(conn, head); err != nil {
		return nil, nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}
