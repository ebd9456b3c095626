package referral

// The traces of the referral consumer, driven end to end: an identity event
// published through the admin API's publish route (under the server span
// web's middleware gives every request), consumed by the group, and its
// outgoing events. The tests record spans process-wide
// (telemetrytest.Record), so none of them runs in parallel; each picks its
// spans by their links, parents and attributes.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"switchyard/queue"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
)

// traceWithin bounds every wait: generous, for a loaded 2-core machine under -race.
const traceWithin = 30 * time.Second

// tracedAPIServer serves the referral and queue admin routes under
// /admin/api, each request a server span named by its route template, as
// web's middleware makes it (telemetry.ServerSpan and EndServer).
func tracedAPIServer(t *testing.T, h *harness) string {
	t.Helper()
	r := mux.NewRouter()
	r.Use(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			req, span := telemetry.ServerSpan(req)
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, req)
			tmpl, _ := mux.CurrentRoute(req).GetPathTemplate()
			telemetry.EndServer(span, req.Method, tmpl, sw.status)
		})
	})
	api := r.PathPrefix("/admin/api").Subrouter()
	h.svc.AdminRoutes(api)
	queue.NewAdmin(queue.AdminOpts{DB: h.db}).AdminRoutes(api)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL + "/admin/api"
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// publishTraced publishes an identity event through the admin route with
// the caller's traceparent header.
func publishTraced(t *testing.T, api, traceparent string, body []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, api+"/topics/"+TopicIdentityUsers+"/messages", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("publish: %d, want 202", resp.StatusCode)
	}
}

// caller starts a span standing for the identity service that publishes,
// and returns it with its traceparent; it ends with the test.
func caller(t *testing.T, name string) (trace.SpanContext, string) {
	t.Helper()
	ctx, span := telemetry.Start(t.Context(), name)
	t.Cleanup(func() { span.End() })
	return span.SpanContext(), telemetry.Traceparent(ctx)
}

// handleOf waits for the processing span of the identity event msgID.
func handleOf(t *testing.T, rec *telemetrytest.Recorder, msgID, outcome string) sdktrace.ReadOnlySpan {
	t.Helper()
	return rec.WaitFor(t, traceWithin, spanHandle, func(s sdktrace.ReadOnlySpan) bool {
		return telemetrytest.Attr(s, attrMessageID) == msgID && telemetrytest.Attr(s, attrOutcome) == outcome
	})
}

// receiveOf waits for the queue's receive span that is s's parent.
func receiveOf(t *testing.T, rec *telemetrytest.Recorder, s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	return rec.WaitFor(t, traceWithin, "topic.receive "+TopicIdentityUsers, func(p sdktrace.ReadOnlySpan) bool {
		return telemetrytest.ChildOf(s, p)
	})
}

