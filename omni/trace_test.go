package omni

// The traces of the chat platform, driven end to end: the webhook and the
// admin API over real HTTP (with server spans named by route, as web's
// middleware names them), the chat and outbound roles on a real database
// (SQLite, or PostgreSQL with SWITCHYARD_TEST_DB), and the fake Bot API
// through telego. The tests record spans process-wide
// (telemetrytest.Record), so none of them runs in parallel; each picks its
// spans by trace id.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"switchyard/queue"
	"switchyard/telegram/fakebot"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
	"switchyard/testwait"
)

const (
	// traceCustomer writes to the business account; their name and
	// phone number must appear in no span.
	traceCustomer     = 7001
	traceCustomerName = "Zinaida"
	tracePhone        = "+7 999 123-45-67"
	tracePhoneDigits  = "9991234567"
	traceText         = "hello, call me at " + tracePhone
	traceAck          = "Thanks, we will answer soon"
	traceReply        = "Operator here: all set"
	traceRetried      = "Operator again: sorry for the wait"
	// traceWithin bounds every wait (testwait stretches it further).
	traceWithin = 10 * time.Second
)

// traced is the spans a trace test looks at.
type traced struct {
	t   *testing.T
	rec *telemetrytest.Recorder
}

// child waits for a span called name that is a child of parent.
func (tr traced) child(parent sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	tr.t.Helper()
	return tr.rec.WaitFor(tr.t, traceWithin, name, func(s sdktrace.ReadOnlySpan) bool { return telemetrytest.ChildOf(s, parent) })
}

// parent waits for s's parent span, and checks it is called name.
func (tr traced) parent(s sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	tr.t.Helper()
	p := tr.rec.WaitFor(tr.t, traceWithin, name, func(o sdktrace.ReadOnlySpan) bool {
		return o.SpanContext().SpanID() == s.Parent().SpanID() && o.SpanContext().TraceID() == s.SpanContext().TraceID()
	})
	return p
}

// oneTree fails unless the ended spans of root's trace form one tree under
// root, shaped as parents says: root has no parent, and every other span's
// parent is in the trace and is one parents allows for the span's name (a
// name parents does not know is not allowed at all).
func (tr traced) oneTree(root sdktrace.ReadOnlySpan, parents map[string][]string) {
	tr.t.Helper()
	if root.Parent().IsValid() {
		tr.t.Fatalf("%q has a parent %s; it must start the trace", root.Name(), root.Parent().SpanID())
	}
	spans := tr.rec.Trace(root.SpanContext().TraceID().String())
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name())
		if s == root {
			continue
		}
		p, ok := byID[s.Parent().SpanID()]
		switch {
		case !ok:
			tr.t.Errorf("span %q of the trace has a parent %s outside it", s.Name(), s.Parent().SpanID())
		case !slices.Contains(parents[s.Name()], p.Name()):
			tr.t.Errorf("span %q is a child of %q, want one of %q", s.Name(), p.Name(), parents[s.Name()])
		}
	}
	tr.t.Logf("trace %s: %s", root.SpanContext().TraceID(), strings.Join(names, ", "))
}

// The shapes of the platform's traces: each span name and the names its
// parent may have.
var (
	hookTree = map[string][]string{
		"omni.inbound.enqueue":               {"POST " + WebhookPath},
		"store.tx":                           {"omni.inbound.enqueue", "omni.outbound.deliver", "omni.chat.apply"},
		"queue.handle " + QueueReceiverFlow:  {"omni.inbound.enqueue"},
		"queue.handle " + QueueReceiverRetry: {"omni.chat.apply"},
		"omni.chat.apply":                    {"queue.handle " + QueueReceiverFlow, "queue.handle " + QueueReceiverRetry},
		"store.savepoint":                    {"omni.chat.apply"},
		"queue.handle " + QueueSenderFlow:    {"omni.chat.apply"},
		"omni.outbound.deliver":              {"queue.handle " + QueueSenderFlow},
		"telegram sendMessage":               {"omni.outbound.deliver"},
	}
	replyTree = map[string][]string{
		"store.tx":                         {replyRoute, "omni.outbound.deliver"},
		"queue.handle " + QueueSenderFlow:  {replyRoute},
		"queue.handle " + QueueSenderRetry: {"omni.outbound.deliver"},
		"omni.outbound.deliver":            {"queue.handle " + QueueSenderFlow, "queue.handle " + QueueSenderRetry},
		"telegram sendMessage":             {"omni.outbound.deliver"},
	}
)

