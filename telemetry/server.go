package telemetry

import (
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ServerSpan starts the server span of an HTTP request, continuing the
// caller's trace when it sent a traceparent. Its name is set by EndServer,
// once the router has matched a route template: the raw path, which can hold
// a webhook secret or an id, never appears.
func ServerSpan(r *http.Request) (*http.Request, trace.Span) {
	if !Enabled() {
		return r, noSpan
	}
	ctx, span := Start(FromRequest(r), "HTTP "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", r.Method)))
	return r.WithContext(ctx), span
}

// EndServer names span by route (the matched template, e.g.
// "/omni/webhooks/telegram/{connector}"), records status and ends it.
func EndServer(span trace.Span, method, route string, status int) {
	if !span.IsRecording() {
		return
	}
	span.SetName(method + " " + route)
	span.SetAttributes(attribute.String("http.route", route), attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

func typeName(v any) string { return fmt.Sprintf("%T", v) }
