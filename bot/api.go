package bot

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"switchyard/authlimit"
	"switchyard/httpjson"
)

// errorStatus is the one table between domain errors and HTTP: the status
// and stable code the API answers, and (read backwards by BackendClient) the
// domain error a client gets for a code.
var errorStatus = map[Error]struct {
	status int
	code   string
}{
	ErrUserNotFound:      {http.StatusNotFound, "user_not_found"},
	ErrLeaderNotFound:    {http.StatusNotFound, "leader_not_found"},
	ErrEventNotFound:     {http.StatusNotFound, "event_not_found"},
	ErrTokenNotFound:     {http.StatusNotFound, "token_not_found"},
	ErrEventProcessed:    {http.StatusConflict, "event_processed"},
	ErrLinkTaken:         {http.StatusConflict, "link_taken"},
	ErrTelegramTaken:     {http.StatusConflict, "telegram_taken"},
	ErrAccountBound:      {http.StatusConflict, "account_bound"},
	ErrNoPreview:         {http.StatusConflict, "no_preview"},
	ErrAlreadyRegistered: {http.StatusConflict, "already_registered"},
	ErrTokenUsed:         {http.StatusConflict, "token_used"},
	ErrTokenExpired:      {http.StatusGone, "token_expired"},
	ErrUnauthorized:      {http.StatusUnauthorized, "unauthorized"},
}

// httpError turns a domain error into the *httpjson.Error the API answers;
// anything else passes through (httpjson makes it a logged 500).
func httpError(err error) error {
	var (
		domain  Error
		invalid *InvalidError
	)
	switch {
	case errors.As(err, &domain):
		if s, ok := errorStatus[domain]; ok {
			return httpjson.Errorf(s.status, s.code, "%s", domain)
		}
	case errors.As(err, &invalid):
		return httpjson.BadRequest("%s", invalid.Msg)
	}
	return err
}

// handler adapts a handler that returns a domain error to httpjson.
func handler(f func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return httpjson.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return httpError(f(w, r))
	})
}

// surfaceBotAPI names the /bot/* contract's Bearer check in authlimit's logs.
const surfaceBotAPI = "bot-api"

// BotAuthGuard lets a request through only with "Authorization: Bearer
// <secret>". The token's length is checked first, then its bytes in constant
// time (crypto/subtle); a missing, malformed or wrong header gets the same
// 401 JSON. Every presented token is an attempt on limiter: a client
// throttled for failed attempts gets 429 with Retry-After, its token
// unchecked (nil: a limiter of this guard's own). An empty secret is a
// wiring mistake and panics.
func BotAuthGuard(secret string, limiter *authlimit.Limiter) func(http.Handler) http.Handler {
	if secret == "" {
		panic("bot: BotAuthGuard needs a secret")
	}
	if limiter == nil {
		limiter = authlimit.New(authlimit.Opts{})
	}
	limiter.Declare(surfaceBotAPI)
	want := []byte(secret)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got, ok := bearerToken(r.Header.Get("Authorization"))
			v, wait := authlimit.Refused, time.Duration(0)
			if ok {
				v, wait = limiter.Check(r, surfaceBotAPI, func() bool {
					return len(got) == len(want) && subtle.ConstantTimeCompare(got, want) == 1
				})
			}
			switch v {
			case authlimit.Allowed:
				next.ServeHTTP(w, r)
			case authlimit.Throttled:
				httpjson.WriteError(w, r, httpjson.TooManyAttempts(w, wait))
			default:
				w.Header().Set("WWW-Authenticate", `Bearer realm="bot"`)
				httpjson.WriteError(w, r, httpjson.Unauthorized())
			}
		})
	}
}

func bearerToken(h string) ([]byte, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, false
	}
	return []byte(token), true
}

