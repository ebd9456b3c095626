package backend

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"switchyard/bot/contract"
	"switchyard/httpjson/httpjsontest"
	"switchyard/store"
	"switchyard/store/storetest"
)

// The fuzz targets of this file check the promise "bad input gets a clear
// 4xx and changes nothing" on the bot outbox's inputs: the ack body and the
// pending query of the /bot/* contract, the operators' JSON bodies, and the
// onboarding bot's webhook. They run over their seeds in every `go test`, and
// for a fixed time in CI (.ci/fuzz).

// fuzzDB is a migrated database for a fuzz target. Commits skip the fsync:
// fuzzing checks answers and state, not durability, and wants many runs a
// second.
func fuzzDB(tb testing.TB) *store.DB {
	tb.Helper()
	return storetest.NewWith(tb, store.Options{Synchronous: store.SyncNormal})
}

var botAuth = http.Header{"Authorization": {"Bearer " + backendTestSecret}, "Content-Type": {"application/json"}}

// fuzzOutbox is a backend whose outbox holds ten events of three users, of
// every type, served by the /bot/* contract and the admin routes.
func fuzzOutbox(tb testing.TB) (*store.DB, *Service, http.Handler) {
	tb.Helper()
	db := fuzzDB(tb)
	b := New(Opts{DB: db, Secret: backendTestSecret, BotUsername: "fuzz_bot"})
	tb.Cleanup(b.Shutdown)
	for i := range 10 {
		ev := NewEvent{Type: contract.EventTypes[i%len(contract.EventTypes)], Target: Target{TelegramID: contract.TelegramID(fmt.Sprint(1000 + i%3))}}
		if i%2 == 0 {
			ev.Payload = json.RawMessage(`{"note":"seed"}`)
		}
		if _, err := b.Outbox().Emit(context.Background(), ev); err != nil {
			tb.Fatal(err)
		}
	}
	return db, b, httpjsontest.Router(b.Routes, func(r *mux.Router) { b.AdminRoutes(r.PathPrefix("/admin/api").Subrouter()) })
}

// resetOutbox puts every event back to new, so each run of a target starts
// from the same outbox.
func resetOutbox(tb testing.TB, db *store.DB) {
	tb.Helper()
	err := db.Tx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(`update bot_event_outbox set processed_at = null, dead_lettered_at = null, attempts = 0,
			next_retry_at = null, last_attempt_at = null, last_error = null
			where processed_at is not null or dead_lettered_at is not null or attempts > 0`)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// outboxInvariant fails when an event is both processed and dead-lettered,
// or has a negative attempt count: states no ack may produce.
func outboxInvariant(t *testing.T, db *store.DB) {
	t.Helper()
	var bad int
	if err := db.Read.QueryRow(`select count(*) from bot_event_outbox
		where (processed_at is not null and dead_lettered_at is not null) or attempts < 0`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Fatalf("%d events in an impossible state after an ack", bad)
	}
}

// FuzzAckBody posts any body to POST /bot/events/ack on an outbox of ten
// events: never a 5xx; a 4xx is a JSON error and changes nothing; a 200
// counts no more than the ids it was given and leaves every event in a
// state the contract knows.
func FuzzAckBody(f *testing.F) {
	for _, s := range []string{
		`{"processedIds":[1,2],"retryIds":[3]}`,
		`{"processedIds":[],"retryIds":[]}`,
		`{"processedIds":[4],"retryIds":[5],"errors":{"5":"telegram 429: too many requests"}}`,
		`{"retryIds":[2,2,2,2,2,2]}`,
		`{"processedIds":[1],"retryIds":[1]}`,
		`{"processedIds":[-1,0,9223372036854775807]}`,
		`{"processedIds":[1.5]}`,
		`{"processedIds":"1"}`,
		`{"retryIds":[6],"errors":{"six":"x"}}`,
		`{"retryIds":[6],"errors":{"6":"` + strings.Repeat("é", 3000) + `"}}`,
		`{"processedIds":[1],"unknown":true}`,
		`{"processedIds":[1]}{"processedIds":[2]}`,
		`null`,
		`[]`,
		``,
		`{"processedIds":[1e2]}`,
	} {
		f.Add([]byte(s))
	}
	db, _, h := fuzzOutbox(f)
	commits := storetest.WatchCommits(f, db)
	f.Fuzz(func(t *testing.T, body []byte) {
		resetOutbox(t, db)
		before := commits.Version(t)
		rec := httpjsontest.Do(h, http.MethodPost, "/bot/events/ack", "", botAuth, body)
		if httpjsontest.CheckRefusal(t, "ack", rec) {
			if after := commits.Version(t); after != before {
				t.Fatalf("a refused ack (%d %s) changed the outbox", rec.Code, rec.Body)
			}
			return
		}
		if rec.Code != http.StatusOK {
			t.Fatalf("ack answered %d %s, want 200 or a 4xx", rec.Code, rec.Body)
		}
		var req contract.AckRequest
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatalf("a body that does not decode was accepted: %v", err)
		}
		var res contract.AckResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if res.Processed < 0 || res.Retried < 0 || res.DeadLettered < 0 || res.Closed < 0 ||
			res.Processed > len(req.ProcessedIDs) || res.Retried+res.DeadLettered+res.Closed > len(req.RetryIDs) {
			t.Fatalf("ack of %d processed and %d retry ids counted %+v", len(req.ProcessedIDs), len(req.RetryIDs), res)
		}
		outboxInvariant(t, db)
	})
}

