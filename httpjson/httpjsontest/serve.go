package httpjsontest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
)

// Router is a router with httpjson's answers for unmatched routes and
// methods, so that every answer a test sees is the app's own, with mounts'
// routes on it.
func Router(mounts ...func(r *mux.Router)) *mux.Router {
	r := mux.NewRouter()
	r.NotFoundHandler = httpjson.NotFoundHandler
	r.MethodNotAllowedHandler = httpjson.MethodNotAllowedHandler
	for _, m := range mounts {
		m(r)
	}
	return r
}

// Do serves one request on h in-process. path and rawQuery go into the URL
// as they are, unparsed, so a fuzz target reaches the handler with exactly
// its input. A panic is not recovered: it fails the target with its input.
func Do(h http.Handler, method, path, rawQuery string, header http.Header, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://switchyard.test/", bytes.NewReader(body))
	req.URL.Path, req.URL.RawQuery = path, rawQuery
	req.RequestURI = ""
	for k, vs := range header {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// CheckRefusal holds an answer to bad input to the promise "a clear 4xx":
// it fails the test on a 5xx or a 1xx, and on a 4xx whose body is not the
// JSON error shape {"error":{"code","message"}}. It reports whether the
// input was refused (a 4xx); a success or a redirect is for the caller to
// judge.
func CheckRefusal(t testing.TB, what string, rec *httptest.ResponseRecorder) (refused bool) {
	t.Helper()
	switch {
	case rec.Code >= 500:
		t.Fatalf("%s: %d for bad input, want a 4xx: %s", what, rec.Code, rec.Body)
	case rec.Code >= 400:
		var e struct {
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s: %d answered as %q, want JSON: %s", what, rec.Code, ct, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%s: %d body is not {\"error\":{\"code\",\"message\"}}: %s", what, rec.Code, rec.Body)
		}
		return true
	case rec.Code < 200:
		t.Fatalf("%s: status %d", what, rec.Code)
	}
	return false
}

// DoFrom serves one request on h in-process as if it came from the client
// address addr ("203.0.113.66:1"), for tests of what is counted per client.
func DoFrom(h http.Handler, addr, method, target string, header http.Header, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.RemoteAddr = addr
	for k, vs := range header {
		req.Header[k] = vs
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
