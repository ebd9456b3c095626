package onboarding_test

// The traces of the bot outbox and the onboarding bot, driven end to end:
// the backend and the bot as serve mounts them (web.New's middleware, whose
// server spans continue a caller's traceparent), over real HTTP, on a real
// SQLite database, with the bot talking to the fake Bot API through telego.
// The tests record spans process-wide (telemetrytest.Record), so none of
// them runs in parallel; each picks its spans by trace id.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"switchyard/bot/backend"
	"switchyard/bot/onboarding"
	"switchyard/store/storetest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/telemetry/telemetrytest"
	"switchyard/web"
)

const (
	traceBotID         = 4711
	traceSecret        = "trace-bot-to-backend-secret-0123456789"
	traceAdminToken    = "trace-admin-token-0123456789abcdef"
	traceWebhookSecret = "trace-webhook_SECRET-0123456789"
	// tracePhone is a phone number the flow carries as user text: in a
	// partner's name (so in a DM's text) and in a message to the bot.
	tracePhone       = "+7 999 123-45-67"
	tracePhoneDigits = "9991234567"
	// within bounds every wait: generous, for a loaded 2-core machine under -race.
	within = 30 * time.Second
)

// traceStack is the backend and the onboarding bot on one database, served
// by one web server, the bot running against the fake Bot API.
type traceStack struct {
	t    *testing.T
	srv  *httptest.Server
	fake *fakebot.Server
}

func newTraceStack(t *testing.T, updates string) *traceStack {
	t.Helper()
	db := storetest.New(t)
	fake := fakebot.New(fakebot.Opts{WebhookRetryMin: 20 * time.Millisecond, WebhookRetryMax: 200 * time.Millisecond})
	fs := httptest.NewServer(fake)
	t.Cleanup(fs.Close)
	t.Cleanup(fake.Close)

	var h http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(srv.Close)
	be := backend.New(backend.Opts{DB: db, Secret: traceSecret, BotUsername: "trace_bot", PollInterval: 20 * time.Millisecond})
	t.Cleanup(be.Shutdown) // before srv.Close: ends the long polls
	opts := onboarding.Opts{
		DB:              db,
		BackendURL:      srv.URL,
		BackendSecret:   traceSecret,
		TelegramToken:   fakebot.Token(traceBotID),
		TelegramAPIURL:  fs.URL,
		TelegramTimeout: 5 * time.Second,
		Limits:          telegram.Limits{Chat: telegram.Limit{Rate: 1000, Burst: 10}, Bot: telegram.Limit{Rate: 10000, Burst: 100}},
		LongPollWait:    2 * time.Second,
		Updates:         updates,
		CabinetURL:      "https://cabinet.example/signup",
	}
	if updates == onboarding.UpdatesWebhook {
		opts.WebhookSecret, opts.WebhookURL = traceWebhookSecret, srv.URL+"/webhooks/bot"
	}
	bot, err := onboarding.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h = web.New(web.Options{
		DB: db, AdminToken: traceAdminToken,
		Public: []web.RoutesFunc{be.Routes, bot.Routes},
		Admin:  []web.RoutesFunc{be.AdminRoutes, bot.AdminRoutes},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bot.Run(ctx) }()
	t.Cleanup(func() { // first of all: the bot stops while its servers still answer
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(within):
			t.Errorf("Run did not return within %s of its context ending", within)
		}
	})
	return &traceStack{t: t, srv: srv, fake: fake}
}

// admin calls the admin API and decodes its answer into out (nil: none).
func (s *traceStack) admin(method, path, body string, want int, out any) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.srv.URL+"/admin/api"+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+traceAdminToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *traceStack) user(link, name, telegramID string) backend.User {
	s.t.Helper()
	body := fmt.Sprintf(`{"link":%q,"name":%q}`, link, name)
	if telegramID != "" {
		body = fmt.Sprintf(`{"link":%q,"name":%q,"telegramId":%q}`, link, name, telegramID)
	}
	var u backend.User
	s.admin(http.MethodPost, "/users", body, http.StatusCreated, &u)
	return u
}

func (s *traceStack) tg() *fakebot.Bot { return s.fake.Bot(fakebot.Token(traceBotID)) }

