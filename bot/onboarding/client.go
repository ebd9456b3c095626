package onboarding

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/telemetry"
)

// maxClientBody caps a response body the client reads (500 events with large
// payloads fit comfortably).
const maxClientBody = 32 << 20

// BackendClient calls the backend's /bot/* contract with the shared secret.
// It is the bot's side of the same definitions the backend serves.
//
// Each call is a client span named by its operation (backendCall) and sends
// the span's traceparent header, so the backend's server span of the route
// joins the caller's trace. The span records the method, the route template
// and the answer's status, never the URL, the secret or a body.
type BackendClient struct {
	base   string
	secret string
	hc     *http.Client
}

// NewBackendClient returns a client for the backend at baseURL (scheme and
// host, e.g. "http://127.0.0.1:8080"). A nil hc is http.DefaultClient; its
// Timeout, if set, must exceed the long-poll wait given to Pending.
func NewBackendClient(baseURL, secret string, hc *http.Client) *BackendClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &BackendClient{base: strings.TrimRight(baseURL, "/"), secret: secret, hc: hc}
}

// APIError is a 4xx or 5xx answer of the backend. errors.Is(err, ErrX) holds
// when the answer's code is the one the backend gives ErrX.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("backend answered %d %s: %s", e.Status, e.Code, e.Message)
}

// Is matches the domain error whose code the backend answered.
func (e *APIError) Is(target error) bool {
	var domain contract.Error
	if !errors.As(target, &domain) {
		return false
	}
	_, code, ok := domain.Status()
	return ok && code == e.Code
}

// Temporary reports whether trying again later may succeed (5xx, 429).
func (e *APIError) Temporary() bool {
	return e.Status >= 500 || e.Status == http.StatusTooManyRequests
}

// backendCall is one operation of the contract: the client span it is
// (<subsystem>.<step>), its method and its route template.
type backendCall struct {
	span, method, route string
}

// The operations of the contract the bot calls.
var (
	callPending     = backendCall{"bot.events.poll", http.MethodGet, "/bot/events/pending"}
	callAck         = backendCall{"bot.events.ack", http.MethodPost, "/bot/events/ack"}
	callLeader      = backendCall{"bot.leader.resolve", http.MethodGet, "/bot/leader/resolve"}
	callUserState   = backendCall{"bot.user.state", http.MethodGet, "/bot/user/state"}
	callBind        = backendCall{"bot.telegram.bind", http.MethodPost, "/bot/telegram/bind"}
	callNotify      = backendCall{"bot.notification.add", http.MethodPost, "/bot/notification"}
	callConnectLink = backendCall{"bot.connect_link.mint", http.MethodPost, "/bot/telegram/connect-link"}
	callRedeem      = backendCall{"bot.connect_link.redeem", http.MethodPost, "/bot/telegram/connect-link/redeem"}
	callCheck       = backendCall{"bot.account.check", http.MethodGet, "/auth/check-account-by-telegram/{id}"}
)

