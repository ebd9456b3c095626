package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mymmrac/telego"
	ta "github.com/mymmrac/telego/telegoapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"switchyard/telemetry"
)

// tooManyRequests counts the Bot API's 429 answers, by the bot's id (the
// number before the token's colon, never the secret after it). The limiter
// paces every send to stay under Telegram's limits, so any 429 means the
// limits differ from what it assumes, or another client spends the same
// token's budget.
var tooManyRequests = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchyard_telegram_too_many_requests_total",
	Help: "Bot API calls Telegram answered 429 Too Many Requests (flood control), by bot id.",
}, []string{"bot"})

// DefaultAPIURL is the real Bot API server.
const DefaultAPIURL = "https://api.telegram.org"

// DefaultRequestTimeout bounds one Bot API call other than getUpdates.
const DefaultRequestTimeout = 15 * time.Second

// MaxLongPoll is the longest getUpdates timeout NewBot's client waits for; a
// getUpdates call gets MaxLongPoll on top of its request timeout.
const MaxLongPoll = 60 * time.Second

// maxResponseBytes caps a Bot API answer read into memory.
const maxResponseBytes = 16 << 20

// BotOption changes how NewBot builds a bot.
type BotOption func(*botOptions)

type botOptions struct {
	client  *http.Client
	log     *slog.Logger
	timeout time.Duration
}

// WithHTTPClient makes the bot use c. Its Timeout, if any, should exceed
// MaxLongPoll when the bot long-polls.
func WithHTTPClient(c *http.Client) BotOption {
	return func(o *botOptions) { o.client = c }
}

// WithLogger makes telego's own log lines go to log (debug lines at Debug,
// errors at Warn), with the token masked. Without it telego logs nothing.
func WithLogger(log *slog.Logger) BotOption {
	return func(o *botOptions) { o.log = log }
}

// WithTimeout bounds each Bot API call to d (getUpdates gets d+MaxLongPoll).
func WithTimeout(d time.Duration) BotOption {
	return func(o *botOptions) { o.timeout = d }
}

// NewBot returns a telego bot for token that calls the Bot API at apiURL
// (DefaultAPIURL when empty), e.g. the URL of a fakebot.Server. Calls go
// through net/http with dial, TLS and per-call timeouts; the token never
// appears in errors or log lines the bot produces: it is replaced by
// "<token>".
func NewBot(token, apiURL string, opts ...BotOption) (*telego.Bot, error) {
	o := botOptions{timeout: DefaultRequestTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if o.client == nil {
		o.client = NewHTTPClient()
	}
	if o.timeout <= 0 {
		o.timeout = DefaultRequestTimeout
	}
	if apiURL == "" {
		apiURL = DefaultAPIURL
	}
	apiURL = strings.TrimRight(apiURL, "/")
	var log telego.Logger = discardLogger{}
	if o.log != nil {
		log = slogLogger{log: o.log, mask: strings.NewReplacer(token, "<token>")}
	}
	botLabel := "unknown"
	if id, ok := BotIDFromToken(token); ok {
		botLabel = strconv.FormatInt(id, 10)
	}
	tooManyRequests.WithLabelValues(botLabel) // at 0 from the start, for the alert
	bot, err := telego.NewBot(token,
		telego.WithAPIServer(apiURL),
		telego.WithAPICaller(caller{client: o.client, token: token, timeout: o.timeout, bot: botLabel}),
		telego.WithLogger(log),
	)
	if err != nil {
		// telego's errors never include the token itself.
		return nil, fmt.Errorf("new telegram bot: %w", err)
	}
	return bot, nil
}

// NewHTTPClient returns the HTTP client NewBot uses by default: bounded dial,
// TLS handshake and idle times, proxies from the environment, and no overall
// timeout (each call carries its own deadline).
func NewHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// BotIDFromToken returns the bot's user id, the number before the colon of a
// token like "123456:ABC…".
func BotIDFromToken(token string) (int64, bool) {
	head, _, ok := strings.Cut(token, ":")
	if !ok || head == "" {
		return 0, false
	}
	id, err := strconv.ParseInt(head, 10, 64)
	if err != nil || id <= 0 {
		return 0, false
	}
	return id, true
}

// HTTPStatusError is a Bot API answer with an HTTP status of 500 or more and
// no usable Bot API error body (a proxy's 502, an overloaded server).
type HTTPStatusError struct {
	StatusCode int
}

func (e *HTTPStatusError) Error() string {
	return "telegram bot api: http status " + strconv.Itoa(e.StatusCode)
}

// redactedError carries an error whose text had the token replaced; Unwrap
// still reaches the cause so errors.Is(err, context.DeadlineExceeded) and
// net.Error checks keep working.
type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.cause }

