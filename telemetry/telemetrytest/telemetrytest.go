// Package telemetrytest records the spans a test's code starts, for tests
// that assert a flow's span tree, its links and the hygiene of its
// attributes.
package telemetrytest

import (
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"switchyard/mask"
	"switchyard/telemetry"
	"switchyard/testwait"
)

// Recorder holds the finished spans of the provider Record installed.
type Recorder struct {
	rec *tracetest.SpanRecorder
}

// Record installs a provider that samples every span and keeps it in memory
// until the test ends, then uninstalls it. The provider is process-wide, so a
// test that calls Record must not call t.Parallel (Go runs top-level parallel
// tests only after the sequential ones), and it should pick its own spans by
// trace id: a goroutine another test left running may add spans too.
func Record(t testing.TB) *Recorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(rec))
	telemetry.Install(tp)
	t.Cleanup(func() {
		telemetry.Install(nil)
		_ = tp.Shutdown(t.Context())
	})
	return &Recorder{rec: rec}
}

// Spans are the spans ended so far, in end order.
func (r *Recorder) Spans() []sdktrace.ReadOnlySpan { return r.rec.Ended() }

// Named are the ended spans called name.
func (r *Recorder) Named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// Trace are the ended spans of traceID, in start order.
func (r *Recorder) Trace(traceID string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if s.SpanContext().TraceID().String() == traceID {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}

// WaitFor waits up to within for a span called name that match accepts (nil:
// any), and returns it.
func (r *Recorder) WaitFor(t testing.TB, within time.Duration, name string, match func(sdktrace.ReadOnlySpan) bool) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	testwait.Until(t, within, "a span "+name, func() bool {
		for _, s := range r.Named(name) {
			if match == nil || match(s) {
				found = s
				return true
			}
		}
		return false
	}, func() string { return "spans so far: " + strings.Join(names(r.rec.Ended()), ", ") })
	return found
}

// Attr is the value of s's attribute key as a string, "" when s has none.
func Attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// ChildOf reports whether child's parent is parent.
func ChildOf(child, parent sdktrace.ReadOnlySpan) bool {
	return child.Parent().SpanID() == parent.SpanContext().SpanID() &&
		child.SpanContext().TraceID() == parent.SpanContext().TraceID()
}

// LinksTo reports whether s links to target's span.
func LinksTo(s, target sdktrace.ReadOnlySpan) bool {
	for _, l := range s.Links() {
		if l.SpanContext.SpanID() == target.SpanContext().SpanID() && l.SpanContext.TraceID() == target.SpanContext().TraceID() {
			return true
		}
	}
	return false
}

// AssertClean fails t when a span's name or any attribute value holds one of
// secrets, or an attribute holds a phone number package mask would mask.
func AssertClean(t testing.TB, spans []sdktrace.ReadOnlySpan, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		for _, secret := range secrets {
			if secret != "" && strings.Contains(s.Name(), secret) {
				t.Errorf("span %q: its name holds a secret", s.Name())
			}
		}
		for _, a := range s.Attributes() {
			k, v := string(a.Key), a.Value.String()
			for _, secret := range secrets {
				if secret != "" && strings.Contains(v, secret) {
					t.Errorf("span %q: attribute %s holds a secret", s.Name(), k)
				}
			}
			if m := mask.Field(k, v); m != v {
				t.Errorf("span %q: attribute %s = %q holds an unmasked phone (masked: %q)", s.Name(), k, v, m)
			}
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name()
	}
	return out
}
