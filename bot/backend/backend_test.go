package backend

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/bot/contract"
	"switchyard/openapi"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

const backendTestSecret = "s3cret-shared-with-the-bot-0123456789"

// backendEnv is a Backend on a migrated database with a settable clock,
// served over real HTTP the way the web package mounts it.
type backendEnv struct {
	db     *store.DB
	clock  *store.ManualClock
	b      *Service
	router *mux.Router
	srv    *httptest.Server
	logs   *testwait.Buffer
}

func newBackendEnv(t testing.TB, opts ...func(*Opts)) *backendEnv {
	t.Helper()
	db, clock := storetest.NewWithClock(t)
	logs := &testwait.Buffer{}
	o := Opts{
		DB:           db,
		Secret:       backendTestSecret,
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
		BotUsername:  "test_onboarding_bot",
		PollInterval: 50 * time.Millisecond,
	}
	for _, f := range opts {
		f(&o)
	}
	b := New(o)
	r := mux.NewRouter()
	b.Routes(r)
	b.AdminRoutes(r.PathPrefix("/admin/api").Subrouter())
	// The document of the routes mounted, as the console serves it.
	r.Handle("/openapi.json", openapi.Handler(openapi.New(openapi.Info{Title: "bot"}).Add("", OpenAPI()))).Methods(http.MethodGet)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &backendEnv{db: db, clock: clock, b: b, router: r, srv: srv, logs: logs}
}

// request sends body (nil, a string of raw JSON, or a value to marshal; a
// body goes with Content-Type: application/json) with the Authorization
// header auth ("" sends none) and returns status and body.
func (e *backendEnv) request(t testing.TB, method, path, auth string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// call is request with the bot's secret; it checks the status and decodes the
// answer into out (when out is not nil).
func (e *backendEnv) call(t testing.TB, method, path string, body any, want int, out any) []byte {
	t.Helper()
	status, b := e.request(t, method, path, "Bearer "+backendTestSecret, body)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return b
}

// errorCode reads the code of a {"error":{"code","message"}} body.
func errorCode(t testing.TB, body []byte) string {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("not an error body: %s (%v)", body, err)
	}
	return e.Error.Code
}

func (e *backendEnv) createUser(t testing.TB, link string, tg contract.TelegramID) User {
	t.Helper()
	u, err := e.b.CreateUser(context.Background(), NewUser{Link: link, Name: "Name " + link, TelegramID: tg})
	if err != nil {
		t.Fatalf("create user %s: %v", link, err)
	}
	return u
}