// Routes registers the bot's service API on the root router: every /bot/*
// route and GET /auth/check-account-by-telegram/{id} behind BotAuthGuard, and
// the unguarded GET /openapi.json that documents them.
func (b *Backend) Routes(r *mux.Router) {
	guard := BotAuthGuard(b.secret, b.authLimit)
	bot := func(method, path string, f func(w http.ResponseWriter, r *http.Request) error) {
		r.Handle(path, guard(handler(f))).Methods(method)
	}
	bot(http.MethodGet, "/bot/events/pending", b.handlePending)
	bot(http.MethodPost, "/bot/events/ack", b.handleAck)
	bot(http.MethodGet, "/bot/leader/resolve", b.handleResolveLeader)
	bot(http.MethodGet, "/bot/user/state", b.handleUserState)
	bot(http.MethodPost, "/bot/telegram/bind", b.handleBind)
	bot(http.MethodPost, "/bot/notification", b.handleNotification)
	bot(http.MethodPost, "/bot/telegram/connect-link", b.handleConnectLink)
	bot(http.MethodPost, "/bot/telegram/connect-link/redeem", b.handleRedeem)
	bot(http.MethodGet, "/auth/check-account-by-telegram/{id}", b.handleCheckAccount)
	r.Handle("/openapi.json", handler(b.handleOpenAPI)).Methods(http.MethodGet)
}

// AdminRoutes registers the operator routes on r, which is already the
// /admin/api subrouter behind admin auth: the backend actions that emit
// (users, wallet, register, nft), raw emit, and the outbox's event list,
// detail and redrive.
func (b *Backend) AdminRoutes(r *mux.Router) {
	r.Handle("/users", handler(b.handleCreateUser)).Methods(http.MethodPost)
	r.Handle("/users/{uid}", handler(b.handleGetUser)).Methods(http.MethodGet)
	r.Handle("/users/{uid}/notifications", handler(b.handleListNotifications)).Methods(http.MethodGet)
	r.Handle("/users/{uid}/wallet", handler(b.handleWallet)).Methods(http.MethodPost)
	r.Handle("/users/{uid}/register", handler(b.handleRegister)).Methods(http.MethodPost)
	r.Handle("/users/{uid}/nft", handler(b.handleNFT)).Methods(http.MethodPost)
	r.Handle("/bot/events", handler(b.handleEmit)).Methods(http.MethodPost)
	r.Handle("/bot/events", handler(b.handleListEvents)).Methods(http.MethodGet)
	r.Handle("/bot/events/{id}", handler(b.handleGetEvent)).Methods(http.MethodGet)
	r.Handle("/bot/events/{id}/redrive", handler(b.handleRedrive)).Methods(http.MethodPost)
}

// parseLimit reads ?limit=: absent is the default; an integer ≥ 1 is capped
// at the maximum (however many digits it has); anything else is a 400.
func parseLimit(r *http.Request) (int, error) {
	q := r.URL.Query()
	if !q.Has("limit") {
		return BOT_OUTBOX_DEFAULT_PENDING_LIMIT, nil
	}
	s := q.Get("limit")
	n, err := strconv.Atoi(s)
	if err != nil {
		var num *strconv.NumError
		if errors.As(err, &num) && errors.Is(num.Err, strconv.ErrRange) && !strings.HasPrefix(s, "-") {
			return BOT_OUTBOX_MAX_PENDING_LIMIT, nil
		}
		return 0, invalidf("limit must be an integer of at least 1, not %q", s)
	}
	if n < 1 {
		return 0, invalidf("limit must be an integer of at least 1, not %q", s)
	}
	return ClampPendingLimit(n), nil
}

// parseWait reads ?wait=: whole seconds from 0; more than MaxPendingWait
// (however many digits) waits MaxPendingWait, as ?limit= is capped rather
// than refused.
func parseWait(r *http.Request) (time.Duration, error) {
	q := r.URL.Query()
	if !q.Has("wait") {
		return 0, nil
	}
	s := q.Get("wait")
	n, err := strconv.Atoi(s)
	if err != nil {
		var num *strconv.NumError
		if errors.As(err, &num) && errors.Is(num.Err, strconv.ErrRange) && !strings.HasPrefix(s, "-") {
			return MaxPendingWait, nil
		}
		return 0, invalidf("wait must be whole seconds from 0 to 30, not %q", s)
	}
	if n < 0 {
		return 0, invalidf("wait must be whole seconds from 0 to 30, not %q", s)
	}
	return min(time.Duration(n)*time.Second, MaxPendingWait), nil
}

// longPollMargin is what a long poll's connection is held for beyond its
// wait: the read of the page and the answer.
const longPollMargin = 10 * time.Second

// PendingResponse is the body of GET /bot/events/pending.
type PendingResponse struct {
	Events []Event `json:"events"`
}