// do makes call at path (call's route with its parameters filled in) inside
// the call's client span.
func (c *BackendClient) do(ctx context.Context, call backendCall, path string, query url.Values, in, out any) (err error) {
	ctx, span := telemetry.Start(ctx, call.span, trace.WithSpanKind(trace.SpanKindClient))
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.request.method", call.method), attribute.String("http.route", call.route))
	}
	defer func() { telemetry.End(span, err) }()
	method := call.method
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Accept", "application/json")
	req.Header.Set(contract.InstanceHeader, queue.Instance())
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tp := telemetry.Traceparent(ctx); tp != "" {
		req.Header.Set("traceparent", tp)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxClientBody))
		resp.Body.Close()
	}()
	r := io.LimitReader(resp.Body, maxClientBody)
	if resp.StatusCode >= 400 {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.NewDecoder(r).Decode(&e)
		return &APIError{Status: resp.StatusCode, Code: e.Error.Code, Message: e.Error.Message}
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(r).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// Pending fetches up to limit due events (0: the backend's default of 100).
// A wait above zero long-polls up to that long (rounded up to whole seconds,
// at most 30 s) when none is due; an empty list means none came.
func (c *BackendClient) Pending(ctx context.Context, limit int, wait time.Duration) ([]contract.Event, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if wait > 0 {
		secs := int((min(wait, contract.MaxPendingWait) + time.Second - 1) / time.Second)
		q.Set("wait", strconv.Itoa(secs))
	}
	var res contract.PendingResponse
	if err := c.do(ctx, callPending, callPending.route, q, nil, &res); err != nil {
		return nil, err
	}
	return res.Events, nil
}

// Ack reports processed and retried events.
func (c *BackendClient) Ack(ctx context.Context, req contract.AckRequest) (contract.AckResult, error) {
	if req.ProcessedIDs == nil {
		req.ProcessedIDs = []contract.EventID{}
	}
	if req.RetryIDs == nil {
		req.RetryIDs = []contract.EventID{}
	}
	var res contract.AckResult
	err := c.do(ctx, callAck, callAck.route, nil, req, &res)
	return res, err
}

// ResolveLeader resolves a referral code; an unknown code is ErrLeaderNotFound.
func (c *BackendClient) ResolveLeader(ctx context.Context, code string) (contract.Leader, error) {
	var l contract.Leader
	err := c.do(ctx, callLeader, callLeader.route, url.Values{"code": {code}}, nil, &l)
	return l, err
}

// UserState reads the state of the account bound to tg; none is ErrUserNotFound.
func (c *BackendClient) UserState(ctx context.Context, tg contract.TelegramID) (contract.UserState, error) {
	var s contract.UserState
	err := c.do(ctx, callUserState, callUserState.route, url.Values{"telegramId": {string(tg)}}, nil, &s)
	return s, err
}

// BindTelegram promotes the account's preview Telegram id after the in-bot
// confirmation. Conflicts are ErrTelegramTaken, ErrAccountBound or ErrNoPreview.
func (c *BackendClient) BindTelegram(ctx context.Context, uid contract.UID, tg contract.TelegramID) (contract.BindResponse, error) {
	var res contract.BindResponse
	err := c.do(ctx, callBind, callBind.route, nil, contract.BindRequest{UID: uid, TelegramID: tg}, &res)
	return res, err
}

// AddNotification stores a web-cabinet notification (the fallback when a DM
// fails). With a DedupKey, a repeated call returns the first notification.
func (c *BackendClient) AddNotification(ctx context.Context, n contract.NewNotification) (contract.Notification, error) {
	var res contract.Notification
	err := c.do(ctx, callNotify, callNotify.route, nil, n, &res)
	return res, err
}

// ConnectLink mints or reuses the account's connect token and deep link.
func (c *BackendClient) ConnectLink(ctx context.Context, uid contract.UID) (contract.ConnectLink, error) {
	var res contract.ConnectLink
	err := c.do(ctx, callConnectLink, callConnectLink.route, nil, contract.ConnectLinkRequest{UID: uid}, &res)
	return res, err
}

// RedeemConnect redeems a /start payload for tg.
func (c *BackendClient) RedeemConnect(ctx context.Context, token string, tg contract.TelegramID) (contract.Redemption, error) {
	var res contract.Redemption
	err := c.do(ctx, callRedeem, callRedeem.route, nil, contract.RedeemRequest{Token: token, TelegramID: tg}, &res)
	return res, err
}

// CheckAccountByTelegram tells whether tg is bound to an account.
func (c *BackendClient) CheckAccountByTelegram(ctx context.Context, tg contract.TelegramID) (contract.AccountCheck, error) {
	var res contract.AccountCheck
	err := c.do(ctx, callCheck, "/auth/check-account-by-telegram/"+url.PathEscape(string(tg)), nil, nil, &res)
	return res, err
}
