package telemetry

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Transport is an http.RoundTripper that wraps each request in a client span
// named by Name. The span records the method, the server's host and port,
// and the response's status code, never the URL: a Bot API URL holds the bot
// token in its path. Nothing is injected into the outgoing request, whose
// receiver (the Telegram Bot API) is not ours.
type Transport struct {
	// Base sends the request (http.DefaultTransport when nil).
	Base http.RoundTripper
	// Name names the span from the request, e.g. "telegram sendMessage".
	Name func(*http.Request) string
	// Attributes, when set, adds attributes of its own to the span.
	Attributes func(*http.Request) []attribute.KeyValue
}

// RoundTrip sends req inside a client span.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if !Enabled() {
		return base.RoundTrip(req)
	}
	name := "HTTP " + req.Method
	if t.Name != nil {
		name = t.Name(req)
	}
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", req.Method),
		attribute.String("server.address", req.URL.Hostname()),
	}
	if port := req.URL.Port(); port != "" {
		attrs = append(attrs, attribute.String("server.port", port))
	}
	if t.Attributes != nil {
		attrs = append(attrs, t.Attributes(req)...)
	}
	ctx, span := Start(req.Context(), name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	resp, err := base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		span.SetStatus(codes.Error, "request failed")
		span.SetAttributes(attribute.String("error.type", errorType(err)))
		return nil, err
	}
	span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetStatus(codes.Error, http.StatusText(resp.StatusCode))
	}
	return resp, nil
}

// errorType names err by its Go type, which says what failed (a timeout, a
// refused connection) without the URL that err's text carries.
func errorType(err error) string {
	s := strings.TrimPrefix(strings.TrimPrefix(typeName(err), "*"), "&")
	if s == "" {
		return "error"
	}
	return s
}