// replyRoute is the server span of an operator's reply.
const replyRoute = "POST /admin/api/omni/threads/{id:[0-9]+}/messages"

func attrIs(key, value string) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool { return telemetrytest.Attr(s, key) == value }
}

func TestTracesFollowAnUpdateToItsReply(t *testing.T) {
	rec := telemetrytest.Record(t)
	p := newPlatform(t, platformOpts{chat: ChatOpts{AutoAckText: traceAck}})
	conn := p.connect(t, 4242, true)
	customer := telego.User{ID: traceCustomer, FirstName: traceCustomerName, LastName: tracePhone}
	if _, err := p.bot.BusinessMessage(conn.ID, customer, traceText); err != nil {
		t.Fatal(err)
	}

	var thread ThreadID
	t.Run("an inbound message is one trace from the webhook to its acknowledgement's Bot API call", func(t *testing.T) {
		tr := traced{t: t, rec: rec}
		apply := rec.WaitFor(t, traceWithin, "omni.chat.apply", func(s sdktrace.ReadOnlySpan) bool {
			return attrIs("omni.event_type", string(EventMessageCreated))(s) && attrIs("omni.apply.outcome", string(outcomeApplied))(s) &&
				telemetrytest.Attr(s, "omni.thread_id") != ""
		})
		id, err := strconv.ParseInt(telemetrytest.Attr(apply, "omni.thread_id"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		thread = ThreadID(id)
		if !strings.HasPrefix(telemetrytest.Attr(apply, "idempotency.key"), "telegram:"+strconv.Itoa(inboxBotID)+":") {
			t.Errorf("apply span: attributes %v", apply.Attributes())
		}

		// Up: the chat role's delivery, the enqueue, the webhook.
		handle := tr.parent(apply, "queue.handle "+QueueReceiverFlow)
		enqueue := tr.parent(handle, "omni.inbound.enqueue")
		hook := tr.parent(enqueue, "POST "+WebhookPath)
		if hook.SpanKind() != trace.SpanKindServer || enqueue.SpanKind() != trace.SpanKindProducer || handle.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("kinds: webhook %v, enqueue %v, delivery %v", hook.SpanKind(), enqueue.SpanKind(), handle.SpanKind())
		}
		if telemetrytest.Attr(enqueue, "idempotency.key") != telemetrytest.Attr(apply, "idempotency.key") ||
			telemetrytest.Attr(enqueue, "omni.enqueue.outcome") != webhookAccepted {
			t.Errorf("enqueue span: attributes %v", enqueue.Attributes())
		}
		tr.child(enqueue, "store.tx") // committed before the 200

		// The apply's storage work is in this trace; the batch transaction
		// that committed it is linked.
		tr.child(apply, "store.savepoint")
		if len(apply.Links()) != 1 {
			t.Fatalf("the apply links to %d spans, want its batch", len(apply.Links()))
		}
		batch := rec.WaitFor(t, traceWithin, "omni.chat.batch", func(s sdktrace.ReadOnlySpan) bool {
			return s.SpanContext().SpanID() == apply.Links()[0].SpanContext.SpanID()
		})
		tr.child(batch, "store.tx")

		// Down: the acknowledgement's delivery and its Bot API call.
		sendHandle := tr.child(apply, "queue.handle "+QueueSenderFlow)
		deliver := tr.child(sendHandle, "omni.outbound.deliver")
		call := tr.child(deliver, "telegram sendMessage")
		if call.SpanKind() != trace.SpanKindClient {
			t.Errorf("the Bot API call's kind is %v", call.SpanKind())
		}
		if telemetrytest.Attr(deliver, "omni.deliver.outcome") != sendSent || telemetrytest.Attr(deliver, "omni.deliver.attempt") != "1" ||
			telemetrytest.Attr(deliver, "telegram.chat_id") != strconv.Itoa(traceCustomer) {
			t.Errorf("deliver span: attributes %v", deliver.Attributes())
		}
		tr.oneTree(hook, hookTree)

		// The rows keep the trace: the console's search gives the update,
		// the customer's message, the acknowledgement and its delivery this
		// trace's id.
		want := hook.SpanContext().TraceID().String()
		kinds := map[string]int{}
		testwait.Until(t, traceWithin, "the acknowledgement's delivery in the search", func() bool {
			found, err := p.admin.History(t.Context(), strconv.Itoa(traceCustomer), 50)
			if err != nil {
				t.Fatal(err)
			}
			clear(kinds)
			for _, it := range found.Items {
				if it.TraceID == want {
					kinds[it.Kind]++
				}
			}
			return kinds["inbound update"] == 1 && kinds["thread message"] == 2 && kinds["delivery attempt"] == 1
		}, func() string { return fmt.Sprintf("items in the trace by kind: %v", kinds) })
	})

	t.Run("an operator's reply is one trace from the admin request to the Bot API call", func(t *testing.T) {
		tr := traced{t: t, rec: rec}
		if thread == 0 {
			t.Skip("no thread")
		}
		id := p.reply(t, thread, traceReply)
		p.waitStatus(t, id, StatusSent, traceWithin)
		deliver := rec.WaitFor(t, traceWithin, "omni.outbound.deliver", attrIs("omni.message_id", fmt.Sprint(id)))
		handle := tr.parent(deliver, "queue.handle "+QueueSenderFlow)
		req := tr.parent(handle, replyRoute)
		tr.child(req, "store.tx")
		tr.child(deliver, "telegram sendMessage")
		tr.oneTree(req, replyTree)
	})

	t.Run("a failed delivery is retried in the same trace, its attempt marked failed", func(t *testing.T) {
		tr := traced{t: t, rec: rec}
		if thread == 0 {
			t.Skip("no thread")
		}
		p.fake.AddFault(fakebot.Fault{Kind: fakebot.FaultServerError, Method: "sendMessage", Times: 1})
		id := p.reply(t, thread, traceRetried)
		p.waitStatus(t, id, StatusSent, traceWithin)
		failed := rec.WaitFor(t, traceWithin, "omni.outbound.deliver",
			func(s sdktrace.ReadOnlySpan) bool {
				return attrIs("omni.message_id", fmt.Sprint(id))(s) && attrIs("omni.deliver.outcome", sendRetry)(s)
			})
		if failed.Status().Code != codes.Error || telemetrytest.Attr(failed, "messaging.destination.name") != QueueSenderFlow {
			t.Errorf("the failed attempt: status %v, attributes %v", failed.Status(), failed.Attributes())
		}
		if call := tr.child(failed, "telegram sendMessage"); call.Status().Code != codes.Error {
			t.Errorf("the failed Bot API call's status is %v", call.Status())
		}
		retry := tr.child(failed, "queue.handle "+QueueSenderRetry)
		sent := tr.child(retry, "omni.outbound.deliver")
		if telemetrytest.Attr(sent, "omni.deliver.outcome") != sendSent || telemetrytest.Attr(sent, "omni.deliver.attempt") != "2" ||
			sent.Status().Code == codes.Error {
			t.Errorf("the second attempt: status %v, attributes %v", sent.Status(), sent.Attributes())
		}
		tr.child(sent, "telegram sendMessage")
		req := tr.parent(tr.parent(failed, "queue.handle "+QueueSenderFlow), replyRoute)
		tr.oneTree(req, replyTree)
	})

	t.Run("no span holds a secret, a name, a text or an unmasked phone", func(t *testing.T) {
		telemetrytest.AssertClean(t, rec.Spans(), inboxToken, testSecret, traceCustomerName, traceText, traceAck, traceReply,
			traceRetried, tracePhone, tracePhoneDigits)
	})
}

// TestTracesKeepAnEnvelopeMovedToTheRetryLane: an envelope that fails to
// apply moves to receiver.retry in its webhook's trace, and its apply there
// continues it.
func TestTracesKeepAnEnvelopeMovedToTheRetryLane(t *testing.T) {
	rec := telemetrytest.Record(t)
	tr := traced{t: t, rec: rec}
	p := newPlatform(t, platformOpts{chat: ChatOpts{Retry: queue.RetryPolicy{MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}}})
	undo := failInsertsWhen(t, p.db, "omni_contacts", "", "contacts refused on purpose", "")
	if _, err := p.bot.Send(telego.User{ID: traceCustomer, FirstName: traceCustomerName}, traceText); err != nil {
		t.Fatal(err)
	}
	failed := rec.WaitFor(t, traceWithin, "omni.chat.apply", attrIs("omni.apply.outcome", chatRetry))
	if failed.Status().Code != codes.Error {
		t.Errorf("the failed apply's status is %v", failed.Status())
	}
	undo()
	applied := rec.WaitFor(t, traceWithin, "omni.chat.apply", func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanContext().TraceID() == failed.SpanContext().TraceID() && attrIs("omni.apply.outcome", string(outcomeApplied))(s)
	})
	if telemetrytest.Attr(applied, "omni.thread_id") == "" || applied.Status().Code == codes.Error {
		t.Errorf("the apply in %s: status %v, attributes %v", QueueReceiverRetry, applied.Status(), applied.Attributes())
	}
	retry := tr.parent(applied, "queue.handle "+QueueReceiverRetry)
	if !telemetrytest.ChildOf(retry, failed) {
		t.Errorf("the delivery in %s is not a child of the apply that moved the envelope there", QueueReceiverRetry)
	}
	tr.child(applied, "store.tx")
	hook := tr.parent(tr.parent(tr.parent(failed, "queue.handle "+QueueReceiverFlow), "omni.inbound.enqueue"), "POST "+WebhookPath)
	tr.oneTree(hook, hookTree)
	telemetrytest.AssertClean(t, rec.Spans(), inboxToken, testSecret, traceCustomerName, traceText, tracePhone, tracePhoneDigits)
}

