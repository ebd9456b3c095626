package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"switchyard/bot/contract"
)

// botRoutes are every guarded route with a request that passes the guard.
var botRoutes = []struct {
	method, path string
	body         any
}{
	{"GET", "/bot/events/pending", nil},
	{"POST", "/bot/events/ack", `{"processedIds":[],"retryIds":[]}`},
	{"GET", "/bot/leader/resolve?code=x", nil},
	{"GET", "/bot/user/state?telegramId=1", nil},
	{"POST", "/bot/telegram/bind", `{"uid":1,"telegramId":"1"}`},
	{"POST", "/bot/notification", `{"uid":1,"kind":"k","text":"t"}`},
	{"POST", "/bot/telegram/connect-link", `{"uid":1}`},
	{"POST", "/bot/telegram/connect-link/redeem", `{"token":"x","telegramId":"1"}`},
	{"GET", "/auth/check-account-by-telegram/1", nil},
}

func TestBotAuthGuard(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t)
	sameLength := strings.Repeat("x", len(backendTestSecret))
	if len(sameLength) != len(backendTestSecret) || sameLength == backendTestSecret {
		t.Fatal("bad fixture")
	}
	refused := []struct {
		name, auth string
	}{
		{"missing", ""},
		{"another scheme", "Basic " + backendTestSecret},
		{"a scheme without a token", "Bearer"},
		{"an empty token", "Bearer "},
		{"the secret without a scheme", backendTestSecret},
		{"a wrong token of the same length", "Bearer " + sameLength},
		{"a wrong token of another length", "Bearer short"},
		{"the secret with a byte more", "Bearer " + backendTestSecret + "x"},
		{"the secret with a byte less", "Bearer " + backendTestSecret[1:]},
	}
	for _, rt := range botRoutes {
		var first []byte
		for _, c := range refused {
			t.Run(fmt.Sprintf("%s %s with %s credentials answers 401", rt.method, rt.path, c.name), func(t *testing.T) {
				status, body := e.request(t, rt.method, rt.path, c.auth, rt.body)
				if status != http.StatusUnauthorized || errorCode(t, body) != "unauthorized" {
					t.Fatalf("status %d body %s", status, body)
				}
				if first == nil {
					first = body
				}
				if string(body) != string(first) {
					t.Fatalf("401 bodies differ, so they tell what was wrong:\n%s\n%s", first, body)
				}
			})
		}
		t.Run(fmt.Sprintf("%s %s with the right secret passes the guard", rt.method, rt.path), func(t *testing.T) {
			for _, auth := range []string{"Bearer " + backendTestSecret, "bearer " + backendTestSecret} {
				if status, body := e.request(t, rt.method, rt.path, auth, rt.body); status == http.StatusUnauthorized {
					t.Fatalf("refused: %s", body)
				}
			}
		})
	}
	t.Run("an empty secret is a wiring mistake", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		BotAuthGuard("", nil)
	})
	t.Run("the guard compares in constant time after checking the length", func(t *testing.T) {
		h := BotAuthGuard("abc", nil)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
		for auth, want := range map[string]int{"Bearer abc": 204, "Bearer abd": 401, "Bearer ab": 401, "Bearer abcd": 401} {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/bot/x", nil)
			req.Header.Set("Authorization", auth)
			h.ServeHTTP(rec, req)
			if rec.Code != want {
				t.Fatalf("%q: %d, want %d", auth, rec.Code, want)
			}
		}
	})
}

func TestLeaderResolve(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t)
	u := e.createUser(t, "ref-CODE_1", "")

	t.Run("answers the user whose link is the code", func(t *testing.T) {
		t.Parallel()
		var l contract.Leader
		e.call(t, "GET", "/bot/leader/resolve?code=ref-CODE_1", nil, 200, &l)
		if l != (contract.Leader{UID: u.UID, Link: "ref-CODE_1", Name: "Name ref-CODE_1"}) {
			t.Fatalf("leader %+v", l)
		}
	})
	t.Run("answers 404 for an unknown code", func(t *testing.T) {
		t.Parallel()
		if body := e.call(t, "GET", "/bot/leader/resolve?code=nobody", nil, 404, nil); errorCode(t, body) != "leader_not_found" {
			t.Fatalf("body %s", body)
		}
	})
	t.Run("answers 400 without a code", func(t *testing.T) {
		t.Parallel()
		e.call(t, "GET", "/bot/leader/resolve", nil, 400, nil)
	})
}

