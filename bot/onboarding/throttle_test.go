package onboarding

import (
	"net/http"
	"testing"

	"github.com/gorilla/mux"

	"switchyard/authlimit"
	"switchyard/bot/backend"
	"switchyard/httpjson/httpjsontest"
)

func TestAuthThrottle(t *testing.T) {
	t.Parallel()
	const guesser = "203.0.113.66:1"
	bearer := func(secret string) http.Header { return http.Header{"Authorization": {"Bearer " + secret}} }

	t.Run("the webhook secret counts together with the Bearer on a shared limiter", func(t *testing.T) {
		t.Parallel()
		shared := authlimit.New(authlimit.Opts{})
		e := newOnbEnv(t)
		be := backend.New(backend.Opts{DB: e.db, Secret: backendTestSecret, AuthLimiter: shared})
		ob := e.newBot(e.db, func(o *Opts) {
			o.Updates, o.WebhookSecret, o.AuthLimiter = UpdatesWebhook, testWebhookSecret, shared
		})
		r := mux.NewRouter()
		be.Routes(r)
		ob.Routes(r)
		hook := func(secret string) int {
			return httpjsontest.DoFrom(r, guesser, "POST", "/webhooks/bot", http.Header{"X-Telegram-Bot-Api-Secret-Token": {secret}, "Content-Type": {"application/json"}}, `{"update_id":1}`).Code
		}
		for range 3 {
			if code := httpjsontest.DoFrom(r, guesser, "GET", "/bot/user/state?telegramId=1", bearer("wrong-secret-guess"), "").Code; code != http.StatusUnauthorized {
				t.Fatalf("wrong Bearer: %d", code)
			}
		}
		for range 2 {
			if code := hook("wrong_webhook_guess"); code != http.StatusUnauthorized {
				t.Fatalf("wrong webhook secret: %d", code)
			}
		}
		if code := hook(testWebhookSecret); code != http.StatusTooManyRequests {
			t.Fatalf("the right webhook secret after five failures across both: %d, want 429", code)
		}
		if code := hook(""); code != http.StatusUnauthorized {
			t.Fatalf("no secret at all: %d, want the plain 401", code)
		}
	})
}
