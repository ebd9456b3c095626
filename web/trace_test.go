package web_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/store/storetest"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
	"switchyard/web"
	"switchyard/web/webtest"
)

// Every request is a server span named by its route template, continuing the
// caller's traceparent; the raw path (which may hold a secret or an id) and
// the query string appear nowhere in it.
func TestServerSpansNameTheRouteTemplate(t *testing.T) {
	rec := telemetrytest.Record(t)
	db := storetest.New(t)
	const secret = "s3cr3t-path-segment"
	hooks := func(r *mux.Router) {
		r.Handle("/hooks/{secret}", httpjson.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			_, span := telemetry.Start(r.Context(), "handler")
			span.End()
			return httpjson.Errorf(http.StatusServiceUnavailable, "down", "down")
		})).Methods(http.MethodPost)
	}
	srv := webtest.NewWith(t, web.Options{DB: db, AdminToken: adminToken, Public: []web.RoutesFunc{hooks}}).Server

	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/hooks/"+secret+"?token="+adminToken, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("traceparent", parent)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	server := rec.WaitFor(t, 10*time.Second, "POST /hooks/{secret}", nil)
	if got := server.SpanContext().TraceID().String(); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("server span's trace %s, want the caller's", got)
	}
	if got := server.Parent().SpanID().String(); got != "b7ad6b7169203331" {
		t.Errorf("server span's parent %s, want the caller's span", got)
	}
	if got := telemetrytest.Attr(server, "http.response.status_code"); got != "503" {
		t.Errorf("status code attribute %q, want 503", got)
	}
	if server.Status().Code.String() != "Error" {
		t.Errorf("a 503's span status is %s, want Error", server.Status().Code)
	}
	handler := rec.Named("handler")
	if len(handler) != 1 || !telemetrytest.ChildOf(handler[0], server) {
		t.Error("the handler's span is not a child of the server span")
	}
	telemetrytest.AssertClean(t, rec.Spans(), secret, adminToken)
}
