package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Transport is rt with every exchange validated as Handler validates it,
// from the client's side: for a test that talks to a server it cannot wrap
// (one that serves on its own listener). A mismatch fails t.
func (v *Validator) Transport(t testing.TB, rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		// The document's paths are the server's: match on the path alone.
		probe := r.Clone(r.Context())
		probe.URL.Scheme, probe.URL.Host, probe.Host = "", "", ""
		route, params, err := v.router.FindRoute(probe)
		if err != nil {
			return rt.RoundTrip(r)
		}
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			if body, err = io.ReadAll(r.Body); err != nil {
				return nil, err
			}
			r.Body.Close()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := rt.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		answer, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		rec := &recorder{ResponseWriter: httptest.NewRecorder(), status: resp.StatusCode}
		for k, vs := range resp.Header {
			rec.Header()[k] = vs
		}
		rec.body.Write(answer)
		if msg := v.check(probe, body, route, params, rec); msg != "" {
			t.Errorf("openapi: %s %s (%s %s): %s", r.Method, r.URL.RequestURI(), strings.ToUpper(route.Method), route.Path, msg)
		} else if resp.StatusCode/100 == 2 {
			v.count(v.succeeded, route)
		}
		return resp, nil
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