// TestTracesFollowAnIdentityEventToItsBond publishes a referred user's
// user-upserted through the admin API with a traceparent and asserts the
// trees the spec asks for: the route's server span continues the caller's
// trace and the record carries it; the consumer's receipt (topic.receive)
// is the root of a new trace linked to it, the processing span
// (referral.event.handle) its child with the message's ids, correlation and
// outcome, and each statement a storage span under the processing; each
// outgoing event is a producer span of a trace of its own linked to the
// processing, whose traceparent its record carries. A duplicate is a
// processing span marked skipped-duplicate, a guard's no-op one with the
// guard's code, and no span holds the user's name, phone or ReferrerUrl.
func TestTracesFollowAnIdentityEventToItsBond(t *testing.T) {
	rec := telemetrytest.Record(t)
	h := newHarness(t, harnessOpts{})
	api := tracedAPIServer(t, h)
	owner, user := newUser(), newUser()
	h.publish(upsert(owner, 1).set("Type", string(UserAgent)).json())
	h.link("trace-agent-slug", owner)
	h.waitIdle()

	ev := upsert(user, 1).referrer("Trace-Agent-Slug")
	identity, identityTP := caller(t, "identity publishes user-upserted")
	publishTraced(t, api, identityTP, ev.json())
	h.waitIdle()

	server := rec.WaitFor(t, traceWithin, "POST /admin/api/topics/{topic}/messages", func(s sdktrace.ReadOnlySpan) bool {
		return s.Parent().SpanID() == identity.SpanID()
	})
	handle := handleOf(t, rec, ev.MessageID, string(OutcomeR1))
	receive := receiveOf(t, rec, handle)

	t.Run("the receipt is a new trace linked to the publish, and the processing is its child", func(t *testing.T) {
		switch {
		case server.SpanContext().TraceID() != identity.TraceID():
			t.Fatal("the publish route's server span is not in the caller's trace")
		case receive.Parent().IsValid() || receive.SpanContext().TraceID() == identity.TraceID():
			t.Fatal("the receive span is not the root of a trace of its own")
		case !telemetrytest.LinksTo(receive, server):
			t.Fatalf("the receive span does not link to the publish's server span (the record's traceparent); links %v", receive.Links())
		case receive.SpanKind() != trace.SpanKindConsumer || telemetrytest.Attr(receive, "messaging.consumer.group.name") != ConsumerGroup:
			t.Fatalf("receive span: kind %v, attributes %v", receive.SpanKind(), receive.Attributes())
		}
		for k, want := range map[string]string{
			attrMessageType: string(TypeUserUpserted), attrCorrelationID: ev.CorrelationID, attrOutcome: string(OutcomeR1),
			attrAppliedRule: string(RuleR1), attrUserID: string(user),
		} {
			if got := telemetrytest.Attr(handle, k); got != want {
				t.Errorf("processing span: %s = %q, want %q", k, got, want)
			}
		}
		if telemetrytest.Attr(handle, attrBondID) == "" || telemetrytest.Attr(handle, attrLinkID) == "" {
			t.Errorf("processing span: no bond or link id in %v", handle.Attributes())
		}
		rec.WaitFor(t, traceWithin, "topic.settle "+TopicIdentityUsers, func(s sdktrace.ReadOnlySpan) bool { return telemetrytest.ChildOf(s, receive) })
	})

	t.Run("each statement of the processing is a storage span under it", func(t *testing.T) {
		for _, name := range []string{
			"referral.store.read_user", "referral.store.put_replica", "referral.store.read_link", "referral.store.read_owner",
			"referral.store.insert_bond", "referral.store.insert_registration", "referral.store.put_mark",
		} {
			s := rec.WaitFor(t, traceWithin, name, func(s sdktrace.ReadOnlySpan) bool { return telemetrytest.ChildOf(s, handle) })
			if s.SpanKind() != trace.SpanKindClient || telemetrytest.Attr(s, "db.system.name") == "" {
				t.Errorf("%s: kind %v, attributes %v", name, s.SpanKind(), s.Attributes())
			}
		}
	})

	t.Run("the processing's rows keep its trace, for the console's search", func(t *testing.T) {
		found, err := h.svc.History(t.Context(), string(user), 50)
		if err != nil {
			t.Fatal(err)
		}
		want := handle.SpanContext().TraceID().String()
		kinds := map[string]int{}
		for _, it := range found.Items {
			if it.TraceID == want {
				kinds[it.Kind]++
			}
		}
		if kinds["identity event consumed"] != 1 || kinds["bond created"] != 1 {
			t.Errorf("items in the processing's trace by kind: %v, want the consumed event and the bond", kinds)
		}
	})

	t.Run("each outgoing event is a new trace linked to the processing, and its record carries it", func(t *testing.T) {
		for _, out := range []struct {
			topic string
			typ   MessageType
		}{{TopicBonds, TypeBondCreated}, {TopicLeadAttachments, TypeLeadAttachRequested}} {
			pub := rec.WaitFor(t, traceWithin, spanOutgoing, func(s sdktrace.ReadOnlySpan) bool {
				return telemetrytest.LinksTo(s, handle) && telemetrytest.Attr(s, attrMessageType) == string(out.typ)
			})
			switch {
			case pub.Parent().IsValid() || pub.SpanContext().TraceID() == handle.SpanContext().TraceID():
				t.Fatalf("%s: the publish span is not the root of a trace of its own", out.typ)
			case pub.SpanKind() != trace.SpanKindProducer:
				t.Fatalf("%s: the publish span's kind is %v", out.typ, pub.SpanKind())
			case telemetrytest.Attr(pub, "messaging.destination.name") != out.topic ||
				telemetrytest.Attr(pub, attrCorrelationID) != ev.CorrelationID ||
				telemetrytest.Attr(pub, attrMessageID) != outgoingMessageID(out.typ, BondID(telemetrytest.Attr(handle, attrBondID))):
				t.Fatalf("%s: publish span attributes %v", out.typ, pub.Attributes())
			}
			var carried string
			for _, r := range h.outgoing(out.topic) {
				if r.Key == string(user) {
					carried = r.Traceparent
				}
			}
			sc, ok := telemetry.Parse(carried)
			if !ok || sc.SpanID() != pub.SpanContext().SpanID() || sc.TraceID() != pub.SpanContext().TraceID() {
				t.Errorf("%s: the record on %s carries traceparent %q, want the publish span's", out.typ, out.topic, carried)
			}
		}
	})

	t.Run("a duplicate's processing is marked skipped-duplicate and publishes nothing", func(t *testing.T) {
		_, againTP := caller(t, "identity publishes it again")
		publishTraced(t, api, againTP, ev.json())
		h.waitIdle()
		dup := handleOf(t, rec, ev.MessageID, outcomeSkippedDuplicate)
		rec.WaitFor(t, traceWithin, "referral.store.read_user", func(s sdktrace.ReadOnlySpan) bool { return telemetrytest.ChildOf(s, dup) })
		for _, s := range rec.Spans() {
			if telemetrytest.ChildOf(s, dup) && s.Name() != "referral.store.read_user" {
				t.Errorf("the duplicate's processing has a child %s; it only reads its mark", s.Name())
			}
			if s.Name() == spanOutgoing && telemetrytest.LinksTo(s, dup) {
				t.Error("the duplicate's processing published an outgoing event")
			}
		}
	})

	t.Run("a guard's no-op is the processing span's outcome", func(t *testing.T) {
		stray := upsert(newUser(), 1).referrer("no-such-link")
		_, strayTP := caller(t, "identity publishes a stray registration")
		publishTraced(t, api, strayTP, stray.json())
		h.waitIdle()
		g1 := handleOf(t, rec, stray.MessageID, string(OutcomeG1))
		if telemetrytest.Attr(g1, attrAppliedRule) != "" {
			t.Errorf("a no-op names an applied rule: %v", g1.Attributes())
		}
	})

	t.Run("no span holds a name, a phone number or a ReferrerUrl", func(t *testing.T) {
		telemetrytest.AssertClean(t, rec.Spans(), "Zinaida", "Quorum", "+79991234567", "9991234567",
			"trace-agent-slug", "Trace-Agent-Slug", "no-such-link")
	})
}

