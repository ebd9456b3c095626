// Package httpjson is the one place where Switchyard's HTTP handlers turn
// values into JSON responses, decode JSON bodies and map errors to statuses.
// Every 4xx and 5xx body has the shape {"error":{"code":"…","message":"…"}}.
// Only 5xx answers are logged, as errors. Every time in an answer is written
// in one format, TimeLayout; a JSON body is read only when its Content-Type
// says application/json.
package httpjson

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Error is an error with an HTTP status and a stable machine-readable code.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf makes an *Error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// BadRequest is a 400 with code "bad_request".
func BadRequest(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, "bad_request", format, args...)
}

// NotFound is a 404 with code "not_found".
func NotFound(format string, args ...any) *Error {
	return Errorf(http.StatusNotFound, "not_found", format, args...)
}

// Conflict is a 409 with code "conflict".
func Conflict(format string, args ...any) *Error {
	return Errorf(http.StatusConflict, "conflict", format, args...)
}

// Unauthorized is the 401 every guard answers; it never says what was wrong.
func Unauthorized() *Error {
	return Errorf(http.StatusUnauthorized, "unauthorized", "missing or invalid credentials")
}

// Unavailable is a 503 with code "unavailable": the caller should try again.
func Unavailable(format string, args ...any) *Error {
	return Errorf(http.StatusServiceUnavailable, "unavailable", format, args...)
}

// UnsupportedMediaType is the 415 of a body that is not declared as JSON.
func UnsupportedMediaType() *Error {
	return Errorf(http.StatusUnsupportedMediaType, "unsupported_media_type",
		"the body must be JSON, sent with Content-Type: application/json")
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// TimeLayout is how every JSON answer writes a time.Time: RFC 3339 in UTC
// with exactly six fractional digits, the precision and layout the store
// keeps (store.TimeLayout), so a time read back from the database and one
// just computed look alike, and a client can compare them as text. Finer
// digits are truncated, as the store truncates them.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// writeOptions are encoding/json's semantics (the v1 options of
// go-json-experiment, so struct tags, omitempty, MarshalJSON methods and map
// key order behave as they always have), with HTML characters left as they
// are and time.Time — wherever it sits, behind a pointer or an interface —
// written in TimeLayout.
var writeOptions = jsonv2.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsontext.EscapeForHTML(false),
	jsonv2.WithMarshalers(jsonv2.MarshalToFunc(func(enc *jsontext.Encoder, t time.Time) error {
		if y := t.UTC().Year(); y < 0 || y > 9999 {
			return fmt.Errorf("time %v: year outside of range [0,9999]", t)
		}
		return enc.WriteToken(jsontext.String(t.UTC().Format(TimeLayout)))
	})),
)

// Marshal encodes v as Write does, without the trailing newline.
func Marshal(v any) ([]byte, error) {
	return jsonv2.Marshal(v, writeOptions)
}

// Write sends v as JSON with the given status. A value that cannot be
// encoded is a wiring mistake: the answer becomes a logged 500.
func Write(w http.ResponseWriter, status int, v any) {
	b, err := Marshal(v)
	if err != nil {
		slog.Default().Error("response not encodable as JSON", slog.Int("status", status), slog.Any("err", err))
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError maps err to a status and writes the JSON error body. Errors that
// are not *Error become 500 with a generic message, and are logged.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	var (
		herr  *Error
		maxed *http.MaxBytesError
	)
	switch {
	case errors.As(err, &herr):
	case errors.As(err, &maxed):
		herr = Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body is larger than %d bytes", maxed.Limit)
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		herr = Errorf(499, "client_closed", "client closed the request")
	default:
		herr = Errorf(http.StatusInternalServerError, "internal", "internal error")
	}
	if herr.Status >= 500 {
		Logger(r.Context()).ErrorContext(r.Context(), "request failed",
			slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", herr.Status), slog.Any("err", err))
	}
	var body errorBody
	body.Error.Code, body.Error.Message = herr.Code, herr.Message
	Write(w, herr.Status, body)
}

// RequireJSON refuses, with a 415 "unsupported_media_type", a request whose
// body is not declared as JSON: its one Content-Type must be
// application/json. Parameters are allowed and change nothing: RFC 8259
// defines none for application/json and says a charset "has no effect on
// compliant recipients" (JSON is UTF-8). A missing Content-Type is refused
// too: every client of a JSON route (Telegram, the onboarding bot, the demo,
// the load generator) declares it.
func RequireJSON(r *http.Request) error {
	values := r.Header.Values("Content-Type")
	if len(values) != 1 {
		return UnsupportedMediaType()
	}
	if mt, _, err := mime.ParseMediaType(values[0]); err != nil || mt != "application/json" {
		return UnsupportedMediaType()
	}
	return nil
}

// Decode reads one JSON value from the request body into v. A body not
// declared as JSON is a 415 (RequireJSON); malformed JSON, unknown fields,
// trailing data or an empty body are a 400; a body over the server's cap is
// a 413; a body cut by the server's read timeout is a 408.
func Decode(r *http.Request, v any) error {
	if err := RequireJSON(r); err != nil {
		return err
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var maxed *http.MaxBytesError
		if errors.As(err, &maxed) {
			return err
		}
		if errors.Is(err, io.EOF) {
			return BadRequest("request body is empty; JSON expected")
		}
		if IsTimeout(err) {
			return RequestTimeout()
		}
		return BadRequest("malformed JSON: %v", err)
	}
	if err := dec.Decode(&struct{}{}); !errors.Is(err, io.EOF) {
		var maxed *http.MaxBytesError
		if errors.As(err, &maxed) {
			return err
		}
		return BadRequest("malformed JSON: more than one value in the body")
	}
	return nil
}

// HandlerFunc is an HTTP handler that returns its error instead of writing it.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// ServeHTTP calls f and writes its error, if any, with WriteError.
func (f HandlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := f(w, r); err != nil {
		WriteError(w, r, err)
	}
}

type loggerKey struct{}

// WithLogger returns ctx carrying the request's logger.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the request's logger, or slog.Default().
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// NotFoundHandler answers a path no route matches: 404 with the JSON error body.
var NotFoundHandler http.Handler = HandlerFunc(func(http.ResponseWriter, *http.Request) error {
	return NotFound("no such route")
})

// MethodNotAllowedHandler answers a route asked with a method it does not
// take, without an Allow header; routers that can list a path's methods use
// MethodNotAllowed.
var MethodNotAllowedHandler http.Handler = MethodNotAllowed(nil)

// MethodNotAllowed answers a route asked with a method it does not take: a
// 405 "method_not_allowed" with the Allow header RFC 9110 asks of a 405,
// listing what allowed returns for the request (nil: no header).
func MethodNotAllowed(allowed func(*http.Request) []string) http.Handler {
	return HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		if allowed != nil {
			w.Header().Set("Allow", strings.Join(allowed(r), ", "))
		}
		return Errorf(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this route")
	})
}