// FuzzPendingQuery sends any query string to GET /bot/events/pending on an
// outbox with due events (so no request waits): never a 5xx; a 4xx is a
// JSON error; nothing is ever written; a 200 lists at most the clamped limit.
func FuzzPendingQuery(f *testing.F) {
	for _, s := range []string{
		``, `limit=1`, `limit=100`, `limit=0`, `limit=-1`, `limit=abc`, `limit=99999999999999999999`,
		`limit=-99999999999999999999`, `wait=0`, `wait=5`, `wait=-1`, `wait=1.5`, `wait=99999999999999999999`,
		`limit=3&wait=30`, `limit=%zz`, `limit=1&limit=2`, `limit=+5`, `limit= 5`, `limit=5%00`, `wait=&limit=`,
	} {
		f.Add(s)
	}
	db, _, h := fuzzOutbox(f)
	commits := storetest.WatchCommits(f, db)
	f.Fuzz(func(t *testing.T, query string) {
		before := commits.Version(t)
		rec := httpjsontest.Do(h, http.MethodGet, "/bot/events/pending", query, botAuth, nil)
		refused := httpjsontest.CheckRefusal(t, "pending?"+query, rec)
		if after := commits.Version(t); after != before {
			t.Fatalf("pending?%s (%d) wrote to the database", query, rec.Code)
		}
		if refused {
			return
		}
		var res contract.PendingResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || res.Events == nil {
			t.Fatalf("pending?%s answered %d %s", query, rec.Code, rec.Body)
		}
		req := httptest.NewRequest(http.MethodGet, "http://switchyard.test/", nil)
		req.URL.RawQuery = query
		limit, err := contract.ParseLimit(req)
		if err != nil {
			t.Fatalf("pending?%s answered 200 though its limit is refused: %v", query, err)
		}
		if len(res.Events) == 0 || len(res.Events) > limit {
			t.Fatalf("pending?%s listed %d events, want 1 to %d", query, len(res.Events), limit)
		}
	})
}

// adminBodyRoutes are the operator routes of the backend that take a JSON
// body; a fuzz input picks one by index.
var adminBodyRoutes = []string{
	"/admin/api/users",
	"/admin/api/users/%d/wallet",
	"/admin/api/users/%d/register",
	"/admin/api/users/%d/nft",
	"/admin/api/bot/events",
}