// caller is a telegoapi.Caller on net/http that applies a per-call deadline,
// reads 5xx answers into *HTTPStatusError or *telegoapi.Error, strips the
// token from every error it returns, and counts the 429 answers.
type caller struct {
	client  *http.Client
	token   string
	timeout time.Duration
	bot     string // the bot id, the tooManyRequests label
}

func (c caller) Call(ctx context.Context, url string, data *ta.RequestData) (*ta.Response, error) {
	var span trace.Span
	if telemetry.Enabled() {
		method := apiMethod(url)
		ctx, span = telemetry.Start(ctx, "telegram "+method, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("telegram.method", method)))
	}
	resp, err := c.call(ctx, url, data)
	if resp != nil && resp.Error != nil && resp.ErrorCode == http.StatusTooManyRequests {
		tooManyRequests.WithLabelValues(c.bot).Inc()
	}
	if err != nil && c.token != "" && strings.Contains(err.Error(), c.token) {
		err = &redactedError{msg: strings.ReplaceAll(err.Error(), c.token, "<token>"), cause: err}
		resp = nil
	}
	if span != nil {
		endCallSpan(span, resp, err)
	}
	return resp, err
}

// apiMethod is the Bot API method a call URL names (its last path segment,
// after the token), or "call" when there is none.
func apiMethod(url string) string {
	i := strings.LastIndexByte(url, '/')
	if i < 0 || i == len(url)-1 {
		return "call"
	}
	return url[i+1:]
}

// endCallSpan records a Bot API call's outcome on its span: the answer's ok
// and error_code (429 with its retry_after) — never the URL, whose path holds
// the token, nor the description, which can quote the message.
func endCallSpan(span trace.Span, resp *ta.Response, err error) {
	if resp != nil {
		span.SetAttributes(attribute.Bool("telegram.ok", resp.Ok))
		if !resp.Ok {
			span.SetAttributes(attribute.Int("telegram.error_code", resp.ErrorCode))
			if resp.Parameters != nil && resp.Parameters.RetryAfter > 0 {
				span.SetAttributes(attribute.Int("telegram.retry_after", resp.Parameters.RetryAfter))
			}
			span.SetStatus(codes.Error, "telegram error "+strconv.Itoa(resp.ErrorCode))
		}
	}
	telemetry.End(span, err)
}

func (c caller) call(ctx context.Context, url string, data *ta.RequestData) (*ta.Response, error) {
	timeout := c.timeout
	if strings.HasSuffix(strings.ToLower(url), "/getupdates") {
		timeout += MaxLongPoll
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var body io.Reader
	switch {
	case data.BodyRaw != nil:
		body = bytes.NewReader(data.BodyRaw)
	case data.BodyStream != nil:
		body = data.BodyStream
	default:
		return nil, errors.New("telegram bot api: request has no body")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, body)
	if err != nil {
		return nil, fmt.Errorf("telegram bot api: build request: %w", err)
	}
	req.Header.Set(ta.ContentTypeHeader, data.ContentType)
	res, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("telegram bot api: %w", err)
	}
	defer func() { _ = res.Body.Close() }()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("telegram bot api: read answer: %w", err)
	}
	var out ta.Response
	if err := json.Unmarshal(raw, &out); err != nil {
		if res.StatusCode >= http.StatusInternalServerError {
			return nil, &HTTPStatusError{StatusCode: res.StatusCode}
		}
		return nil, fmt.Errorf("telegram bot api: decode answer (http %d): %w", res.StatusCode, err)
	}
	if res.StatusCode >= http.StatusInternalServerError && (out.Ok || out.Error == nil || out.ErrorCode == 0) {
		return nil, &HTTPStatusError{StatusCode: res.StatusCode}
	}
	return &out, nil
}

// discardLogger drops telego's log lines.
type discardLogger struct{}

func (discardLogger) Debugf(string, ...any) {}
func (discardLogger) Errorf(string, ...any) {}

// slogLogger sends telego's log lines to slog with the token masked.
type slogLogger struct {
	log  *slog.Logger
	mask *strings.Replacer
}

func (l slogLogger) Debugf(format string, args ...any) {
	if !l.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	l.log.Debug(l.mask.Replace(strings.TrimSpace(fmt.Sprintf(format, args...))), "component", "telego")
}

func (l slogLogger) Errorf(format string, args ...any) {
	l.log.Warn(l.mask.Replace(strings.TrimSpace(fmt.Sprintf(format, args...))), "component", "telego")
}
