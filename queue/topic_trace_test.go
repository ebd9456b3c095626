package queue_test

// The traces of topic records: a record carries its publisher's trace
// context (its traceparent) whichever way it was published, through its
// retries, its dead letter and a redrive, and each delivery to a group is a
// receive span of a trace of its own, linked to the publisher's span. The
// tests record spans process-wide (telemetrytest.Record), so none of them
// runs in parallel; each picks its spans by their links and trace ids.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/mux"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
	"switchyard/testwait"
)

const (
	traceTopic = "pin.traced.v1"
	traceGroup = "traced-group"
	// tracePhone is in a record's key and value: no span may show it.
	tracePhone = "+79990001122"
	// traceWithin bounds every wait: generous, for a loaded 2-core machine under -race.
	traceWithin = 30 * time.Second
)

// delivery is what the handler got: the record and its context's span.
type delivery struct {
	rec  queue.Record
	span trace.SpanContext
}

// traceBundle is a topic, a group handler that notes what it gets, and the
// admin API served bare and under server spans (as web/ serves it).
type traceBundle struct {
	t      *testing.T
	db     *store.DB
	clock  *store.ManualClock
	topic  *queue.Topic
	admin  *queue.Admin
	bare   string // the publish URL of the routes mounted bare
	served string // the publish URL of the routes under server spans
	healed atomic.Bool

	mu  sync.Mutex
	got map[string][]delivery // by the record's "v"
}

func newTraceBundle(t *testing.T) *traceBundle {
	t.Helper()
	db, clock := storetest.NewWithClock(t)
	b := &traceBundle{t: t, db: db, clock: clock, topic: newTopic(t, db, traceTopic, 2),
		admin: queue.NewAdmin(queue.AdminOpts{DB: db}), got: map[string][]delivery{}}
	r := mux.NewRouter()
	b.admin.AdminRoutes(r.PathPrefix("/admin/api").Subrouter())
	bare := httptest.NewServer(r)
	t.Cleanup(bare.Close)
	served := httptest.NewServer(withServerSpans(r))
	t.Cleanup(served.Close)
	b.bare = bare.URL + "/admin/api/topics/" + traceTopic + "/messages"
	b.served = served.URL + "/admin/api/topics/" + traceTopic + "/messages"
	return b
}

// withServerSpans gives each request the server span web's middleware
// gives it (telemetry.ServerSpan, continuing a caller's traceparent).
func withServerSpans(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, span := telemetry.ServerSpan(r)
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		telemetry.EndServer(span, r.Method, "/admin/api/topics/{topic}/messages", sw.status)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// subscribe runs the group's handler: "fail" waits a minute on its first
// attempt, then fails for good until healed; every other record succeeds.
func (b *traceBundle) subscribe() *queue.Subscription {
	b.t.Helper()
	s, err := b.topic.Subscribe(context.Background(), queue.SubscribeOpts{
		Group: traceGroup, LeaseTTL: time.Hour, PollInterval: 50 * time.Millisecond,
		Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			var v struct{ V string }
			_ = json.Unmarshal(r.Value, &v)
			b.mu.Lock()
			b.got[v.V] = append(b.got[v.V], delivery{rec: r, span: trace.SpanContextFromContext(ctx)})
			b.mu.Unlock()
			switch {
			case v.V != "fail" || b.healed.Load():
				return nil
			case r.Attempt == 1:
				return queue.RetryAfter(time.Minute, errors.New("not yet"))
			default:
				return queue.Permanent(errors.New("broken"))
			}
		},
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

// value is a record's value: a JSON object with v, keyed by key.
func value(key, v string) []byte {
	return fmt.Appendf(nil, `{"aggregateId":%q,"v":%q,"phone":%q}`, key, v, tracePhone)
}

// delivery waits for the first delivery of v from the (n+1)th on that match
// accepts (nil: any) and returns it. (A PostgreSQL transaction run again
// after a serialization failure delivers a record twice: tests pick
// deliveries by what they are, not by count alone.)
func (b *traceBundle) delivery(v string, n int, match func(delivery) bool) delivery {
	b.t.Helper()
	var found delivery
	testwait.Until(b.t, traceWithin, fmt.Sprintf("a delivery of %s after the first %d", v, n), func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, d := range b.got[v][min(n, len(b.got[v])):] {
			if match == nil || match(d) {
				found = d
				return true
			}
		}
		return false
	})
	return found
}

// delivered is how many deliveries of v the handler has had.
func (b *traceBundle) delivered(v string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.got[v])
}

// post publishes body to url with a caller's traceparent header.
func (b *traceBundle) post(url, contentType, traceparent, body string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("traceparent", traceparent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		b.t.Fatalf("POST %s: %d, want 202", url, resp.StatusCode)
	}
}

// producer starts a span standing for a publisher, and returns its context
// and traceparent; the span ends with the test.
func producer(t *testing.T, name string) (context.Context, string) {
	ctx, span := telemetry.Start(t.Context(), name)
	t.Cleanup(func() { span.End() })
	tp := telemetry.Traceparent(ctx)
	if tp == "" {
		t.Fatal("no traceparent: is a provider installed?")
	}
	return ctx, tp
}

// receiveOf is the receive span of a delivery: the span its handler's
// context carried.
func receiveOf(t *testing.T, rec *telemetrytest.Recorder, d delivery) sdktrace.ReadOnlySpan {
	t.Helper()
	s := rec.WaitFor(t, traceWithin, "topic.receive "+traceTopic, func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanContext().SpanID() == d.span.SpanID() && s.SpanContext().TraceID() == d.span.TraceID()
	})
	return s
}