// FuzzAdminBodies posts any body to the backend's operator routes that take
// one — create a user, connect a wallet, register, activate an NFT, raw emit
// — for any user id: never a 5xx; a 4xx is a JSON error and changes nothing.
func FuzzAdminBodies(f *testing.F) {
	for _, s := range []struct {
		route uint8
		uid   int64
		body  string
	}{
		{0, 0, `{"link":"ann_1","name":"Анна","telegramId":"4242"}`},
		{0, 0, `{"link":"bob","name":"Bob","leaderUid":1}`},
		{0, 0, `{"link":"leader","name":"Taken link"}`},
		{0, 0, `{"link":"has space","name":"x"}`},
		{0, 0, `{"link":"x","name":""}`},
		{0, 0, `{"link":"y","name":"Y","telegramId":0}`},
		{0, 0, `{"link":"z","name":"Z","leaderUid":-4}`},
		{0, 0, `{"link":"w","name":"W","leaderUid":999}`},
		{1, 1, `{"addr":"EQDk2VTvn04SUKJrW7rXahzdF8_Qi6utb0wj43InCu9vdjrR"}`},
		{1, 1, `{"addr":""}`},
		{1, 999, `{"addr":"EQ"}`},
		{1, -1, `{"addr":"EQ"}`},
		{2, 2, `{"leaderUid":1}`},
		{2, 2, `{"leaderUid":2}`},
		{2, 2, `{"leaderUid":0}`},
		{2, 1, `{"leaderUid":null}`},
		{3, 1, `{"level":"lp1"}`},
		{3, 1, `{"level":"lp3"}`},
		{4, 0, `{"eventType":"reactivation","telegramId":"1001","payload":{"days":30}}`},
		{4, 0, `{"eventType":"struct_overtake","magnetUid":1}`},
		{4, 0, `{"eventType":"nope","telegramId":"1"}`},
		{4, 0, `{"eventType":"reactivation"}`},
		{4, 0, `{"eventType":"reactivation","magnetUid":-1}`},
		{4, 0, `{"eventType":"reactivation","telegramId":"1","payload":[1]}`},
		{4, 0, `{"eventType":"reactivation","telegramId":"1","payload":"{}"}`},
		{4, 0, `{"eventType":"reactivation","telegramId":"abc"}`},
		{4, 0, `{}`},
		{4, 0, ``},
	} {
		f.Add(s.route, s.uid, []byte(s.body))
	}
	db, b, h := fuzzOutbox(f)
	for _, u := range []NewUser{{Link: "leader", Name: "Leader"}, {Link: "member", Name: "Member", TelegramID: "1001"}} {
		if _, err := b.CreateUser(context.Background(), u); err != nil {
			f.Fatal(err)
		}
	}
	commits := storetest.WatchCommits(f, db)
	f.Fuzz(func(t *testing.T, route uint8, uid int64, body []byte) {
		path := adminBodyRoutes[int(route)%len(adminBodyRoutes)]
		if strings.Contains(path, "%d") {
			path = fmt.Sprintf(path, uid)
		}
		before := commits.Version(t)
		rec := httpjsontest.Do(h, http.MethodPost, path, "", http.Header{"Content-Type": {"application/json"}}, body)
		if httpjsontest.CheckRefusal(t, "POST "+path, rec) {
			if after := commits.Version(t); after != before {
				t.Fatalf("POST %s refused with %d %s but changed the database", path, rec.Code, rec.Body)
			}
		}
	})
}

// contractBodyRoutes are the /bot/* routes besides the ack that take a JSON
// body; a fuzz input picks one by index.
var contractBodyRoutes = []string{
	"/bot/telegram/bind",
	"/bot/notification",
	"/bot/telegram/connect-link",
	"/bot/telegram/connect-link/redeem",
}

// FuzzContractBodies posts any body to the other JSON routes of the /bot/*
// contract — bind, notification, connect link and its redeem — with the
// bot's secret: never a 5xx; a 4xx is a JSON error and changes nothing.
func FuzzContractBodies(f *testing.F) {
	for _, s := range []struct {
		route uint8
		body  string
	}{
		{0, `{"uid":1,"telegramId":"5001"}`},
		{0, `{"uid":2,"telegramId":5002}`},
		{0, `{"uid":1,"telegramId":"1001"}`},
		{0, `{"uid":0,"telegramId":"1"}`},
		{0, `{"uid":999,"telegramId":"1"}`},
		{0, `{"uid":1,"telegramId":"-1"}`},
		{1, `{"uid":1,"kind":"status","text":"Ваш статус подтверждён","dedupKey":"k1"}`},
		{1, `{"telegramId":"1001","kind":"dm_fallback","text":"t"}`},
		{1, `{"uid":1,"telegramId":"1001","kind":"k","text":"t"}`},
		{1, `{"uid":1,"kind":"","text":""}`},
		{1, `{"uid":-1,"kind":"k","text":"t"}`},
		{2, `{"uid":1}`},
		{2, `{"uid":0}`},
		{2, `{"uid":999}`},
		{3, `{"token":"c_abc","telegramId":"5003"}`},
		{3, `{"token":"","telegramId":"5003"}`},
		{3, `{"token":"c_abc"}`},
		{3, `{"token":"` + strings.Repeat("z", 300) + `","telegramId":"1"}`},
		{3, `null`},
		{3, `{"token":1}`},
	} {
		f.Add(s.route, []byte(s.body))
	}
	db, b, h := fuzzOutbox(f)
	for _, u := range []NewUser{{Link: "leader", Name: "Leader"}, {Link: "member", Name: "Member", TelegramID: "1001"}} {
		if _, err := b.CreateUser(context.Background(), u); err != nil {
			f.Fatal(err)
		}
	}
	commits := storetest.WatchCommits(f, db)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := contractBodyRoutes[int(route)%len(contractBodyRoutes)]
		before := commits.Version(t)
		rec := httpjsontest.Do(h, http.MethodPost, path, "", botAuth, body)
		if httpjsontest.CheckRefusal(t, "POST "+path, rec) {
			if after := commits.Version(t); after != before {
				t.Fatalf("POST %s refused with %d %s but changed the database", path, rec.Code, rec.Body)
			}
		}
	})
}