// waitBotMessage waits for a message of the bot containing text in chat.
func (s *traceStack) waitBotMessage(chat int64, text string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	err := s.fake.WaitUntil(ctx, func() bool {
		c, ok := s.tg().Chat(chat)
		if !ok {
			return false
		}
		for _, m := range c.Messages {
			if m.Sender == fakebot.SenderBot && strings.Contains(m.Text, text) {
				return true
			}
		}
		return false
	})
	if err != nil {
		s.t.Fatalf("waiting for %q in chat %d: %v", text, chat, err)
	}
}

// traceOf names a span's trace for the matchers below.
func traceOf(s sdktrace.ReadOnlySpan) trace.TraceID { return s.SpanContext().TraceID() }

// inTrace matches the spans of s's trace.
func inTrace(s sdktrace.ReadOnlySpan) func(sdktrace.ReadOnlySpan) bool {
	return func(o sdktrace.ReadOnlySpan) bool { return traceOf(o) == traceOf(s) }
}

// childOf matches the children of parent.
func childOf(parent sdktrace.ReadOnlySpan) func(sdktrace.ReadOnlySpan) bool {
	return func(o sdktrace.ReadOnlySpan) bool { return telemetrytest.ChildOf(o, parent) }
}

// handledUnder matches the spans whose parent is the queue's consumer span
// (queue.handle) of a message sent under parent: a DM's attempt, which the
// DM queue's worker runs in the trace of the handling that recorded it.
func handledUnder(rec *telemetrytest.Recorder, parent sdktrace.ReadOnlySpan) func(sdktrace.ReadOnlySpan) bool {
	return func(o sdktrace.ReadOnlySpan) bool {
		for _, h := range rec.Spans() {
			if h.SpanContext().SpanID() == o.Parent().SpanID() && h.SpanContext().TraceID() == o.Parent().TraceID() {
				return strings.HasPrefix(h.Name(), "queue.handle ") && telemetrytest.ChildOf(h, parent)
			}
		}
		return false
	}
}

// attr matches the spans whose attribute key is value.
func attr(key, value string) func(sdktrace.ReadOnlySpan) bool {
	return func(o sdktrace.ReadOnlySpan) bool { return telemetrytest.Attr(o, key) == value }
}

func all(ms ...func(sdktrace.ReadOnlySpan) bool) func(sdktrace.ReadOnlySpan) bool {
	return func(o sdktrace.ReadOnlySpan) bool {
		for _, m := range ms {
			if !m(o) {
				return false
			}
		}
		return true
	}
}

// spanOf finds the span sc names among the recorded ones.
func spanOf(t *testing.T, rec *telemetrytest.Recorder, sc trace.SpanContext) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	for _, s := range rec.Trace(sc.TraceID().String()) {
		if s.SpanContext().SpanID() == sc.SpanID() {
			found = s
		}
	}
	if found == nil {
		t.Fatalf("no recorded span %s in trace %s", sc.SpanID(), sc.TraceID())
	}
	return found
}

