package telemetry_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
)

func TestStartWithoutProviderAddsNothing(t *testing.T) {
	ctx := context.Background()
	got, span := telemetry.Start(ctx, "nothing")
	if got != ctx {
		t.Error("Start changed the context with no provider installed")
	}
	if span.IsRecording() {
		t.Error("Start returned a recording span with no provider installed")
	}
	if n := testing.AllocsPerRun(100, func() {
		_, s := telemetry.Start(ctx, "nothing")
		telemetry.End(s, nil)
	}); n != 0 {
		t.Errorf("Start and End allocate %v times with no provider installed, want 0", n)
	}
}

func TestTraceparentRoundTrip(t *testing.T) {
	rec := telemetrytest.Record(t)
	ctx, parent := telemetry.Start(context.Background(), "producer")
	tp := telemetry.Traceparent(ctx)
	parent.End()
	if !strings.HasPrefix(tp, "00-"+parent.SpanContext().TraceID().String()+"-"+parent.SpanContext().SpanID().String()) {
		t.Fatalf("Traceparent = %q, want the span's trace and span id", tp)
	}
	// As the W3C propagator writes it.
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if tp != carrier["traceparent"] {
		t.Errorf("Traceparent = %q, the W3C propagator writes %q", tp, carrier["traceparent"])
	}
	unsampled := trace.ContextWithSpanContext(context.Background(), parent.SpanContext().WithTraceFlags(0))
	carrier = propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(unsampled, carrier)
	if got := telemetry.Traceparent(unsampled); got != carrier["traceparent"] || !strings.HasSuffix(got, "-00") {
		t.Errorf("unsampled: Traceparent = %q, the W3C propagator writes %q", got, carrier["traceparent"])
	}

	_, child := telemetry.Start(telemetry.Resume(context.Background(), tp), "consumer")
	child.End()
	_, linked := telemetry.Start(context.Background(), "follower", telemetry.LinkTo(tp))
	linked.End()

	spans := rec.Spans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	if !telemetrytest.ChildOf(spans[1], spans[0]) {
		t.Error("the resumed span is not a child of the producer's")
	}
	if spans[2].SpanContext().TraceID() == spans[0].SpanContext().TraceID() {
		t.Error("the linked span continued the producer's trace, want a trace of its own")
	}
	if !telemetrytest.LinksTo(spans[2], spans[0]) {
		t.Error("the linked span does not link to the producer's")
	}
}

func TestResumeIgnoresMalformedTraceparent(t *testing.T) {
	for _, tp := range []string{"", "garbage", "00-00000000000000000000000000000000-0000000000000000-01", "00-abc-def-01"} {
		ctx := telemetry.Resume(context.Background(), tp)
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("Resume(%q) gave a valid span context", tp)
		}
	}
}

func TestRingKeepsTheNewestSpans(t *testing.T) {
	var console bytes.Buffer
	tr, err := telemetry.Setup(context.Background(), telemetry.Options{
		Getenv:   func(k string) string { return map[string]string{"OTEL_TRACES_EXPORTER": "console"}[k] },
		RingSize: 3, Console: &console,
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 5 {
		ctx, s := telemetry.Start(context.Background(), "span", trace.WithAttributes(telemetry.String("note", "call +7 999 123-45-67")))
		_ = i
		ids = append(ids, telemetry.TraceID(ctx))
		s.End()
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if telemetry.Enabled() {
		t.Error("Shutdown left the provider installed")
	}
	if tr.Ring.Len() != 3 {
		t.Fatalf("ring holds %d spans, want its size 3", tr.Ring.Len())
	}
	if got := tr.Ring.Trace(ids[0]); len(got) != 0 {
		t.Error("the ring still holds the oldest span")
	}
	got := tr.Ring.Trace(ids[4])
	if len(got) != 1 {
		t.Fatalf("the ring holds %d spans of the newest trace, want 1", len(got))
	}
	if v := got[0].Attributes[0].Value; strings.Contains(v, "123-45-67") {
		t.Errorf("attribute holds the phone unmasked: %q", v)
	}
	if !strings.Contains(console.String(), ids[4]) {
		t.Error("the console exporter wrote no span of the newest trace")
	}
}

func TestSetupRefusesUnknownExporter(t *testing.T) {
	for _, env := range []map[string]string{
		{"OTEL_TRACES_EXPORTER": "zipkin"},
		{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
	} {
		if _, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(k string) string { return env[k] }}); err == nil {
			t.Errorf("Setup with %v: no error", env)
		}
	}
	tr, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }})
	if err != nil || telemetry.Enabled() {
		t.Fatalf("Setup with no exporter and no ring: err %v, enabled %v; want nothing installed", err, telemetry.Enabled())
	}
	_ = tr.Shutdown(context.Background())
}

func TestTransportRecordsNoURL(t *testing.T) {
	rec := telemetrytest.Record(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooManyRequests) }))
	defer srv.Close()
	const token = "123456:AAE-secret-token"
	client := &http.Client{Transport: &telemetry.Transport{Name: func(r *http.Request) string { return "telegram sendMessage" }}}
	resp, err := client.Get(srv.URL + "/bot" + token + "/sendMessage?chat_id=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	spans := rec.Named("telegram sendMessage")
	if len(spans) != 1 {
		t.Fatalf("%d client spans, want 1", len(spans))
	}
	if got := telemetrytest.Attr(spans[0], "http.response.status_code"); got != "429" {
		t.Errorf("status code attribute %q, want 429", got)
	}
	telemetrytest.AssertClean(t, spans, token, "sendMessage?")
}