func (b *Backend) handlePending(w http.ResponseWriter, r *http.Request) error {
	limit, err := parseLimit(r)
	if err != nil {
		return err
	}
	wait, err := parseWait(r)
	if err != nil {
		return err
	}
	if wait > 0 {
		// The poll may outlast the server's read and write timeouts.
		httpjson.HoldOpen(w, wait+longPollMargin)
	}
	events, err := b.outbox.WaitPending(r.Context(), limit, wait)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, PendingResponse{Events: events})
	return nil
}

func (b *Backend) handleAck(w http.ResponseWriter, r *http.Request) error {
	var req AckRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	res, err := b.outbox.Ack(r.Context(), req)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, res)
	return nil
}

func (b *Backend) handleResolveLeader(w http.ResponseWriter, r *http.Request) error {
	l, err := b.ResolveLeader(r.Context(), r.URL.Query().Get("code"))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, l)
	return nil
}

func (b *Backend) handleUserState(w http.ResponseWriter, r *http.Request) error {
	tg, err := ParseTelegramID(r.URL.Query().Get("telegramId"))
	if err != nil {
		return err
	}
	st, err := b.UserState(r.Context(), tg)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, st)
	return nil
}

// BindRequest is the body of POST /bot/telegram/bind.
type BindRequest struct {
	UID        UID        `json:"uid"`
	TelegramID TelegramID `json:"telegramId"`
}

func (b *Backend) handleBind(w http.ResponseWriter, r *http.Request) error {
	var req BindRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	if req.UID <= 0 || req.TelegramID == "" {
		return invalidf("uid and telegramId are required")
	}
	u, err := b.BindTelegram(r.Context(), req.UID, req.TelegramID)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, BindResponse{UID: u.UID, TelegramID: *u.TelegramID})
	return nil
}

// BindResponse is the answer of POST /bot/telegram/bind.
type BindResponse struct {
	UID        UID        `json:"uid"`
	TelegramID TelegramID `json:"telegramId"`
}

func (b *Backend) handleNotification(w http.ResponseWriter, r *http.Request) error {
	var req NewNotification
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	n, created, err := b.AddNotification(r.Context(), req)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	httpjson.Write(w, status, n)
	return nil
}

// ConnectLinkRequest is the body of POST /bot/telegram/connect-link.
type ConnectLinkRequest struct {
	UID UID `json:"uid"`
}

func (b *Backend) handleConnectLink(w http.ResponseWriter, r *http.Request) error {
	var req ConnectLinkRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	if req.UID <= 0 {
		return invalidf("uid is required")
	}
	link, err := b.MintConnectLink(r.Context(), req.UID)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, link)
	return nil
}

// RedeemRequest is the body of POST /bot/telegram/connect-link/redeem: the
// /start payload (any form ParseConnectPayload reads) and who sent it.
type RedeemRequest struct {
	Token      string     `json:"token"`
	TelegramID TelegramID `json:"telegramId"`
}

func (b *Backend) handleRedeem(w http.ResponseWriter, r *http.Request) error {
	var req RedeemRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	if req.TelegramID == "" {
		return invalidf("telegramId is required")
	}
	red, err := b.RedeemConnect(r.Context(), req.Token, req.TelegramID)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, red)
	return nil
}

func (b *Backend) handleCheckAccount(w http.ResponseWriter, r *http.Request) error {
	tg, err := ParseTelegramID(mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	res, err := b.CheckAccountByTelegram(r.Context(), tg)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, res)
	return nil
}

func (b *Backend) handleOpenAPI(w http.ResponseWriter, r *http.Request) error {
	httpjson.Write(w, http.StatusOK, OpenAPI())
	return nil
}

func parseUID(s string) (UID, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, invalidf("uid %q is not a positive integer", s)
	}
	return UID(n), nil
}

func parseEventID(s string) (EventID, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, invalidf("event id %q is not a positive integer", s)
	}
	return EventID(n), nil
}

func (b *Backend) handleCreateUser(w http.ResponseWriter, r *http.Request) error {
	var req NewUser
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	u, err := b.CreateUser(r.Context(), req)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusCreated, u)
	return nil
}

func (b *Backend) handleGetUser(w http.ResponseWriter, r *http.Request) error {
	uid, err := parseUID(mux.Vars(r)["uid"])
	if err != nil {
		return err
	}
	u, err := b.GetUser(r.Context(), uid)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, u)
	return nil
}

