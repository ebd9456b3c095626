package queue_test

// The trace context a queue message carries, and the consumer span of each
// delivery. The tests record spans process-wide (telemetrytest.Record), so
// none of them runs in parallel; each picks its spans by trace id.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
	"switchyard/testwait"
)

// messageDelivery is what a handler saw of one delivery.
type messageDelivery struct {
	attempt     int
	traceparent string // the Message's
	span        trace.SpanContext
}

// traceparentOf reads the traceparent a message's row holds.
func traceparentOf(t testing.TB, db *store.DB, table string, id queue.ID) string {
	t.Helper()
	var tp string
	if err := db.Read.QueryRow(`select traceparent from `+table+` where id = ?`, string(id)).Scan(&tp); err != nil {
		t.Fatalf("traceparent of %s in %s: %v", id, table, err)
	}
	return tp
}

func TestTraceparentFollowsAMessage(t *testing.T) {
	rec := telemetrytest.Record(t)
	db := storetest.New(t)
	ctx := context.Background()
	admin := queue.NewAdmin(queue.AdminOpts{DB: db})

	t.Run("a send takes the sending context's span, unless the message names one", func(t *testing.T) {
		q := queue.New(queue.NewOpts{DB: db, Name: "trace.send"})
		sctx, span := telemetry.Start(ctx, "test.send")
		fromCtx, err := q.Send(sctx, queue.Message{Body: []byte("a")})
		if err != nil {
			t.Fatal(err)
		}
		given := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		named, err := q.Send(sctx, queue.Message{Body: []byte("b"), Traceparent: given})
		if err != nil {
			t.Fatal(err)
		}
		span.End()
		untraced, err := q.Send(ctx, queue.Message{Body: []byte("c")})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := traceparentOf(t, db, "goqite", fromCtx.ID), telemetry.Traceparent(sctx); got != want || want == "" {
			t.Errorf("a send under a span stored traceparent %q, want the span's %q", got, want)
		}
		if got := traceparentOf(t, db, "goqite", named.ID); got != given {
			t.Errorf("a send naming its traceparent stored %q, want %q", got, given)
		}
		if got := traceparentOf(t, db, "goqite", untraced.ID); got != "" {
			t.Errorf("a send with no span stored traceparent %q, want none", got)
		}
	})

	t.Run("the trace survives retry, dead letter and redrive, each delivery a span of its own", func(t *testing.T) {
		q := queue.New(queue.NewOpts{DB: db, Name: "trace.flow",
			Retry: queue.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
		var (
			mu      sync.Mutex
			seen    []messageDelivery
			failing = true
		)
		start(t, q, queue.WorkerOpts{PollInterval: 20 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, messageDelivery{attempt: m.Attempt, traceparent: m.Traceparent, span: trace.SpanContextFromContext(ctx)})
			if failing {
				return errors.New("handler failed on purpose")
			}
			return nil
		}})
		deliveries := func() []messageDelivery {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(seen)
		}

		sctx, sendSpan := telemetry.Start(ctx, "test.send")
		res, err := q.Send(sctx, queue.Message{Body: []byte("x")})
		sendSpan.End()
		if err != nil {
			t.Fatal(err)
		}
		sent := telemetry.Traceparent(sctx)
		var dead []queue.DeadLetter
		testwait.Until(t, 10*time.Second, "the message dead after two attempts", func() bool {
			dead, err = admin.ListDead(ctx, queue.DeadFilter{Queue: q.Name()})
			return err == nil && len(dead) == 1
		}, func() string { return fmt.Sprintf("deliveries %v, dead letters %v (%v)", deliveries(), dead, err) })
		if dead[0].Traceparent != sent {
			t.Fatalf("the dead letter keeps traceparent %q, want the sender's %q", dead[0].Traceparent, sent)
		}
		mu.Lock()
		failing = false
		mu.Unlock()
		if n, err := admin.Redrive(ctx, queue.DeadFilter{Queue: q.Name(), ID: string(res.ID)}); err != nil || n != 1 {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		testwait.Until(t, 10*time.Second, "the redriven message handled", func() bool { return len(deliveries()) == 3 },
			func() string { return fmt.Sprintf("deliveries %v", deliveries()) })

		sendRec := rec.WaitFor(t, 10*time.Second, "test.send", func(s sdktrace.ReadOnlySpan) bool {
			return s.SpanContext().SpanID() == trace.SpanContextFromContext(sctx).SpanID()
		})
		want := []struct {
			attempt int
			outcome string
			failed  bool
		}{{1, "retry", true}, {2, "dead", true}, {1, "done", false}}
		var handles []sdktrace.ReadOnlySpan
		testwait.Until(t, 10*time.Second, "three delivery spans", func() bool {
			handles = handles[:0]
			for _, s := range rec.Trace(sendRec.SpanContext().TraceID().String()) {
				if s.Name() == "queue.handle trace.flow" {
					handles = append(handles, s)
				}
			}
			return len(handles) == len(want)
		}, func() string { return fmt.Sprintf("%d delivery spans in the sender's trace", len(handles)) })
		got := deliveries()
		for i, w := range want {
			h := handles[i]
			switch {
			case !telemetrytest.ChildOf(h, sendRec):
				t.Errorf("delivery %d: its span's parent is %s, want the sender's span", i+1, h.Parent().SpanID())
			case h.SpanKind() != trace.SpanKindConsumer:
				t.Errorf("delivery %d: span kind %v, want consumer", i+1, h.SpanKind())
			case telemetrytest.Attr(h, "queue.attempt") != fmt.Sprint(w.attempt),
				telemetrytest.Attr(h, "queue.outcome") != w.outcome,
				telemetrytest.Attr(h, "messaging.destination.name") != q.Name(),
				telemetrytest.Attr(h, "messaging.message.id") != string(res.ID):
				t.Errorf("delivery %d: attributes %v, want attempt %d and outcome %s", i+1, h.Attributes(), w.attempt, w.outcome)
			case (h.Status().Code == codes.Error) != w.failed:
				t.Errorf("delivery %d: status %v, want failed %v", i+1, h.Status(), w.failed)
			}
			d := got[i]
			if d.attempt != w.attempt || d.span.SpanID() != h.SpanContext().SpanID() {
				t.Errorf("delivery %d: the handler saw attempt %d in span %s, want attempt %d in %s",
					i+1, d.attempt, d.span.SpanID(), w.attempt, h.SpanContext().SpanID())
			}
			if sc, ok := telemetry.Parse(d.traceparent); !ok || sc.SpanID() != h.SpanContext().SpanID() {
				t.Errorf("delivery %d: the handler's message carries %q, want its delivery span's context", i+1, d.traceparent)
			}
		}
	})

	t.Run("a batch handler's messages each have their own span in their own trace", func(t *testing.T) {
		q := queue.New(queue.NewOpts{DB: db, Name: "trace.batch"})
		const n = 3
		sends := make([]context.Context, n)
		for i := range n {
			sctx, span := telemetry.Start(ctx, "test.send")
			if _, err := q.Send(sctx, queue.Message{Body: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
			span.End()
			sends[i] = sctx
		}
		var (
			mu   sync.Mutex
			seen = map[string]string{} // body → the message's traceparent
		)
		start(t, q, queue.WorkerOpts{Concurrency: n, PollInterval: 20 * time.Millisecond,
			BatchHandler: func(ctx context.Context, msgs []queue.Message) []error {
				mu.Lock()
				defer mu.Unlock()
				for _, m := range msgs {
					seen[string(m.Body)] = m.Traceparent
				}
				return nil
			}})
		testwait.Until(t, 10*time.Second, "every message handled", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == n
		})
		for i, sctx := range sends {
			sendSC := trace.SpanContextFromContext(sctx)
			h := rec.WaitFor(t, 10*time.Second, "queue.handle trace.batch", func(s sdktrace.ReadOnlySpan) bool {
				return s.Parent().SpanID() == sendSC.SpanID() && s.SpanContext().TraceID() == sendSC.TraceID()
			})
			if telemetrytest.Attr(h, "queue.outcome") != "done" {
				t.Errorf("message %d: attributes %v", i, h.Attributes())
			}
			mu.Lock()
			tp := seen[fmt.Sprint(i)]
			mu.Unlock()
			if sc, ok := telemetry.Parse(tp); !ok || sc.SpanID() != h.SpanContext().SpanID() {
				t.Errorf("message %d: the batch handler got traceparent %q, want its delivery span's", i, tp)
			}
		}
	})

	t.Run("no span holds a handler's error text", func(t *testing.T) {
		telemetrytest.AssertClean(t, rec.Spans(), "handler failed on purpose")
	})
}
