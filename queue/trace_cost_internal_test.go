package queue

import (
	"context"
	"errors"
	"testing"

	"switchyard/telemetry"
)

// TestSpansCostNothingWithTracingOff: with no tracer installed, a
// delivery's span (single and batch handlers) allocates nothing.
func TestSpansCostNothingWithTracingOff(t *testing.T) {
	if telemetry.Enabled() {
		t.Skip("a provider is installed")
	}
	q := &Queue{name: "receiver.flow", span: "queue.handle receiver.flow", retry: RetryPolicy{}.withDefaults()}
	failed := errors.New("failed")
	errs := []error{nil, failed}
	w := &Worker{q: q, hctx: context.Background(), opts: WorkerOpts{
		Handler:      func(context.Context, Message) error { return failed },
		BatchHandler: func(context.Context, []Message) []error { return errs },
	}}
	m := Message{ID: "m_1", Attempt: 2, Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	msgs := []Message{m, m}
	for name, f := range map[string]func(){
		"queue.handle": func() { _ = w.call(m) },
		"queue.handle, batch": func() {
			_ = w.callBatch(msgs)
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %.0f times per run with tracing off", name, n)
		}
	}
}
