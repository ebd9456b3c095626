package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"switchyard/httpjson"
	"switchyard/telemetry"
)

var (
	httpRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_http_requests_total",
		Help: "HTTP requests answered, by route template, method and status code.",
	}, []string{"route", "method", "code"})
	httpDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchyard_http_request_duration_seconds",
		Help:    "Time to answer HTTP requests, by route template.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route"})
)

// statusWriter remembers the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and deadlines (long polls, SSE).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

var (
	requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
	// botTokenInPath finds a Bot API token in a path (/bot<id>:<secret>/…),
	// as the sandbox Bot API is addressed; the log shows only the bot id.
	botTokenInPath = regexp.MustCompile(`/bot(\d+):[A-Za-z0-9_-]+`)
)

// logPath is the request path as the access log may show it.
func logPath(p string) string {
	return botTokenInPath.ReplaceAllString(p, "/bot$1:<token>")
}

func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// observe gives every request an id (X-Request-Id, kept from the caller when
// sane), a logger carrying it, a server span named by its route template
// (continuing the caller's traceparent), an access-log line and metrics. The query string
// is never logged: a login link carries the admin token there.
func observe(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-Id")
		if !requestIDPattern.MatchString(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		r, span := telemetry.ServerSpan(r)
		reqLog := log.With(slog.String("request_id", id))
		if tid := telemetry.TraceID(r.Context()); tid != "" {
			reqLog = reqLog.With(slog.String("trace_id", tid))
		}
		route := &routeHolder{}
		ctx := context.WithValue(httpjson.WithLogger(r.Context(), reqLog), routeKey{}, route)
		r = r.WithContext(ctx)
		sw := &statusWriter{ResponseWriter: w}

		next.ServeHTTP(sw, r)

		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		elapsed := time.Since(start)
		tmpl := routeTemplate(r)
		telemetry.EndServer(span, r.Method, tmpl, sw.status)
		httpRequests.WithLabelValues(tmpl, r.Method, strconv.Itoa(sw.status)).Inc()
		httpDuration.WithLabelValues(tmpl).Observe(elapsed.Seconds())
		reqLog.LogAttrs(r.Context(), slog.LevelInfo, "http",
			slog.String("method", r.Method),
			slog.String("path", logPath(r.URL.Path)),
			slog.String("route", tmpl),
			slog.Int("status", sw.status),
			slog.Int("bytes", sw.bytes),
			slog.Duration("duration", elapsed),
		)
	})
}

// routeHolder carries the matched route template from the router back out to
// observe, which sees the request before mux has matched it.
type routeHolder struct{ template string }

type routeKey struct{}

func routeTemplate(r *http.Request) string {
	if h, ok := r.Context().Value(routeKey{}).(*routeHolder); ok && h.template != "" {
		return h.template
	}
	return "unmatched"
}

// captureRoute is router middleware that records the matched route template.
// The innermost router runs last, so the most specific template wins.
func captureRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h, ok := r.Context().Value(routeKey{}).(*routeHolder); ok {
			if cur := mux.CurrentRoute(r); cur != nil {
				if t, err := cur.GetPathTemplate(); err == nil {
					h.template = t
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanics turns a panic in a handler into a JSON 500 and a logged stack.
func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil || p == http.ErrAbortHandler {
				if p != nil {
					panic(p)
				}
				return
			}
			httpjson.Logger(r.Context()).ErrorContext(r.Context(), "handler panicked",
				slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
			httpjson.WriteError(w, r, httpjson.Errorf(http.StatusInternalServerError, "internal", "internal error"))
		}()
		next.ServeHTTP(w, r)
	})
}

// capBodies limits every request body to limit bytes; reading past it fails
// with *http.MaxBytesError, which httpjson answers with 413. A declared
// Content-Length over the cap is refused before the handler runs.
func capBodies(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			httpjson.WriteError(w, r, &http.MaxBytesError{Limit: limit})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}

// securityHeaders sets conservative browser headers on every answer.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}
