package backend

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"switchyard/authlimit"
	"switchyard/bot/contract"
	"switchyard/httpjson/httpjsontest"
)

func TestAuthThrottle(t *testing.T) {
	t.Parallel()
	const guesser, neighbour = "203.0.113.66:1", "198.51.100.7:1"
	bearer := func(secret string) http.Header { return http.Header{"Authorization": {"Bearer " + secret}} }

	t.Run("the bot Bearer: after five wrong secrets the right one gets 429 with Retry-After until the wait ends", func(t *testing.T) {
		t.Parallel()
		var e *backendEnv
		e = newBackendEnv(t, func(o *Opts) {
			o.AuthLimiter = authlimit.New(authlimit.Opts{Now: func() time.Time { return e.clock.Now() }})
		})
		for i := range 5 {
			if rec := httpjsontest.DoFrom(e.router, guesser, "GET", "/bot/user/state?telegramId=1", bearer("wrong-secret-guess"), ""); rec.Code != http.StatusUnauthorized {
				t.Fatalf("wrong secret %d: %d", i+1, rec.Code)
			}
		}
		rec := httpjsontest.DoFrom(e.router, guesser, "GET", "/bot/user/state?telegramId=1", bearer(backendTestSecret), "")
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" || errorCode(t, rec.Body.Bytes()) != "too_many_attempts" {
			t.Fatalf("the right secret from a throttled client: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
		if rec := httpjsontest.DoFrom(e.router, neighbour, "GET", "/bot/user/state?telegramId=1", bearer(backendTestSecret), ""); rec.Code == http.StatusUnauthorized || rec.Code == http.StatusTooManyRequests {
			t.Fatalf("another address: %d", rec.Code)
		}
		e.clock.Advance(time.Second)
		if rec := httpjsontest.DoFrom(e.router, guesser, "GET", "/bot/user/state?telegramId=1", bearer(backendTestSecret), ""); rec.Code == http.StatusUnauthorized || rec.Code == http.StatusTooManyRequests {
			t.Fatalf("the right secret after the wait: %d", rec.Code)
		}
		if rec := httpjsontest.DoFrom(e.router, guesser, "GET", "/bot/user/state?telegramId=1", bearer("wrong-secret-guess"), ""); rec.Code != http.StatusUnauthorized {
			t.Fatalf("a wrong secret after a success: %d, want 401 (the count was reset)", rec.Code)
		}
	})
}

// TestPendingLongPollOutlastsServerTimeouts runs GET /bot/events/pending on
// a server whose read and write timeouts are shorter than the wait: the poll
// holds its own connection open (httpjson.HoldOpen) and answers after its
// full wait instead of being cut at the timeouts.
func TestPendingLongPollOutlastsServerTimeouts(t *testing.T) {
	t.Parallel()
	e := newBackendEnv(t)
	srv := httptest.NewUnstartedServer(e.router)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Config.WriteTimeout = 300 * time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)

	const wait = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/bot/events/pending?wait=2", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+backendTestSecret)
	start := time.Now()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("the long poll was cut after %v: %v", time.Since(start), err)
	}
	defer resp.Body.Close()
	var body contract.PendingResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after %v: status %d, %v", time.Since(start), resp.StatusCode, err)
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("the poll answered after %v, before its %v wait: the server's timeout ended it", took, wait)
	}
}
