// Package telemetry carries Switchyard's traces: one OpenTelemetry tracer
// provider for the process, set up from the standard environment variables
// (Setup), spans started through Start, and the W3C trace context that
// travels with the work across queues, topics and the outbox as a
// traceparent string (Traceparent, Resume, LinkTo).
//
// Until Setup installs a provider, Start returns the context's span and adds
// nothing: no allocation, no clock read. Attributes go through String, which
// masks phone numbers the way the logs do (package mask), and no span carries
// a request path, a URL or a body: a Bot API path holds the bot token and a
// webhook path its secret.
package telemetry

import (
	"context"
	"encoding/hex"
	"net/http"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"switchyard/mask"
)

// scope is the instrumentation scope of every span Switchyard starts.
const scope = "switchyard"

// active is the tracer of the installed provider, nil while none is.
var active atomic.Pointer[trace.Tracer]

// propagator reads and writes W3C traceparent (and tracestate).
var propagator = propagation.TraceContext{}

// Install makes provider the one Start uses; nil uninstalls it. Setup calls
// it; tests install a recording provider through telemetrytest.
func Install(provider trace.TracerProvider) {
	if provider == nil {
		active.Store(nil)
		return
	}
	t := provider.Tracer(scope)
	active.Store(&t)
}

// Enabled reports whether spans are being recorded at all, for callers that
// would otherwise build attributes for nothing.
func Enabled() bool { return active.Load() != nil }

// noSpan is the span Start returns with no provider installed: every method
// does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// Start starts a span named name as a child of ctx's span. With no provider
// installed it returns ctx as it is and a span that does nothing.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	t := active.Load()
	if t == nil {
		return ctx, noSpan
	}
	return (*t).Start(ctx, name, opts...)
}

// End ends span, marking it failed when err is not nil. The status carries
// only err's Go type, never its text, which can hold a URL or a value.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, errorType(err))
	}
	span.End()
}

// String is an attribute whose value is masked as package mask masks a
// named log field: a key that says phone masks a phone, any other key masks
// phone-like runs in free text.
func String(key, value string) attribute.KeyValue {
	return attribute.String(key, mask.Field(key, value))
}

// Traceparent is ctx's span context as a W3C traceparent header value
// ("00-<trace id>-<span id>-<flags>"), or "" when ctx carries no valid span
// context. It is what travels in an envelope, a topic record's headers or an
// outbox row.
func Traceparent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	// Written out as the W3C propagator writes it, without its carrier map:
	// a send or a publish asks for it once a message, sampled or not.
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte
	copy(b[:3], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	return string(b[:])
}

// TraceID is the trace id of ctx's span, or "" when it has none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// Resume returns ctx carrying traceparent's span context as its remote
// parent, so that a span started from it continues that trace. A malformed or
// empty traceparent leaves ctx as it is.
func Resume(ctx context.Context, traceparent string) context.Context {
	sc, ok := Parse(traceparent)
	if !ok {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Parse reads a traceparent; ok is false when it is empty or malformed.
func Parse(traceparent string) (sc trace.SpanContext, ok bool) {
	if traceparent == "" {
		return trace.SpanContext{}, false
	}
	ctx := propagator.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	sc = trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// LinkTo is a start option linking the new span to traceparent's span, for
// work that starts a trace of its own but follows from another one (an
// outgoing event after the event that caused it; the bot's handling of an
// outbox event after the backend action that wrote it). A malformed or empty
// traceparent adds no link.
func LinkTo(traceparent string) trace.SpanStartOption {
	sc, ok := Parse(traceparent)
	if !ok {
		return trace.WithLinks()
	}
	return trace.WithLinks(trace.Link{SpanContext: sc})
}

// FromRequest returns r's context carrying the caller's trace context when
// it sent a valid traceparent header.
func FromRequest(r *http.Request) context.Context {
	if r.Header.Get("traceparent") == "" {
		return r.Context()
	}
	return propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
}
