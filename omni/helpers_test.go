package omni

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/store"
	"switchyard/telegram/fakebot"
	"switchyard/telemetry"
)

// The bot the tests' business inbox runs as, and its fake Bot API token.
const inboxBotID = 5550001

var inboxToken = fakebot.Token(inboxBotID)

// update builds a Telegram update body with the given update_id and one
// field, e.g. update(7, "business_message", msg).
func update(id int, field string, v any) []byte {
	raw, err := json.Marshal(map[string]any{"update_id": id, field: v})
	if err != nil {
		panic(err)
	}
	return raw
}

func businessConnection(id string, owner int64, enabled, canReply bool, date int64) map[string]any {
	return map[string]any{
		"id": id, "user": map[string]any{"id": owner, "is_bot": false, "first_name": "Owner"},
		"user_chat_id": owner, "date": date, "is_enabled": enabled,
		"rights": map[string]any{"can_reply": canReply},
	}
}

func businessMessage(conn string, from, chat int64, msgID int, text string, date int64) map[string]any {
	return map[string]any{
		"message_id": msgID, "business_connection_id": conn, "date": date, "text": text,
		"from": map[string]any{"id": from, "is_bot": false, "first_name": "Customer", "last_name": fmt.Sprint(chat)},
		"chat": map[string]any{"id": chat, "type": "private", "first_name": "Customer", "last_name": fmt.Sprint(chat)},
	}
}

func privateMessage(user int64, msgID int, text string, date int64) map[string]any {
	return map[string]any{
		"message_id": msgID, "date": date, "text": text,
		"from": map[string]any{"id": user, "is_bot": false, "first_name": "Ann"},
		"chat": map[string]any{"id": user, "type": "private", "first_name": "Ann"},
	}
}

// envelopeOf normalises an update as the inbound role would, and checks it
// against the published schema.
func envelopeOf(t testing.TB, body []byte, receivedAt time.Time) *Envelope {
	t.Helper()
	env, err := NormalizeTelegram(body, inboxBotID, receivedAt)
	if err != nil {
		t.Fatalf("normalize %s: %v", body, err)
	}
	requireValidEnvelope(t, env)
	return env
}

// capturedSends collects the send commands a chatDomain queues.
type capturedSends struct {
	mu   sync.Mutex
	cmds []SendCommand
}

func (c *capturedSends) send(_ context.Context, _ *sql.Tx, cmd SendCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cmds = append(c.cmds, cmd)
	return nil
}

func (c *capturedSends) all() []SendCommand {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]SendCommand(nil), c.cmds...)
}

// runWorker runs w until the test ends or stop is called, and fails the
// test if Run returns an error or does not return after cancellation. stop
// returns once Run has.
func runWorker(t testing.TB, w interface {
	Name() string
	Run(context.Context) error
}) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: Run: %v", w.Name(), err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s: Run did not return after cancellation", w.Name())
		}
	})
	t.Cleanup(stop)
	return stop
}

// count runs a count(*) query on the read pool.
func count(t testing.TB, db *store.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRowContext(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// newFakeBotAPI starts a fake Telegram Bot API for the test.
func newFakeBotAPI(t testing.TB, opts fakebot.Opts) (*fakebot.Server, string) {
	t.Helper()
	fake := fakebot.New(opts)
	srv := httptest.NewServer(fake)
	t.Cleanup(func() {
		fake.Close()
		srv.Close()
	})
	return fake, srv.URL
}

// serve starts an HTTP server with the routes of mounts on a fresh router.
func serve(t testing.TB, mounts ...func(r *mux.Router)) string {
	t.Helper()
	r := mux.NewRouter()
	for _, m := range mounts {
		m(r)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// serverSpans gives every request a server span named by its route
// template, as web's middleware does (web imports omni, so its tests cannot
// use it). With tracing off it does nothing.
func serverSpans(r *mux.Router) {
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			req, span := telemetry.ServerSpan(req)
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, req)
			tmpl, _ := mux.CurrentRoute(req).GetPathTemplate()
			telemetry.EndServer(span, req.Method, tmpl, sw.status)
		})
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// adminRoutes mounts a's routes under /admin/api as the web package does.
func adminRoutes(a *Admin) func(r *mux.Router) {
	return func(r *mux.Router) { a.AdminRoutes(r.PathPrefix("/admin/api").Subrouter()) }
}

// failInsertsWhen makes every insert into table of a row that meets when
// (a condition on new.<column> with constants only; "" for every row) fail
// with message, until undo is called. It is a trigger on both backends:
// SQLite's raise(abort), a PostgreSQL plpgsql function that raises — with
// SQLSTATE sqlstate when one is given (53100 is what a full disk answers),
// else P0001.
func failInsertsWhen(t testing.TB, db *store.DB, table, when, message, sqlstate string) (undo func()) {
	t.Helper()
	name := fmt.Sprintf("omni_test_fail_%d", failures.Add(1))
	var do, undoSQL []string
	if db.Postgres() {
		raise := `raise exception '` + message + `'`
		if sqlstate != "" {
			raise += ` using errcode = '` + sqlstate + `'`
		}
		cond := ""
		if when != "" {
			cond = ` when (` + when + `)`
		}
		do = []string{
			`create function ` + name + `() returns trigger language plpgsql as $$ begin ` + raise + `; end $$`,
			`create trigger ` + name + ` before insert on ` + table + ` for each row` + cond + ` execute function ` + name + `()`,
		}
		undoSQL = []string{`drop trigger ` + name + ` on ` + table, `drop function ` + name + `()`}
	} else {
		cond := ""
		if when != "" {
			cond = ` when ` + when
		}
		do = []string{`create trigger ` + name + ` before insert on ` + table + cond + ` begin select raise(abort, '` + message + `'); end`}
		undoSQL = []string{`drop trigger ` + name}
	}
	for _, q := range do {
		if _, err := db.Write.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return sync.OnceFunc(func() {
		for _, q := range undoSQL {
			if _, err := db.Write.Exec(q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
	})
}

var failures atomic.Int64
