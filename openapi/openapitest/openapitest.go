// Package openapitest checks, in tests, that a server's requests and answers
// are what its OpenAPI document says: Handler wraps a handler so that every
// exchange whose route the document describes is validated with
// kin-openapi's openapi3filter, and a mismatch fails the test, naming the
// route and what did not match.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"switchyard/openapi"
)

func init() {
	// A batch of topic records as JSON lines is described as text.
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
}

// Validator validates exchanges against one document.
type Validator struct {
	Doc    *openapi3.T
	router routers.Router

	mu sync.Mutex
	// seen counts the validated exchanges by "METHOD /path template";
	// succeeded those of them answered 2xx that matched the document.
	seen, succeeded map[string]int
}

// Load reads raw (a served document), checks that it is valid OpenAPI and
// returns its validator.
func Load(t testing.TB, raw []byte) *Validator {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(raw)
	if err != nil {
		t.Fatalf("openapi: the document does not load: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi: the document is not valid OpenAPI: %v", err)
	}
	// The server is wherever the test serves it.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatalf("openapi: %v", err)
	}
	return &Validator{Doc: doc, router: router, seen: map[string]int{}, succeeded: map[string]int{}}
}

// Of is the validator of d.
func Of(t testing.TB, d *openapi.Document) *Validator {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return Load(t, raw)
}

// Served is the validator of the document h serves at GET /openapi.json.
func Served(t testing.TB, h http.Handler) *Validator {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("openapi: GET /openapi.json answered %d", rec.Code)
	}
	return Load(t, rec.Body.Bytes())
}

// Handler is h with every exchange whose path and method the document
// describes validated: the answer must be one the document lists for the
// operation, with the body and headers it says, and a request the document
// refuses (a missing parameter, a body of the wrong shape, no credentials)
// must be refused by the server too (4xx). A request the document accepts
// may still be refused for the state it finds (a 404, a 409), so that is
// not checked. An answer to a client that left is not checked either: no
// one reads it. Exchanges on paths the document does not describe pass
// unchecked: the route walk says which routes those may be.
func (v *Validator) Handler(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, params, err := v.router.FindRoute(r)
		if err != nil {
			h.ServeHTTP(w, r)
			return
		}
		var body []byte
		if r.Body != nil && r.Body != http.NoBody {
			body, err = io.ReadAll(r.Body)
			r.Body.Close()
			if err != nil {
				// Too large or cut: the server answers that itself.
				r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
				h.ServeHTTP(w, r)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		probe := r.Clone(context.WithoutCancel(r.Context()))
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		if r.Context().Err() != nil {
			return // the client left (a long poll at shutdown): no one reads the answer
		}
		msg := v.check(probe, body, route, params, rec)
		if msg != "" {
			t.Errorf("openapi: %s %s (%s %s): %s", r.Method, r.URL.RequestURI(), strings.ToUpper(route.Method), route.Path, msg)
		} else if rec.status >= 200 && rec.status < 300 {
			v.count(v.succeeded, route)
		}
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// check validates one exchange; "" when it matches the document.
func (v *Validator) check(req *http.Request, body []byte, route *routers.Route, params map[string]string, rec *recorder) string {
	opts := &openapi3filter.Options{
		IncludeResponseStatus:             true,
		RejectWhenRequestBodyNotSpecified: true,
		AuthenticationFunc:                authenticated,
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)
	v.count(v.seen, route)
	if reqErr != nil && rec.status < 400 {
		return fmt.Sprintf("the server answered %d to a request the document refuses: %v", rec.status, reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.status, Header: rec.Header(), Options: opts}
	out.SetBodyBytes(rec.body.Bytes())
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Sprintf("the answer %d %.300s does not match the document: %v", rec.status, rec.body.Bytes(), err)
	}
	return ""
}

// authenticated says whether a request carries the credential a security
// scheme names; the server checks that it is the right one.
func authenticated(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	r := in.RequestValidationInput.Request
	switch s := in.SecurityScheme; {
	case s.Type == "http" && s.Scheme == "bearer":
		if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") && tok != "" {
			return nil
		}
		return errors.New("no Bearer token")
	case s.Type == "apiKey" && s.In == "cookie":
		if _, err := r.Cookie(s.Name); err == nil {
			return nil
		}
		return fmt.Errorf("no %s cookie", s.Name)
	}
	return fmt.Errorf("security scheme %q is not one the validator knows", in.SecuritySchemeName)
}

func (v *Validator) count(m map[string]int, route *routers.Route) {
	v.mu.Lock()
	m[strings.ToUpper(route.Method)+" "+route.Path]++
	v.mu.Unlock()
}

// Seen is how many exchanges were validated, by "METHOD /path template".
func (v *Validator) Seen() map[string]int { return v.copyOf(v.seen) }

// Succeeded is how many exchanges were answered with a success (2xx) that
// matched the document, by "METHOD /path template": what a coverage test
// counts, since a refusal (a 404, a 409) does not exercise an operation's
// documented answer.
func (v *Validator) Succeeded() map[string]int { return v.copyOf(v.succeeded) }

func (v *Validator) copyOf(m map[string]int) map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]int, len(m))
	for k, n := range m {
		out[k] = n
	}
	return out
}

// recorder passes an answer on and keeps a copy.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
