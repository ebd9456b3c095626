package telemetrytest

import (
	"compress/gzip"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Collector is a local OTLP/HTTP trace receiver, for benchmarks that measure
// what exporting traces costs: it takes POST /v1/traces as a collector's
// port 4318 does (protobuf, gzip or not), decodes every request and counts
// the spans, so a run can show that its spans did reach a collector.
type Collector struct {
	// URL is the base URL to give OTEL_EXPORTER_OTLP_ENDPOINT.
	URL      string
	spans    atomic.Int64
	requests atomic.Int64
}

// NewCollector starts a Collector on a loopback port until the test ends.
func NewCollector(tb testing.TB) *Collector {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Collector{URL: "http://" + ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", c.export)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return c
}

func (c *Collector) export(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	c.spans.Add(n)
	c.requests.Add(1)
	resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

// Spans is how many spans the collector has received.
func (c *Collector) Spans() int64 { return c.spans.Load() }

// Requests is how many export requests the collector has answered.
func (c *Collector) Requests() int64 { return c.requests.Load() }
