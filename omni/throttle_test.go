package omni

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"switchyard/authlimit"
	"switchyard/store/storetest"
)

func TestInboundWebhookThrottle(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret, AuthLimiter: authlimit.New(authlimit.Opts{})})
	r := mux.NewRouter()
	in.Routes(r)
	body := update(1, "message", privateMessage(42, 1, "hi", t0))
	post := func(addr, secret string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, WebhookPath, bytes.NewReader(body))
		req.RemoteAddr = addr
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(WebhookSecretHeader, secret)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		return rec
	}
	const guesser = "203.0.113.66:1"
	for i := range 5 {
		if rec := post(guesser, "wrong-secret-guess"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("wrong secret %d: %d", i+1, rec.Code)
		}
	}
	rec := post(guesser, testSecret)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), `"code":"too_many_attempts"`) {
		t.Fatalf("the right secret from a throttled client: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if n := len(flowBodies(t, db)); n != 0 {
		t.Fatalf("a throttled delivery enqueued %d jobs", n)
	}
	if rec := post("149.154.167.220:1", testSecret); rec.Code != http.StatusOK {
		t.Fatalf("Telegram's own address while a guesser waits: %d %s", rec.Code, rec.Body)
	}
}
