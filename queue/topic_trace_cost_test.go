package queue

import (
	"context"
	"database/sql"
	"testing"

	"switchyard/telemetry"
)

// TestTopicSpansCostNothingWithTracingOff: with no provider installed
// (tracing off, the default), a chunk's span and a record's receive and
// settle spans allocate nothing — their names and attributes are not even
// built — and a record published with no span in its context carries no
// traceparent. Not parallel: AllocsPerRun counts the whole process's
// allocations.
func TestTopicSpansCostNothingWithTracingOff(t *testing.T) {
	if telemetry.Enabled() {
		t.Skip("a provider is installed")
	}
	s := &Subscription{
		hctx:  context.Background(),
		spans: newSubscriptionSpans("pin.identity.users.v1", "referral-identity-users"),
		opts:  SubscribeOpts{Handler: func(context.Context, *sql.Tx, Record) error { return nil }},
	}
	ctx := context.Background()
	rec := Record{Topic: "pin.identity.users.v1", Partition: 3, Offset: 41, Key: "k", Attempt: 1,
		Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	out := &recOutcome{kind: outcomeDone}
	for name, f := range map[string]func(){
		"topic.chunk": func() {
			_, span := s.chunkSpan(ctx, 3, 64)
			telemetry.End(span, nil)
		},
		"topic.receive and topic.settle": func() {
			rctx, span := s.receiveSpan(ctx, rec)
			settle := s.settleSpan(rctx)
			telemetry.End(settle, nil)
			endReceive(span, out, nil, nil)
		},
		"a publish's traceparent": func() {
			if telemetry.Traceparent(ctx) != "" {
				t.Fatal("a traceparent without a span")
			}
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.0f times per run with tracing off", name, n)
		}
	}
}
