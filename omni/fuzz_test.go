package omni

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/authlimit"
	"switchyard/httpjson/httpjsontest"
	"switchyard/store"
	"switchyard/store/storetest"
)

// The fuzz targets of this file check the promise "bad input gets a clear
// 4xx and changes nothing" on the chat platform's inputs: Telegram's webhook
// body, its normalisation into the envelope, and the operators' JSON bodies.
// They run over their seeds in every `go test`, and for a fixed time in CI
// (.ci/fuzz).

// fuzzDB is a migrated database for a fuzz target. Commits skip the fsync:
// fuzzing checks answers and state, not durability, and wants many runs a
// second.
func fuzzDB(tb testing.TB) *store.DB {
	tb.Helper()
	return storetest.NewWith(tb, store.Options{Synchronous: store.SyncNormal})
}

// fuzzDo serves one request on h in-process, target being the path and
// the query as one string.
func fuzzDo(h http.Handler, method, target string, header http.Header, body []byte) *httptest.ResponseRecorder {
	path, query, _ := strings.Cut(target, "?")
	return httpjsontest.Do(h, method, path, query, header, body)
}

// telegramSeeds are realistic updates of every type the chat role reads,
// and a few that are not updates at all.
var telegramSeeds = []string{
	`{"update_id":1,"message":{"message_id":7,"from":{"id":42,"is_bot":false,"first_name":"Ann","username":"ann"},"chat":{"id":42,"type":"private","first_name":"Ann"},"date":1771668000,"text":"hello"}}`,
	`{"update_id":2,"business_message":{"message_id":5,"business_connection_id":"bc-1","from":{"id":55,"is_bot":false,"first_name":"Customer"},"chat":{"id":55,"type":"private","first_name":"Customer"},"date":1771668001,"text":"Где мой заказ?"}}`,
	`{"update_id":3,"edited_business_message":{"message_id":5,"business_connection_id":"bc-1","from":{"id":55,"is_bot":false,"first_name":"Customer"},"chat":{"id":55,"type":"private"},"date":1771668001,"edit_date":1771668060,"text":"edited"}}`,
	`{"update_id":4,"deleted_business_messages":{"business_connection_id":"bc-1","chat":{"id":55,"type":"private"},"message_ids":[5,6]}}`,
	`{"update_id":5,"business_connection":{"id":"bc-1","user":{"id":9,"is_bot":false,"first_name":"Owner"},"user_chat_id":9,"date":1771668000,"is_enabled":true,"rights":{"can_reply":true}}}`,
	`{"update_id":6,"my_chat_member":{"chat":{"id":42,"type":"private"},"from":{"id":42,"is_bot":false,"first_name":"Ann"},"date":1771668000,"old_chat_member":{"status":"member"},"new_chat_member":{"status":"kicked"}}}`,
	`{"update_id":7,"callback_query":{"id":"cb1","from":{"id":42,"is_bot":false,"first_name":"Ann"},"message":{"message_id":8,"chat":{"id":42,"type":"private"}},"data":"yes"}}`,
	`{"update_id":8,"business_message":{"message_id":9,"business_connection_id":"bc-1","chat":{"id":55,"type":"private"},"date":1771668002,"photo":[{"file_id":"f","width":1,"height":1}],"caption":"look"}}`,
	`{"update_id":9,"poll":{"id":"p"}}`,
	`{"update_id":10,"message":{"message_id":1,"chat":{"id":1,"type":"private"},"date":99999999999999}}`,
	`{"update_id":-1}`,
	`{"update_id":9223372036854775807,"edited_message":{"message_id":1,"chat":{"id":-100,"type":"supergroup","title":"T"},"edit_date":-5}}`,
	`{"update_id":11,"business_message":{"message_id":5,"chat":{"id":55,"type":"private"},"date":1771668001,"text":"no connection id"}}`,
	`{"update_id":12,"channel_post":{"message_id":3,"chat":{"id":-1001,"type":"channel","title":"News"},"date":1771668000,"dice":{"emoji":"🎯","value":6}}}`,
	`{"update_id":13,"message":{"message_id":4,"chat":{"id":-42,"type":"group","title":"G"},"date":1771668000,"new_chat_members":[{"id":5,"is_bot":false,"first_name":"N"}]}}`,
	`{"update_id":14,"message":"not an object"}`,
	rewritten,
	`{"update_id":1,`,
	`[1,2]`,
	`{"update_id":"7"}`,
	`  `,
}

// envelopeEventTypes are the event types an envelope may carry.
var envelopeEventTypes = map[EventType]bool{
	EventMessageCreated: true, EventMessageEdited: true, EventMessageDeleted: true, EventConnectionUpdated: true,
	EventMembershipUpdated: true, EventCallbackReceived: true, EventUnknown: true, EventInvalid: true,
}