// TestTracesFollowAnOutboxEventToItsDM drives a backend action that emits
// new_partner to a leader, the bot's long-polling consumer that handles it,
// and the DM it sends through the fake Bot API, and asserts the traces the
// issue asks for: the emit is a span of the action's trace; the handling is
// the root of a new trace linked to the emit (and to the consumer's batch,
// whose trace holds the poll and the ack, each joined by the backend's
// server span); the DM's attempt and its Bot API call are in the handling's
// trace. A leader who blocked the bot gets the web fallback, an event on the
// attempt's span and a delivery of its own in the same trace. The webhook's
// update is one trace from the request to the reply's Bot API call. No span
// holds a secret or the phone number the flow carries.
func TestTracesFollowAnOutboxEventToItsDM(t *testing.T) {
	rec := telemetrytest.Record(t)
	s := newTraceStack(t, onboarding.UpdatesWebhook)
	alice := s.user("alice", "Alice", "6001")
	bob := s.user("bob", "Bob "+tracePhone, "")
	carol := s.user("carol", "Carol", "6002")
	dave := s.user("dave", "Dave", "")
	aliceTG := telego.User{ID: 6001, FirstName: "Alice"}
	carolTG := telego.User{ID: 6002, FirstName: "Carol"}

	// Alice opens the bot (an update through the webhook) and writes her
	// phone number to it.
	if _, err := s.tg().Start(aliceTG, ""); err != nil {
		t.Fatal(err)
	}
	s.waitBotMessage(6001, "регистрация ещё не подтверждена")
	if _, err := s.tg().Send(aliceTG, "my phone: "+tracePhone); err != nil {
		t.Fatal(err)
	}

	// The action: bob registers under alice; new_partner goes to alice.
	s.admin(http.MethodPost, fmt.Sprintf("/users/%d/register", bob.UID), fmt.Sprintf(`{"leaderUid":%d}`, alice.UID), http.StatusOK, nil)
	s.waitBotMessage(6001, "Новый партнёр в вашей структуре")

	t.Run("the emit is a producer span of the backend action's trace", func(t *testing.T) {
		emit := rec.WaitFor(t, within, "bot.outbox.emit", all(attr("bot.event_type", "new_partner"), attr("telegram.user_id", "6001")))
		if emit.SpanKind() != trace.SpanKindProducer || telemetrytest.Attr(emit, "bot.event_id") == "" {
			t.Fatalf("emit span: kind %v, attributes %v", emit.SpanKind(), emit.Attributes())
		}
		action := spanOf(t, rec, emit.Parent())
		if action.Name() != "POST /admin/api/users/{uid}/register" || action.SpanKind() != trace.SpanKindServer {
			t.Fatalf("the emit's parent is %q (%v), want the action's server span", action.Name(), action.SpanKind())
		}
		registered := rec.WaitFor(t, within, "bot.outbox.emit", all(inTrace(action), attr("bot.event_type", "registered")))
		if !telemetrytest.ChildOf(registered, action) {
			t.Fatal("the action's other emit (registered) is not a child of the action's span")
		}
	})

	t.Run("the handling is a new trace linked to the emit, and the DM and its Bot API call are in it", func(t *testing.T) {
		emit := rec.WaitFor(t, within, "bot.outbox.emit", all(attr("bot.event_type", "new_partner"), attr("telegram.user_id", "6001")))
		handle := rec.WaitFor(t, within, "bot.event.handle", attr("bot.event_id", telemetrytest.Attr(emit, "bot.event_id")))
		switch {
		case traceOf(handle) == traceOf(emit):
			t.Fatal("the handling is in the emit's trace; it must start a trace of its own")
		case handle.Parent().IsValid():
			t.Fatalf("the handling has a parent %s; it must be its trace's root", handle.Parent().SpanID())
		case !telemetrytest.LinksTo(handle, emit):
			t.Fatalf("the handling does not link to the emit's span; links %v", handle.Links())
		case handle.SpanKind() != trace.SpanKindConsumer || telemetrytest.Attr(handle, "bot.event.outcome") != "handled":
			t.Fatalf("handling span: kind %v, attributes %v", handle.SpanKind(), handle.Attributes())
		}
		send := rec.WaitFor(t, within, "bot.dm.send", all(inTrace(handle), handledUnder(rec, handle)))
		if telemetrytest.Attr(send, "telegram.chat_id") != "6001" || telemetrytest.Attr(send, "bot.dm.outcome") != "sent" {
			t.Fatalf("DM attempt: attributes %v", send.Attributes())
		}
		call := rec.WaitFor(t, within, "telegram sendMessage", childOf(send))
		if call.SpanKind() != trace.SpanKindClient {
			t.Fatalf("the Bot API call's kind is %v", call.SpanKind())
		}
	})

	t.Run("the consumer's batch holds the poll and the ack, each joined by the backend's server span", func(t *testing.T) {
		emit := rec.WaitFor(t, within, "bot.outbox.emit", all(attr("bot.event_type", "new_partner"), attr("telegram.user_id", "6001")))
		handle := rec.WaitFor(t, within, "bot.event.handle", attr("bot.event_id", telemetrytest.Attr(emit, "bot.event_id")))
		var batch sdktrace.ReadOnlySpan
		for _, l := range handle.Links() {
			if l.SpanContext.TraceID() != traceOf(emit) {
				batch = rec.WaitFor(t, within, "bot.events.batch", func(o sdktrace.ReadOnlySpan) bool {
					return o.SpanContext().SpanID() == l.SpanContext.SpanID()
				})
			}
		}
		if batch == nil {
			t.Fatalf("the handling links to no batch; links %v", handle.Links())
		}
		poll := rec.WaitFor(t, within, "bot.events.poll", childOf(batch))
		rec.WaitFor(t, within, "GET /bot/events/pending", childOf(poll))
		ack := rec.WaitFor(t, within, "bot.events.ack", childOf(batch))
		rec.WaitFor(t, within, "POST /bot/events/ack", childOf(ack))
		rec.WaitFor(t, within, "store.tx", childOf(batch))
	})

	t.Run("a webhook update is one trace from the request to the reply's Bot API call", func(t *testing.T) {
		upd := rec.WaitFor(t, within, "bot.update.handle", all(attr("telegram.user_id", "6001"), attr("telegram.update.kind", "message")))
		hook := spanOf(t, rec, upd.Parent())
		if hook.Name() != "POST /webhooks/bot" || telemetrytest.Attr(upd, "telegram.update_id") == "" {
			t.Fatalf("the update's parent is %q; attributes %v", hook.Name(), upd.Attributes())
		}
		rec.WaitFor(t, within, "store.tx", childOf(hook)) // the update stored before the 200
		check := rec.WaitFor(t, within, "bot.account.check", childOf(upd))
		rec.WaitFor(t, within, "GET /auth/check-account-by-telegram/{id}", childOf(check))
		reply := rec.WaitFor(t, within, "bot.dm.send", handledUnder(rec, upd))
		rec.WaitFor(t, within, "telegram sendMessage", childOf(reply))
	})

	t.Run("a DM to a user who blocked the bot falls back to the web notification in the same trace", func(t *testing.T) {
		if _, err := s.tg().Start(carolTG, ""); err != nil {
			t.Fatal(err)
		}
		s.waitBotMessage(6002, "регистрация ещё не подтверждена")
		if err := s.tg().Block(carolTG); err != nil {
			t.Fatal(err)
		}
		s.admin(http.MethodPost, fmt.Sprintf("/users/%d/register", dave.UID), fmt.Sprintf(`{"leaderUid":%d}`, carol.UID), http.StatusOK, nil)
		emit := rec.WaitFor(t, within, "bot.outbox.emit", all(attr("bot.event_type", "new_partner"), attr("telegram.user_id", "6002")))
		handle := rec.WaitFor(t, within, "bot.event.handle", attr("bot.event_id", telemetrytest.Attr(emit, "bot.event_id")))
		first := rec.WaitFor(t, within, "bot.dm.send", all(handledUnder(rec, handle), attr("bot.dm.outcome", "fallback")))
		fellBack := false
		for _, ev := range first.Events() {
			fellBack = fellBack || ev.Name == "bot.dm.fallback"
		}
		if !fellBack {
			t.Fatalf("the attempt that found the user unreachable has no bot.dm.fallback event: %v", first.Events())
		}
		notify := rec.WaitFor(t, within, "bot.dm.send", all(handledUnder(rec, first), attr("bot.dm.phase", "fallback"), attr("bot.dm.outcome", "notified")))
		add := rec.WaitFor(t, within, "bot.notification.add", childOf(notify))
		rec.WaitFor(t, within, "POST /bot/notification", childOf(add))
	})

	t.Run("no span holds a secret or an unmasked phone", func(t *testing.T) {
		telemetrytest.AssertClean(t, rec.Spans(), fakebot.Token(traceBotID), traceSecret, traceAdminToken, traceWebhookSecret,
			tracePhone, tracePhoneDigits)
	})
}

// TestTracesOfPolledUpdates: an update fetched by getUpdates starts a trace
// of its own, which its reply's attempt and Bot API call continue.
func TestTracesOfPolledUpdates(t *testing.T) {
	rec := telemetrytest.Record(t)
	s := newTraceStack(t, onboarding.UpdatesLongPoll)
	if _, err := s.tg().Send(telego.User{ID: 6003, FirstName: "Erin"}, "/help"); err != nil {
		t.Fatal(err)
	}
	s.waitBotMessage(6003, "/menu")
	upd := rec.WaitFor(t, within, "bot.update.handle", attr("telegram.user_id", "6003"))
	if upd.Parent().IsValid() || upd.SpanKind() != trace.SpanKindConsumer || telemetrytest.Attr(upd, "telegram.update_id") == "" {
		t.Fatalf("update span: parent %v, kind %v, attributes %v", upd.Parent().SpanID(), upd.SpanKind(), upd.Attributes())
	}
	reply := rec.WaitFor(t, within, "bot.dm.send", handledUnder(rec, upd))
	rec.WaitFor(t, within, "telegram sendMessage", childOf(reply))
	telemetrytest.AssertClean(t, rec.Spans(), fakebot.Token(traceBotID), traceSecret, traceAdminToken)
}