// TestSpansCostNothingWithTracingOff: with no tracer installed, the chat
// platform's spans allocate nothing.
func TestSpansCostNothingWithTracingOff(t *testing.T) {
	if telemetry.Enabled() {
		t.Skip("a provider is installed")
	}
	ctx := context.Background()
	env := &Envelope{IdempotencyKey: "telegram:5550001:7", EventType: EventMessageCreated}
	m := queue.Message{ID: "m_1", Attempt: 1, Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	it := &flowItem{m: m, env: env, done: true, res: applied{Outcome: outcomeApplied, Thread: 3}}
	for name, f := range map[string]func(){
		spanEnqueue: func() {
			_, span := enqueueSpan(ctx, env)
			endEnqueue(span, queue.SendResult{ID: m.ID}, nil)
		},
		spanBatch: func() {
			_, span := batchSpan(ctx, 8)
			telemetry.End(span, nil)
		},
		spanApply: func() {
			_, span := applySpan(ctx, m, env, ctx)
			outcome, err := flowItemOutcome(it)
			endApply(span, outcome, it.res, err)
		},
		spanDeliver: func() {
			_, span := deliverSpan(ctx, m, true)
			endDeliver(span, deliveryTrace{message: 9, chatID: "7001", attempt: 1, outcome: sendSent}, nil)
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.0f times per run with tracing off", name, n)
		}
	}
}