// FuzzNormalizeTelegram: any body is either refused with ErrBadUpdate or
// becomes an envelope that keeps the contract's invariants, carries the body
// byte for byte, matches the published v1 schema, and that the inbound role
// can encode (an envelope it cannot encode would be a 503 that Telegram
// retries for ever) and the chat role can read back (one it cannot would go
// straight to the dead letters).
func FuzzNormalizeTelegram(f *testing.F) {
	for _, s := range telegramSeeds {
		f.Add([]byte(s))
	}
	receivedAt := time.Date(2026, 2, 21, 10, 0, 0, 123456000, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := NormalizeTelegram(body, inboxBotID, receivedAt)
		if err != nil {
			if !errors.Is(err, ErrBadUpdate) || env != nil {
				t.Fatalf("refused with %v (envelope %v), want ErrBadUpdate and no envelope", err, env)
			}
			return
		}
		if env.Version != EnvelopeVersion || env.Provider != ProviderTelegram || env.Direction != DirectionInbound {
			t.Fatalf("version %d provider %q direction %q", env.Version, env.Provider, env.Direction)
		}
		if env.Channel != ChannelTelegramBot && env.Channel != ChannelTelegramBusiness {
			t.Fatalf("channel %q", env.Channel)
		}
		if !envelopeEventTypes[env.EventType] {
			t.Fatalf("event type %q", env.EventType)
		}
		updateID, err := strconv.ParseInt(env.ProviderEventID, 10, 64)
		if err != nil {
			t.Fatalf("providerEventId %q is not Telegram's integer update_id", env.ProviderEventID)
		}
		if want := fmt.Sprintf("telegram:%d:%d", inboxBotID, updateID); env.IdempotencyKey != want {
			t.Fatalf("idempotency key %q, want %q", env.IdempotencyKey, want)
		}
		if !env.ReceivedAt.Equal(receivedAt) || env.OccurredAt.IsZero() {
			t.Fatalf("receivedAt %v occurredAt %v", env.ReceivedAt, env.OccurredAt)
		}
		if !bytes.Equal(env.PayloadRaw, body) {
			t.Fatalf("payloadRaw is not the body as received")
		}
		raw, err := env.Encode()
		if err != nil {
			t.Fatalf("an accepted update gives an envelope that cannot be encoded (the webhook would answer 503 for ever): %v", err)
		}
		if err := validateEnvelopeJSON(t, raw); err != nil {
			t.Fatalf("an accepted update gives an envelope outside the published v1 schema: %v\n%s", err, raw)
		}
		if !bytes.Contains(raw, body) {
			t.Fatalf("the encoded envelope does not carry the body unchanged")
		}
		back, err := decodeEnvelope(raw)
		if err != nil {
			t.Fatalf("the chat role cannot read the envelope back: %v\n%s", err, raw)
		}
		if back.IdempotencyKey != env.IdempotencyKey || back.EventType != env.EventType || OrderingKey(back) != OrderingKey(env) {
			t.Fatalf("the envelope changed on its way through JSON:\n%+v\n%+v", env, back)
		}
	})
}

// fuzzMaxUpdateBytes is the webhook's body cap in the fuzz target, small
// enough for the fuzzer to cross it.
const fuzzMaxUpdateBytes = 4 << 10

// FuzzInboundWebhook drives the real webhook handler on a migrated database
// with any secret header and body: never a 5xx or a panic; a wrong secret is
// a 401 and a body that is not an update a 4xx JSON error, with nothing
// stored; a 200 means the envelope is committed on receiver.flow.
func FuzzInboundWebhook(f *testing.F) {
	for _, s := range telegramSeeds {
		f.Add(testSecret, []byte(s))
	}
	f.Add("", []byte(telegramSeeds[0]))
	f.Add(testSecret+"x", []byte(telegramSeeds[1]))
	f.Add(strings.ToUpper(testSecret), []byte(telegramSeeds[1]))
	f.Add(testSecret, bytes.Repeat([]byte(" "), fuzzMaxUpdateBytes+1))

	db := fuzzDB(f)
	// A fuzzer guesses far more than authlimit's five: every guess is checked.
	unthrottled := authlimit.New(authlimit.Opts{Free: math.MaxInt32})
	in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret, MaxUpdateBytes: fuzzMaxUpdateBytes, AuthLimiter: unthrottled})
	h := httpjsontest.Router(in.Routes)
	commits := storetest.WatchCommits(f, db)
	f.Fuzz(func(t *testing.T, secret string, body []byte) {
		before := commits.Version(t)
		rec := fuzzDo(h, http.MethodPost, WebhookPath, http.Header{WebhookSecretHeader: {secret}, "Content-Type": {"application/json"}}, body)
		refused := httpjsontest.CheckRefusal(t, "webhook", rec)
		if secret != testSecret && rec.Code != http.StatusUnauthorized {
			t.Fatalf("secret %q: %d, want 401", secret, rec.Code)
		}
		if refused {
			if after := commits.Version(t); after != before {
				t.Fatalf("a refused update (%d %s) changed the database", rec.Code, rec.Body)
			}
			if _, err := NormalizeTelegram(body, inboxBotID, db.Now()); err == nil && len(body) <= fuzzMaxUpdateBytes && secret == testSecret {
				t.Fatalf("an update NormalizeTelegram accepts was refused: %d %s", rec.Code, rec.Body)
			}
			return
		}
		if rec.Code != http.StatusOK || rec.Body.String() != `{"ok":true}` {
			t.Fatalf("accepted with %d %s, want 200 {\"ok\":true}", rec.Code, rec.Body)
		}
		env, err := NormalizeTelegram(body, inboxBotID, db.Now())
		if err != nil {
			t.Fatalf("a body NormalizeTelegram refuses was answered 200: %v", err)
		}
		var id string
		err = db.Read.QueryRow(`select k.message_id from queue_keys k join goqite g on g.id = k.message_id
			where k.queue = ? and k.key = ?`, QueueReceiverFlow, env.IdempotencyKey).Scan(&id)
		if err != nil {
			t.Fatalf("answered 200 but %s is not on %s: %v", env.IdempotencyKey, QueueReceiverFlow, err)
		}
	})
}