// preview mints a connect token for uid and redeems it for tg, so tg is the
// account's preview_telegram_id.
func (e *backendEnv) preview(t testing.TB, uid contract.UID, tg contract.TelegramID) {
	t.Helper()
	ctx := context.Background()
	link, err := e.b.MintConnectLink(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.RedeemConnect(ctx, link.StartParam, tg); err != nil {
		t.Fatal(err)
	}
}

func (e *backendEnv) event(t testing.TB, id contract.EventID) EventRecord {
	t.Helper()
	rec, err := e.b.Outbox().GetEvent(context.Background(), id)
	if err != nil {
		t.Fatalf("get event %d: %v", id, err)
	}
	return rec
}

func (e *backendEnv) countEvents(t testing.TB) int {
	t.Helper()
	var n int
	if err := e.db.Read.QueryRow(`select count(*) from bot_event_outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBackendActions(t *testing.T) {
	t.Parallel()

	t.Run("creating a user answers 201 with the account and refuses a taken link or telegram id", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		var u User
		e.call(t, "POST", "/admin/api/users", map[string]any{"link": "alice", "name": "Alice", "telegramId": 7001}, 201, &u)
		if u.UID <= 0 || u.Link != "alice" || u.Name != "Alice" || u.TelegramID == nil || *u.TelegramID != "7001" || u.CreatedAt.IsZero() {
			t.Fatalf("created %+v", u)
		}
		var got User
		e.call(t, "GET", "/admin/api/users/"+itoa(u.UID), nil, 200, &got)
		if got.UID != u.UID || got.Link != "alice" {
			t.Fatalf("read back %+v", got)
		}
		if b := e.call(t, "POST", "/admin/api/users", map[string]any{"link": "alice", "name": "Other"}, 409, nil); errorCode(t, b) != "link_taken" {
			t.Fatalf("taken link answered %s", b)
		}
		if b := e.call(t, "POST", "/admin/api/users", map[string]any{"link": "bob", "name": "Bob", "telegramId": "7001"}, 409, nil); errorCode(t, b) != "telegram_taken" {
			t.Fatalf("taken telegram id answered %s", b)
		}
		e.call(t, "POST", "/admin/api/users", map[string]any{"link": "carol", "name": "Carol", "leaderUid": 999}, 404, nil)
		e.call(t, "POST", "/admin/api/users", map[string]any{"link": "bad link!", "name": "X"}, 400, nil)
		e.call(t, "POST", "/admin/api/users", map[string]any{"link": "dave", "name": ""}, 400, nil)
		e.call(t, "POST", "/admin/api/users", `{"link":"erin","name":"Erin","extra":1}`, 400, nil)
		e.call(t, "GET", "/admin/api/users/424242", nil, 404, nil)
		e.call(t, "GET", "/admin/api/users/abc", nil, 400, nil)
		if n := e.countEvents(t); n != 0 {
			t.Fatalf("creating users emitted %d events", n)
		}
	})

	t.Run("connecting a wallet emits wallet_connected once per address", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "alice", "")
		var res ActionResult
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/wallet", map[string]any{"addr": "EQabc_123-xyz"}, 200, &res)
		if res.User.Addr == nil || *res.User.Addr != "EQabc_123-xyz" || len(res.EventIDs) != 1 {
			t.Fatalf("wallet result %+v", res)
		}
		ev := e.event(t, res.EventIDs[0])
		if ev.EventType != contract.EventWalletConnected || ev.MagnetUID == nil || *ev.MagnetUID != u.UID || ev.TelegramID != nil ||
			string(ev.Payload) != `{"addr":"EQabc_123-xyz"}` {
			t.Fatalf("event %+v payload %s", ev, ev.Payload)
		}
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/wallet", map[string]any{"addr": "EQabc_123-xyz"}, 200, &res)
		if len(res.EventIDs) != 0 || e.countEvents(t) != 1 {
			t.Fatalf("the same address again emitted %v", res.EventIDs)
		}
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/wallet", map[string]any{"addr": "bad addr"}, 400, nil)
		e.call(t, "POST", "/admin/api/users/999/wallet", map[string]any{"addr": "EQx"}, 404, nil)
	})

	t.Run("registering emits registered with the leader and new_partner to the leader", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		leader := e.createUser(t, "leader", "9001")
		u := e.createUser(t, "partner", "")
		e.preview(t, u.UID, "9002")
		var res ActionResult
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/register", map[string]any{"leaderUid": leader.UID}, 200, &res)
		if !res.User.RegistrationConfirmed || res.User.LeaderUID == nil || *res.User.LeaderUID != leader.UID ||
			res.User.TimeActive == nil || len(res.EventIDs) != 2 {
			t.Fatalf("register result %+v", res)
		}
		reg, partner := e.event(t, res.EventIDs[0]), e.event(t, res.EventIDs[1])
		var rp contract.RegisteredPayload
		if err := json.Unmarshal(reg.Payload, &rp); err != nil {
			t.Fatal(err)
		}
		if reg.EventType != contract.EventRegistered || *reg.MagnetUID != u.UID || reg.TelegramID == nil || *reg.TelegramID != "9002" ||
			rp.LeaderUID == nil || *rp.LeaderUID != leader.UID || rp.LeaderLink != "leader" {
			t.Fatalf("registered %+v payload %s", reg, reg.Payload)
		}
		var np contract.NewPartnerPayload
		if err := json.Unmarshal(partner.Payload, &np); err != nil {
			t.Fatal(err)
		}
		if partner.EventType != contract.EventNewPartner || *partner.MagnetUID != leader.UID || *partner.TelegramID != "9001" ||
			np.PartnerUID != u.UID || np.PartnerLink != "partner" || np.PartnerName != "Name partner" {
			t.Fatalf("new_partner %+v payload %s", partner, partner.Payload)
		}
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/register", map[string]any{"leaderUid": leader.UID}, 200, &res)
		if len(res.EventIDs) != 0 {
			t.Fatalf("registering again under the same leader emitted %v", res.EventIDs)
		}
		other := e.createUser(t, "other", "")
		if b := e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/register", map[string]any{"leaderUid": other.UID}, 409, nil); errorCode(t, b) != "already_registered" {
			t.Fatalf("another leader answered %s", b)
		}
		e.call(t, "POST", "/admin/api/users/"+itoa(other.UID)+"/register", map[string]any{"leaderUid": other.UID}, 400, nil)
		if n := e.countEvents(t); n != 2 {
			t.Fatalf("%d events, want 2", n)
		}
	})

	t.Run("registering without a leader emits registered alone", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "root", "")
		var res ActionResult
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/register", `{"leaderUid":null}`, 200, &res)
		if len(res.EventIDs) != 1 || string(e.event(t, res.EventIDs[0]).Payload) != `{"leaderUid":null}` {
			t.Fatalf("register result %+v", res)
		}
	})

	t.Run("activating a status nft emits status_nft_activated once per level", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "alice", "")
		var res ActionResult
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/nft", map[string]any{"level": "lp2"}, 200, &res)
		if !res.User.LP2 || res.User.LP1 || len(res.EventIDs) != 1 || string(e.event(t, res.EventIDs[0]).Payload) != `{"level":"lp2"}` {
			t.Fatalf("nft result %+v", res)
		}
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/nft", map[string]any{"level": "lp2"}, 200, &res)
		if len(res.EventIDs) != 0 {
			t.Fatalf("the same level again emitted %v", res.EventIDs)
		}
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/nft", map[string]any{"level": "lp3"}, 400, nil)
	})

	t.Run("an action that fails leaves neither its change nor its events", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "alice", "")
		e.call(t, "POST", "/admin/api/users/"+itoa(u.UID)+"/register", map[string]any{"leaderUid": 424242}, 404, nil)
		got, err := e.b.GetUser(context.Background(), u.UID)
		if err != nil {
			t.Fatal(err)
		}
		if got.RegistrationConfirmed || e.countEvents(t) != 0 {
			t.Fatalf("failed registration left user %+v and %d events", got, e.countEvents(t))
		}
	})
}

func TestDecideRegister(t *testing.T) {
	t.Parallel()
	one, two, self := contract.UID(1), contract.UID(2), contract.UID(7)
	tests := []struct {
		name   string
		user   User
		leader *contract.UID
		apply  bool
		err    error
	}{
		{"a first registration applies", User{UID: 7}, &one, true, nil},
		{"a first registration without a leader applies", User{UID: 7}, nil, true, nil},
		{"the same leader again changes nothing", User{UID: 7, RegistrationConfirmed: true, LeaderUID: &one}, &one, false, nil},
		{"no leader again changes nothing", User{UID: 7, RegistrationConfirmed: true}, nil, false, nil},
		{"another leader is refused", User{UID: 7, RegistrationConfirmed: true, LeaderUID: &one}, &two, false, contract.ErrAlreadyRegistered},
		{"a leader where there was none is refused", User{UID: 7, RegistrationConfirmed: true}, &two, false, contract.ErrAlreadyRegistered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := decideRegister(tt.user, tt.leader)
			if err != tt.err || d.Apply != tt.apply {
				t.Fatalf("decideRegister = %+v, %v; want apply %v, %v", d, err, tt.apply, tt.err)
			}
		})
	}
	t.Run("leading oneself is bad input", func(t *testing.T) {
		if _, err := decideRegister(User{UID: 7}, &self); err == nil {
			t.Fatal("a user led themselves")
		}
	})
}

func itoa[T ~int64](n T) string { return strconv.FormatInt(int64(n), 10) }