func TestTelegramConnectAndBind(t *testing.T) {
	t.Parallel()

	t.Run("a connect link is reused while unexpired and unused", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "alice", "")
		var first, second contract.ConnectLink
		e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": u.UID}, 200, &first)
		token, ok := strings.CutPrefix(first.Token, "telegramConnect=")
		if !ok || len(token) != 36 || first.StartParam != "telegramConnect-"+token ||
			first.Link != "https://t.me/test_onboarding_bot?start=telegramConnect-"+token ||
			!first.ExpiresAt.Equal(e.clock.Now().Add(24*time.Hour)) {
			t.Fatalf("link %+v", first)
		}
		e.clock.Advance(23 * time.Hour)
		e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": u.UID}, 200, &second)
		if second != first {
			t.Fatalf("not reused: %+v, then %+v", first, second)
		}
		e.clock.Advance(time.Hour)
		e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": u.UID}, 200, &second)
		if second.Token == first.Token {
			t.Fatal("an expired token was reused")
		}
		e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": 99999}, 404, nil)
		e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": 0}, 400, nil)
	})

	t.Run("a minted and a reused link answer the same expiresAt, in the one time format", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "alice", "")
		// A clock with nanoseconds, as a real one has.
		e.clock.Advance(123456789 * time.Nanosecond)
		minted := e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": u.UID}, 200, nil)
		e.clock.Advance(time.Minute)
		reused := e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": u.UID}, 200, nil)
		if string(minted) != string(reused) {
			t.Fatalf("minted %s\nreused %s", minted, reused)
		}
		var link struct {
			ExpiresAt string `json:"expiresAt"`
		}
		if err := json.Unmarshal(minted, &link); err != nil {
			t.Fatal(err)
		}
		want := e.clock.Now().Add(-time.Minute).Add(24 * time.Hour).UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
		if link.ExpiresAt != want {
			t.Fatalf("expiresAt %q, want %q", link.ExpiresAt, want)
		}
		// The Go API too answers a new token's expiry as it is stored.
		bob := e.createUser(t, "bob", "")
		mintedLink, err := e.b.MintConnectLink(context.Background(), bob.UID)
		if err != nil {
			t.Fatal(err)
		}
		reusedLink, err := e.b.MintConnectLink(context.Background(), bob.UID)
		if err != nil || reusedLink != mintedLink {
			t.Fatalf("MintConnectLink minted %+v, then reused %+v (%v)", mintedLink, reusedLink, err)
		}
	})

	t.Run("redeeming records the preview id and marks the token used", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "alice", "")
		var link contract.ConnectLink
		e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": u.UID}, 200, &link)
		for _, payload := range []string{link.Token, link.StartParam} { // the second is an idempotent repeat
			var red contract.Redemption
			e.call(t, "POST", "/bot/telegram/connect-link/redeem", map[string]any{"token": payload, "telegramId": 5550001}, 200, &red)
			if red != (contract.Redemption{UID: u.UID, PreviewTelegramID: "5550001"}) {
				t.Fatalf("redemption %+v", red)
			}
		}
		got, _ := e.b.GetUser(context.Background(), u.UID)
		if got.PreviewTelegramID == nil || *got.PreviewTelegramID != "5550001" || got.TelegramID != nil {
			t.Fatalf("user %+v", got)
		}
		if body := e.call(t, "POST", "/bot/telegram/connect-link/redeem", map[string]any{"token": link.Token, "telegramId": "5550002"}, 409, nil); errorCode(t, body) != "token_used" {
			t.Fatalf("another id redeeming a used token: %s", body)
		}
		var again contract.ConnectLink
		e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": u.UID}, 200, &again)
		if again.Token == link.Token {
			t.Fatal("a used token was handed out again")
		}
		e.clock.Advance(25 * time.Hour)
		if body := e.call(t, "POST", "/bot/telegram/connect-link/redeem", map[string]any{"token": again.Token, "telegramId": "5550001"}, 410, nil); errorCode(t, body) != "token_expired" {
			t.Fatalf("expired token: %s", body)
		}
		e.call(t, "POST", "/bot/telegram/connect-link/redeem", map[string]any{"token": "telegramConnect=00000000-0000-4000-8000-000000000000", "telegramId": "1"}, 404, nil)
		e.call(t, "POST", "/bot/telegram/connect-link/redeem", map[string]any{"token": "hello", "telegramId": "1"}, 400, nil)
	})

	t.Run("binding promotes the preview id and is idempotent", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "alice", "")
		if body := e.call(t, "POST", "/bot/telegram/bind", map[string]any{"uid": u.UID, "telegramId": "777"}, 409, nil); errorCode(t, body) != "no_preview" {
			t.Fatalf("bind without a preview: %s", body)
		}
		e.preview(t, u.UID, "777")
		for range 2 {
			var res contract.BindResponse
			e.call(t, "POST", "/bot/telegram/bind", map[string]any{"uid": u.UID, "telegramId": "777"}, 200, &res)
			if res != (contract.BindResponse{UID: u.UID, TelegramID: "777"}) {
				t.Fatalf("bind %+v", res)
			}
		}
		got, _ := e.b.GetUser(context.Background(), u.UID)
		if got.TelegramID == nil || *got.TelegramID != "777" || got.PreviewTelegramID != nil {
			t.Fatalf("user %+v", got)
		}
		var st contract.UserState
		e.call(t, "GET", "/bot/user/state?telegramId=777", nil, 200, &st)
		if st.OwnLink != "alice" || st.IsRegistrationConfirmed {
			t.Fatalf("state %+v", st)
		}
		if body := e.call(t, "POST", "/bot/telegram/bind", map[string]any{"uid": u.UID, "telegramId": "778"}, 409, nil); errorCode(t, body) != "account_bound" {
			t.Fatalf("rebinding to another id: %s", body)
		}
		e.call(t, "POST", "/bot/telegram/bind", map[string]any{"uid": 424242, "telegramId": "1"}, 404, nil)
		e.call(t, "POST", "/bot/telegram/bind", map[string]any{"uid": u.UID}, 400, nil)
		e.call(t, "POST", "/bot/telegram/bind", map[string]any{"uid": u.UID, "telegramId": "abc"}, 400, nil)
	})

	t.Run("a telegram id bound to another account cannot be bound again", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		e.createUser(t, "owner", "888")
		u := e.createUser(t, "alice", "")
		// Seed a preview directly: redeeming would already refuse this id.
		if _, err := e.db.Write.Exec(`update users set preview_telegram_id = '888' where uid = ?`, u.UID); err != nil {
			t.Fatal(err)
		}
		if body := e.call(t, "POST", "/bot/telegram/bind", map[string]any{"uid": u.UID, "telegramId": "888"}, 409, nil); errorCode(t, body) != "telegram_taken" {
			t.Fatalf("bind of a taken id: %s", body)
		}
		var link contract.ConnectLink
		e.call(t, "POST", "/bot/telegram/connect-link", map[string]any{"uid": u.UID}, 200, &link)
		if body := e.call(t, "POST", "/bot/telegram/connect-link/redeem", map[string]any{"token": link.Token, "telegramId": "888"}, 409, nil); errorCode(t, body) != "telegram_taken" {
			t.Fatalf("redeem with a taken id: %s", body)
		}
	})
}