// TestReferralSpansCostNothingWithTracingOff: with no provider installed
// (tracing off, the default), the processing span, a statement's storage
// span and an outgoing event's producer span allocate nothing — their
// attributes are not even built. Not parallel: AllocsPerRun counts the
// whole process's allocations.
func TestReferralSpansCostNothingWithTracingOff(t *testing.T) {
	if telemetry.Enabled() {
		t.Skip("a provider is installed")
	}
	ctx := context.Background()
	spans := newStoreSpans(false, liveLinkByURLQuery, getReplicaQuery)
	res := result{Type: TypeUserUpserted, MessageID: "m-1", CorrelationID: "corr-1", UserID: "u", Outcome: OutcomeR1, BondID: "b", LinkID: "l"}
	for name, f := range map[string]func(){
		spanHandle: func() {
			_, span := handleSpan(ctx)
			endHandle(span, res, nil)
		},
		"referral.store.put_mark": func() {
			_, span := spans.start(ctx, putMarkQuery)
			telemetry.End(span, nil)
		},
		spanOutgoing: func() {
			_, span := outgoingSpan(ctx, TopicBonds, TypeBondCreated, outgoingMessageIDIfTraced(TypeBondCreated, "b"), "corr-1")
			telemetry.End(span, nil)
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.0f times per run with tracing off", name, n)
		}
	}
}