// FuzzAdminBodies sends any JSON body to the chat platform's operator routes
// that take one — a reply in a thread and the auto-ack rule — against a
// database holding one thread: never a 5xx; a 4xx is a JSON error and
// changes nothing; a 202 reply is a queued message with its send command.
func FuzzAdminBodies(f *testing.F) {
	for _, s := range []struct {
		route  uint8
		thread int64
		body   string
	}{
		{0, 1, `{"text":"Здравствуйте! Заказ в пути."}`},
		{0, 1, `{"text":"   "}`},
		{0, 1, `{"text":""}`},
		{0, 1, `{"text":null}`},
		{0, 1, `{"text":1}`},
		{0, 1, `{"text":"hi","extra":true}`},
		{0, 1, `{"text":"hi"} {"text":"again"}`},
		{0, 2, `{"text":"no such thread"}`},
		{0, 0, `{"text":"thread zero"}`},
		{0, 1, `{"text":"` + strings.Repeat("я", MaxReplyRunes+1) + `"}`},
		{0, 1, `{"text":"\ud800"}`},
		{1, 0, `{"enabled":true,"text":"Мы ответим в течение часа"}`},
		{1, 0, `{"enabled":true,"text":""}`},
		{1, 0, `{"enabled":false}`},
		{1, 0, `{"enabled":"yes"}`},
		{1, 0, `[]`},
		{1, 0, ``},
		{1, 0, `nul`},
	} {
		f.Add(s.route, s.thread, []byte(s.body))
	}

	db := fuzzDB(f)
	admin := NewAdmin(AdminOpts{DB: db})
	thread := seedThread(f, db)
	h := httpjsontest.Router(func(r *mux.Router) { admin.AdminRoutes(r.PathPrefix("/admin/api").Subrouter()) })
	commits := storetest.WatchCommits(f, db)
	f.Fuzz(func(t *testing.T, route uint8, threadID int64, body []byte) {
		method, path := http.MethodPost, fmt.Sprintf("/admin/api/omni/threads/%d/messages", threadID)
		if threadID < 0 {
			path = fmt.Sprintf("/admin/api/omni/threads/%d/messages", uint64(threadID))
		}
		if route%2 == 1 {
			method, path = http.MethodPut, "/admin/api/omni/rules/auto-ack"
		}
		before := commits.Version(t)
		rec := fuzzDo(h, method, path, http.Header{"Content-Type": {"application/json"}}, body)
		if httpjsontest.CheckRefusal(t, method+" "+path, rec) {
			if after := commits.Version(t); after != before {
				t.Fatalf("%s %s refused with %d %s but changed the database", method, path, rec.Code, rec.Body)
			}
			return
		}
		if route%2 == 1 {
			if rec.Code != http.StatusOK {
				t.Fatalf("auto-ack answered %d %s", rec.Code, rec.Body)
			}
			return
		}
		if rec.Code != http.StatusAccepted || ThreadID(threadID) != thread {
			t.Fatalf("reply in thread %d answered %d %s, want 202 only in thread %d", threadID, rec.Code, rec.Body, thread)
		}
		var out struct {
			MessageID MessageID `json:"messageId"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.Read.QueryRow(`select count(*) from omni_messages where id = ? and thread_id = ? and status = ?`,
			int64(out.MessageID), int64(thread), string(StatusQueued)).Scan(&n); err != nil || n != 1 {
			t.Fatalf("reply %d answered 202 but is not queued in thread %d (%d rows, %v)", out.MessageID, thread, n, err)
		}
	})
}

// seedThread opens a thread by applying a customer's message through the
// chat transaction, as the chat role would.
func seedThread(tb testing.TB, db *store.DB) ThreadID {
	tb.Helper()
	env, err := NormalizeTelegram([]byte(telegramSeeds[0]), inboxBotID, db.Now())
	if err != nil {
		tb.Fatal(err)
	}
	d := newChatDomain(db, AutoAckRule{})
	var res applied
	if err := db.Tx(context.Background(), func(tx *sql.Tx) error {
		var err error
		res, err = d.applyTx(context.Background(), tx, env)
		return err
	}); err != nil {
		tb.Fatal(err)
	}
	var id ThreadID
	if err := db.Read.QueryRow(`select id from omni_threads`).Scan(&id); err != nil {
		tb.Fatalf("no thread after applying a message (%+v): %v", res, err)
	}
	return id
}