func TestUserStateAndAccountCheck(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t)
	ctx := context.Background()
	u := e.createUser(t, "alice", "4242")
	if _, err := e.b.ConnectWallet(ctx, u.UID, "EQwallet"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Register(ctx, u.UID, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.ActivateNFT(ctx, u.UID, contract.NftLP1); err != nil {
		t.Fatal(err)
	}

	t.Run("the state answers the console gate's fields", func(t *testing.T) {
		t.Parallel()
		body := e.call(t, "GET", "/bot/user/state?telegramId=4242", nil, 200, nil)
		want := `{"isRegistrationConfirmed":true,"lp1":true,"lp2":false,"addr":"EQwallet","timeActive":"2026-01-15T12:00:00.000000Z","ownLink":"alice"}`
		if strings.TrimSpace(string(body)) != want {
			t.Fatalf("state %s, want %s", body, want)
		}
	})
	t.Run("the state of an unknown telegram id is 404", func(t *testing.T) {
		t.Parallel()
		if body := e.call(t, "GET", "/bot/user/state?telegramId=1", nil, 404, nil); errorCode(t, body) != "user_not_found" {
			t.Fatalf("body %s", body)
		}
		e.call(t, "GET", "/bot/user/state", nil, 400, nil)
		e.call(t, "GET", "/bot/user/state?telegramId=-3", nil, 400, nil)
	})
	t.Run("the account check answers exists and uid", func(t *testing.T) {
		t.Parallel()
		var yes, no contract.AccountCheck
		e.call(t, "GET", "/auth/check-account-by-telegram/4242", nil, 200, &yes)
		if !yes.Exists || yes.UID == nil || *yes.UID != u.UID {
			t.Fatalf("bound: %+v", yes)
		}
		body := e.call(t, "GET", "/auth/check-account-by-telegram/4243", nil, 200, &no)
		if no.Exists || no.UID != nil || strings.TrimSpace(string(body)) != `{"exists":false,"uid":null}` {
			t.Fatalf("unbound: %s", body)
		}
		e.call(t, "GET", "/auth/check-account-by-telegram/abc", nil, 400, nil)
	})
}

func TestNotification(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t)
	u := e.createUser(t, "alice", "31337")
	other := e.createUser(t, "bob", "")

	t.Run("stores a notification by uid or by telegram id", func(t *testing.T) {
		var a, b contract.Notification
		e.call(t, "POST", "/bot/notification", map[string]any{"uid": u.UID, "kind": "new_partner", "text": "🎉 Новый партнёр"}, 201, &a)
		e.call(t, "POST", "/bot/notification", map[string]any{"telegramId": "31337", "kind": "reactivation", "text": "hi"}, 201, &b)
		if a.UID != u.UID || b.UID != u.UID || a.Kind != "new_partner" || a.Text != "🎉 Новый партнёр" || a.ID == b.ID {
			t.Fatalf("notifications %+v %+v", a, b)
		}
		var list NotificationsResponse
		e.call(t, "GET", fmt.Sprintf("/admin/api/users/%d/notifications", u.UID), nil, 200, &list)
		if len(list.Notifications) != 2 || list.Notifications[0].ID != b.ID {
			t.Fatalf("list %+v", list)
		}
	})
	t.Run("a repeated dedup key returns the first notification", func(t *testing.T) {
		var a, b contract.Notification
		body := map[string]any{"uid": other.UID, "kind": "k", "text": "once", "dedupKey": "event:17"}
		e.call(t, "POST", "/bot/notification", body, 201, &a)
		e.call(t, "POST", "/bot/notification", body, 200, &b)
		if a.ID != b.ID {
			t.Fatalf("two notifications for one key: %+v %+v", a, b)
		}
		var list NotificationsResponse
		e.call(t, "GET", fmt.Sprintf("/admin/api/users/%d/notifications", other.UID), nil, 200, &list)
		if len(list.Notifications) != 1 {
			t.Fatalf("list %+v", list)
		}
	})
	t.Run("refuses bad input and unknown accounts", func(t *testing.T) {
		e.call(t, "POST", "/bot/notification", map[string]any{"uid": 424242, "kind": "k", "text": "t"}, 404, nil)
		e.call(t, "POST", "/bot/notification", map[string]any{"telegramId": "1", "kind": "k", "text": "t"}, 404, nil)
		e.call(t, "POST", "/bot/notification", map[string]any{"kind": "k", "text": "t"}, 400, nil)
		e.call(t, "POST", "/bot/notification", map[string]any{"uid": u.UID, "kind": "", "text": "t"}, 400, nil)
		e.call(t, "POST", "/bot/notification", map[string]any{"uid": u.UID, "kind": "k", "text": " "}, 400, nil)
		e.call(t, "POST", "/bot/notification", map[string]any{"uid": other.UID, "telegramId": "31337", "kind": "k", "text": "t"}, 400, nil)
	})
}

func TestParseWaitIsCapped(t *testing.T) {
	t.Parallel()
	for q, want := range map[string]time.Duration{
		"": 0, "wait=0": 0, "wait=1": time.Second, "wait=30": 30 * time.Second,
		"wait=31": contract.MaxPendingWait, "wait=3600": contract.MaxPendingWait, "wait=99999999999999999999": contract.MaxPendingWait,
	} {
		got, err := parseWait(httptest.NewRequest(http.MethodGet, "/bot/events/pending?"+q, nil))
		if err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", q, got, err, want)
		}
	}
}