// linksToTraceparent reports whether s links to the span tp names.
func linksToTraceparent(s sdktrace.ReadOnlySpan, tp string) bool {
	sc, ok := telemetry.Parse(tp)
	for _, l := range s.Links() {
		if ok && l.SpanContext.SpanID() == sc.SpanID() && l.SpanContext.TraceID() == sc.TraceID() {
			return true
		}
	}
	return false
}

func TestTopicRecordsCarryTheirTraceparent(t *testing.T) {
	rec := telemetrytest.Record(t)
	b := newTraceBundle(t)
	first := b.subscribe()

	// Every way of publishing, each in a trace of its own.
	single, singleTP := producer(t, "producer single")
	if _, err := b.topic.Publish(single, "k1", value("k1", "single")); err != nil {
		t.Fatal(err)
	}
	batch, batchTP := producer(t, "producer batch")
	_, relayedTP := producer(t, "producer relayed")
	if _, err := b.topic.PublishBatch(batch, []queue.KeyValue{
		{Key: "k2", Value: value("k2", "batch own"), Traceparent: relayedTP},
		{Key: "k3", Value: value("k3", "batch ctx")},
	}); err != nil {
		t.Fatal(err)
	}
	inTx, txTP := producer(t, "producer tx")
	if err := b.db.Tx(inTx, func(tx *sql.Tx) error { return b.topic.PublishTx(inTx, tx, "k4", value("k4", "tx")) }); err != nil {
		t.Fatal(err)
	}
	_, bareTP := producer(t, "caller bare")
	b.post(b.bare, "application/json", bareTP, string(value(tracePhone, "http bare")))
	_, bareBatchTP := producer(t, "caller bare batch")
	b.post(b.bare, queue.NDJSONType, bareBatchTP, string(value("k5", "ndjson bare 1"))+"\n"+string(value("k6", "ndjson bare 2"))+"\n")
	_, servedTP := producer(t, "caller served")
	b.post(b.served, "application/json", servedTP, string(value("k7", "http served")))
	_, servedBatchTP := producer(t, "caller served batch")
	b.post(b.served, queue.NDJSONType, servedBatchTP, string(value("k8", "ndjson served 1"))+"\n"+string(value("k9", "ndjson served 2"))+"\n")
	failing, failTP := producer(t, "producer failing")
	if _, err := b.topic.Publish(failing, "kf", value("kf", "fail")); err != nil {
		t.Fatal(err)
	}

	t.Run("a consumer group receives each record's traceparent as it was published", func(t *testing.T) {
		for v, want := range map[string]string{
			"single": singleTP, "batch own": relayedTP, "batch ctx": batchTP, "tx": txTP,
			"http bare": bareTP, "ndjson bare 1": bareBatchTP, "ndjson bare 2": bareBatchTP,
		} {
			if got := b.delivery(v, 0, nil).rec.Traceparent; got != want {
				t.Errorf("%s: the group got traceparent %q, want the publisher's %q", v, got, want)
			}
		}
	})

	t.Run("a record published over HTTP under a server span carries that span, a child of the caller's", func(t *testing.T) {
		for v, callerTP := range map[string]string{"http served": servedTP, "ndjson served 1": servedBatchTP, "ndjson served 2": servedBatchTP} {
			sc, ok := telemetry.Parse(b.delivery(v, 0, nil).rec.Traceparent)
			caller, _ := telemetry.Parse(callerTP)
			if !ok {
				t.Fatalf("%s: the record carries no traceparent", v)
			}
			server := rec.WaitFor(t, traceWithin, "POST /admin/api/topics/{topic}/messages", func(s sdktrace.ReadOnlySpan) bool {
				return s.SpanContext().SpanID() == sc.SpanID()
			})
			if server.SpanKind() != trace.SpanKindServer || server.Parent().SpanID() != caller.SpanID() || sc.TraceID() != caller.TraceID() {
				t.Errorf("%s: the record's span is %q (%v), parent %s; want the server span, a child of the caller's %s",
					v, server.Name(), server.SpanKind(), server.Parent().SpanID(), caller.SpanID())
			}
		}
	})

	t.Run("reads of the log return each record's traceparent", func(t *testing.T) {
		recs, err := b.admin.Read(t.Context(), traceTopic, queue.ReadFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		byV := map[string]string{}
		for _, r := range recs {
			var v struct{ V string }
			_ = json.Unmarshal(r.Value, &v)
			byV[v.V] = r.Traceparent
		}
		if byV["single"] != singleTP || byV["batch own"] != relayedTP || byV["fail"] != failTP {
			t.Errorf("the log read back traceparents %v", byV)
		}
		got := call(t, http.MethodGet, b.bare+"?limit=100", "")
		n := 0
		for _, m := range got.list("messages") {
			if m["traceparent"] == singleTP {
				n++
			}
		}
		if n != 1 {
			t.Errorf("GET …/messages shows %d records with the single publish's traceparent, want 1: %s", n, got.raw)
		}
	})

	t.Run("each delivery is a receive span of a new trace linked to the publisher's span", func(t *testing.T) {
		d := b.delivery("single", 0, nil)
		receive := receiveOf(t, rec, d)
		singleSC, _ := telemetry.Parse(singleTP)
		switch {
		case receive.Parent().IsValid():
			t.Fatalf("the receive span has a parent %s; it must be its trace's root", receive.Parent().SpanID())
		case receive.SpanContext().TraceID() == singleSC.TraceID():
			t.Fatal("the receive span is in the publisher's trace; it must start its own")
		case !linksToTraceparent(receive, singleTP):
			t.Fatalf("the receive span does not link to the publisher's span; links %v", receive.Links())
		case receive.SpanKind() != trace.SpanKindConsumer:
			t.Fatalf("the receive span's kind is %v", receive.SpanKind())
		}
		for k, want := range map[string]string{
			"messaging.destination.name": traceTopic, "messaging.consumer.group.name": traceGroup,
			"messaging.destination.partition.id": fmt.Sprint(d.rec.Partition), "queue.offset": fmt.Sprint(d.rec.Offset),
			"queue.attempt": "1", "queue.outcome": "done",
		} {
			if got := telemetrytest.Attr(receive, k); got != want {
				t.Errorf("receive span: %s = %q, want %q", k, got, want)
			}
		}
		settle := rec.WaitFor(t, traceWithin, "topic.settle "+traceTopic, func(s sdktrace.ReadOnlySpan) bool { return telemetrytest.ChildOf(s, receive) })
		if settle.SpanKind() != trace.SpanKindClient || telemetrytest.Attr(settle, "db.system.name") == "" {
			t.Errorf("settle span: kind %v, attributes %v", settle.SpanKind(), settle.Attributes())
		}
		var chunk sdktrace.ReadOnlySpan
		for _, l := range receive.Links() {
			for _, s := range rec.Named("topic.chunk " + traceTopic) {
				if s.SpanContext().SpanID() == l.SpanContext.SpanID() {
					chunk = s
				}
			}
		}
		if chunk == nil {
			t.Fatalf("the receive span links to no chunk span; links %v", receive.Links())
		}
		if chunk.Parent().IsValid() || telemetrytest.Attr(chunk, "messaging.consumer.group.name") != traceGroup {
			t.Errorf("chunk span: parent %v, attributes %v", chunk.Parent().SpanID(), chunk.Attributes())
		}
		rec.WaitFor(t, traceWithin, "store.tx", func(s sdktrace.ReadOnlySpan) bool { return telemetrytest.ChildOf(s, chunk) })
	})

	t.Run("a failing record keeps its traceparent through its retry row, dead letter and redrive", func(t *testing.T) {
		testwait.Until(t, traceWithin, "the failing record waiting in its retry row", func() bool {
			return count(t, b.db, `select count(*) from queue_group_retries where attempts = 1`) == 1
		})
		var rowTP string
		if err := b.db.Read.QueryRow(`select traceparent from queue_group_retries`).Scan(&rowTP); err != nil || rowTP != failTP {
			t.Fatalf("the retry row's traceparent is %q (%v), want the publisher's %q", rowTP, err, failTP)
		}
		// A retry row written before traceparents were kept has none: the
		// next owner takes the log's.
		if err := first.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		mustExec(t, b.db, `update queue_group_retries set traceparent = ''`)
		b.subscribe()
		b.clock.Advance(time.Minute)
		second := b.delivery("fail", 0, func(d delivery) bool { return d.rec.Attempt == 2 })
		if second.rec.Traceparent != failTP {
			t.Fatalf("the second attempt's traceparent is %q, want the publisher's %q (from the log)", second.rec.Traceparent, failTP)
		}
		var dead []queue.DeadLetter
		testwait.Until(t, traceWithin, "the failing record dead", func() bool {
			var err error
			dead, err = b.admin.ListDead(t.Context(), queue.DeadFilter{Queue: traceTopic, Group: traceGroup})
			return err == nil && len(dead) == 1
		})
		if dead[0].Traceparent != failTP {
			t.Fatalf("the dead letter's traceparent is %q, want the publisher's %q", dead[0].Traceparent, failTP)
		}
		failed := receiveOf(t, rec, second)
		if telemetrytest.Attr(failed, "queue.outcome") != "dead" || failed.Status().Code.String() != "Error" || !linksToTraceparent(failed, failTP) {
			t.Errorf("the last attempt's receive span: status %v, attributes %v, links %v", failed.Status(), failed.Attributes(), failed.Links())
		}

		b.healed.Store(true)
		before := b.delivered("fail")
		if n, err := b.admin.Redrive(t.Context(), queue.DeadFilter{Queue: traceTopic, Group: traceGroup}); err != nil || n != 1 {
			t.Fatalf("Redrive = %d, %v", n, err)
		}
		redriven := b.delivery("fail", before, nil)
		if redriven.rec.Traceparent != failTP {
			t.Fatalf("the redriven record's traceparent is %q, want the publisher's %q", redriven.rec.Traceparent, failTP)
		}
		done := receiveOf(t, rec, redriven)
		if telemetrytest.Attr(done, "queue.outcome") != "done" || !linksToTraceparent(done, failTP) {
			t.Errorf("the redriven record's receive span: attributes %v, links %v", done.Attributes(), done.Links())
		}
	})

	t.Run("no span holds a record's key or value", func(t *testing.T) {
		telemetrytest.AssertClean(t, rec.Spans(), tracePhone, `"v":`)
	})
}

// A Process-mode subscription (async.go) runs each record in a receive span
// of its own, linked to the publisher's span, and hands Process its context.
func TestProcessRunsInAReceiveSpan(t *testing.T) {
	rec := telemetrytest.Record(t)
	db := storetest.New(t)
	topic := newTopic(t, db, traceTopic, 2)
	ctx, tp := producer(t, "producer of a processed record")
	if _, err := topic.Publish(ctx, "k1", value("k1", "processed")); err != nil {
		t.Fatal(err)
	}
	got := make(chan delivery, 1)
	s, err := topic.Subscribe(context.Background(), queue.SubscribeOpts{Group: traceGroup, PollInterval: 50 * time.Millisecond,
		Process: func(ctx context.Context, r queue.Record) error {
			select {
			case got <- delivery{rec: r, span: trace.SpanContextFromContext(ctx)}:
			default:
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	var d delivery
	select {
	case d = <-got:
	case <-time.After(30 * time.Second * time.Duration(testwait.Slack)):
		t.Fatal("the record was not processed")
	}
	if d.rec.Traceparent != tp {
		t.Errorf("the record's traceparent is %q, want the publisher's %q", d.rec.Traceparent, tp)
	}
	if !d.span.IsValid() {
		t.Fatal("Process's context carries no span")
	}
	receive := rec.WaitFor(t, traceWithin, "topic.receive "+traceTopic, func(s sdktrace.ReadOnlySpan) bool {
		return s.SpanContext().SpanID() == d.span.SpanID()
	})
	publisher, _ := telemetry.Parse(tp)
	if receive.Parent().IsValid() || len(receive.Links()) != 1 || receive.Links()[0].SpanContext.SpanID() != publisher.SpanID() {
		t.Errorf("the receive span: parent %v, links %v; want a root linked to the publisher's span", receive.Parent(), receive.Links())
	}
}