// NotificationsResponse is the body of GET /admin/api/users/{uid}/notifications.
type NotificationsResponse struct {
	Notifications []Notification `json:"notifications"`
}

func (b *Backend) handleListNotifications(w http.ResponseWriter, r *http.Request) error {
	uid, err := parseUID(mux.Vars(r)["uid"])
	if err != nil {
		return err
	}
	list, err := b.ListNotifications(r.Context(), uid)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, NotificationsResponse{Notifications: list})
	return nil
}

// actionHandler decodes the body of a POST /admin/api/users/{uid}/… action and writes
// its ActionResult.
func actionHandler[T any](w http.ResponseWriter, r *http.Request, run func(uid UID, body T) (ActionResult, error)) error {
	uid, err := parseUID(mux.Vars(r)["uid"])
	if err != nil {
		return err
	}
	var body T
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	res, err := run(uid, body)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, res)
	return nil
}

func (b *Backend) handleWallet(w http.ResponseWriter, r *http.Request) error {
	return actionHandler(w, r, func(uid UID, body struct {
		Addr string `json:"addr"`
	}) (ActionResult, error) {
		return b.ConnectWallet(r.Context(), uid, body.Addr)
	})
}

func (b *Backend) handleRegister(w http.ResponseWriter, r *http.Request) error {
	return actionHandler(w, r, func(uid UID, body struct {
		LeaderUID *UID `json:"leaderUid"`
	}) (ActionResult, error) {
		if body.LeaderUID != nil && *body.LeaderUID <= 0 {
			return ActionResult{}, invalidf("leaderUid must be a positive uid or null")
		}
		return b.Register(r.Context(), uid, body.LeaderUID)
	})
}

func (b *Backend) handleNFT(w http.ResponseWriter, r *http.Request) error {
	return actionHandler(w, r, func(uid UID, body struct {
		Level NftLevel `json:"level"`
	}) (ActionResult, error) {
		return b.ActivateNFT(r.Context(), uid, body.Level)
	})
}

// EmitRequest is the body of POST /admin/api/bot/events (raw emit).
type EmitRequest struct {
	EventType  EventType       `json:"eventType"`
	TelegramID TelegramID      `json:"telegramId,omitempty"`
	MagnetUID  UID             `json:"magnetUid,omitempty"`
	Payload    json.RawMessage `json:"payload,omitempty"`
}

// EmitResponse is the answer of a raw emit.
type EmitResponse struct {
	ID EventID `json:"id"`
}

func (b *Backend) handleEmit(w http.ResponseWriter, r *http.Request) error {
	var req EmitRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	if !req.EventType.Valid() {
		return invalidf("eventType must be one of %v, not %q", EventTypes, req.EventType)
	}
	if req.MagnetUID < 0 {
		return invalidf("magnetUid must be positive")
	}
	if req.MagnetUID == 0 && req.TelegramID == "" {
		return invalidf("telegramId or magnetUid is required")
	}
	id, err := b.outbox.Emit(r.Context(), NewEvent{
		Type:    req.EventType,
		Target:  Target{MagnetUID: req.MagnetUID, TelegramID: req.TelegramID},
		Payload: req.Payload,
	})
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusCreated, EmitResponse{ID: id})
	return nil
}

// EventsResponse is the body of GET /admin/api/bot/events.
type EventsResponse struct {
	Events []EventRecord `json:"events"`
}

func (b *Backend) handleListEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := EventFilter{State: EventState(q.Get("state"))}
	if q.Has("limit") {
		n, err := parseLimit(r)
		if err != nil {
			return err
		}
		f.Limit = n
	}
	if s := q.Get("beforeId"); s != "" {
		id, err := parseEventID(s)
		if err != nil {
			return err
		}
		f.BeforeID = id
	}
	list, err := b.outbox.ListEvents(r.Context(), f)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, EventsResponse{Events: list})
	return nil
}

func (b *Backend) handleGetEvent(w http.ResponseWriter, r *http.Request) error {
	id, err := parseEventID(mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	rec, err := b.outbox.GetEvent(r.Context(), id)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, rec)
	return nil
}

func (b *Backend) handleRedrive(w http.ResponseWriter, r *http.Request) error {
	id, err := parseEventID(mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	rec, err := b.outbox.Redrive(r.Context(), id)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, rec)
	return nil
}
