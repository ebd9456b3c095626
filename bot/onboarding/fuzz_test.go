package onboarding

import (
	"encoding/json"
	"math"
	"net/http"
	"testing"

	"switchyard/authlimit"
	"switchyard/httpjson/httpjsontest"
	"switchyard/store"
	"switchyard/store/storetest"
)

// The fuzz target of this file checks the promise "bad input gets a clear
// 4xx and changes nothing" on the onboarding bot's webhook. It runs over its
// seeds in every `go test`, and for a fixed time in CI (.ci/fuzz).

// fuzzDB is a migrated database for a fuzz target. Commits skip the fsync:
// fuzzing checks answers and state, not durability, and wants many runs a
// second.
func fuzzDB(tb testing.TB) *store.DB {
	tb.Helper()
	return storetest.NewWith(tb, store.Options{Synchronous: store.SyncNormal})
}

// FuzzOnboardingWebhook posts any body with any secret to the onboarding
// bot's POST /webhooks/bot: never a 5xx; a wrong secret is a 401 and a body
// that is not an update a 4xx, with nothing stored; a 200 means the update
// is stored.
func FuzzOnboardingWebhook(f *testing.F) {
	const secret = "onboarding-webhook_SECRET-1"
	for _, s := range []string{
		`{"update_id":1,"message":{"message_id":3,"from":{"id":1001,"is_bot":false,"first_name":"Ann"},"chat":{"id":1001,"type":"private"},"date":1771668000,"text":"/start ref-leader"}}`,
		`{"update_id":2,"callback_query":{"id":"cb","from":{"id":1001,"is_bot":false,"first_name":"Ann"},"message":{"message_id":3,"chat":{"id":1001,"type":"private"},"date":1771668000},"chat_instance":"ci","data":"yes"}}`,
		`{"update_id":3,"my_chat_member":{"chat":{"id":1001,"type":"private"},"from":{"id":1001,"is_bot":false,"first_name":"Ann"},"date":1771668000,"old_chat_member":{"status":"member","user":{"id":777,"is_bot":true,"first_name":"Bot"}},"new_chat_member":{"status":"kicked","user":{"id":777,"is_bot":true,"first_name":"Bot"},"until_date":0}}}`,
		`{"update_id":4,"callback_query":{"id":"cb","from":{"id":1001,"is_bot":false,"first_name":"Ann"},"message":{"message_id":3,"chat":{"id":1001,"type":"private"},"date":0},"chat_instance":"ci"}}`,
		`{"update_id":5,"poll":{"id":"p"}}`,
		`{"update_id":"6"}`,
		`{"message":{}}`,
		`{"update_id":1,`,
		`[]`,
		``,
	} {
		f.Add(secret, []byte(s))
	}
	f.Add("", []byte(`{"update_id":7}`))
	f.Add(secret+"x", []byte(`{"update_id":7}`))

	e := newOnbEnv(f)
	db := fuzzDB(f)
	ob := e.newBot(db, func(o *Opts) {
		o.Updates, o.WebhookSecret = UpdatesWebhook, secret
		// A fuzzer guesses far more than authlimit's five: every guess is checked.
		o.AuthLimiter = authlimit.New(authlimit.Opts{Free: math.MaxInt32})
	})
	h := httpjsontest.Router(ob.Routes)
	commits := storetest.WatchCommits(f, db)
	f.Fuzz(func(t *testing.T, given string, body []byte) {
		before := commits.Version(t)
		rec := httpjsontest.Do(h, http.MethodPost, "/webhooks/bot", "", http.Header{"X-Telegram-Bot-Api-Secret-Token": {given}, "Content-Type": {"application/json"}}, body)
		if given != secret && rec.Code != http.StatusUnauthorized {
			t.Fatalf("secret %q: %d, want 401", given, rec.Code)
		}
		if httpjsontest.CheckRefusal(t, "webhook", rec) {
			if after := commits.Version(t); after != before {
				t.Fatalf("a refused update (%d %s) changed the database", rec.Code, rec.Body)
			}
			return
		}
		var probe struct {
			UpdateID int `json:"update_id"`
		}
		if err := json.Unmarshal(body, &probe); err != nil {
			t.Fatalf("answered %d to a body that is not JSON: %v", rec.Code, err)
		}
		var n int
		if err := db.Read.QueryRow(`select count(*) from bot_updates where update_id = ?`, probe.UpdateID).Scan(&n); err != nil || n != 1 {
			t.Fatalf("answered %d but update %d is not stored (%d rows, %v)", rec.Code, probe.UpdateID, n, err)
		}
	})
}
