package backend

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
	"switchyard/bot/contract"
	"switchyard/httpjson"
)

// handler adapts a handler that returns a domain error to httpjson.
func handler(f func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return httpjson.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return contract.HTTPError(f(w, r))
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
		panic("backend: BotAuthGuard needs a secret")
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
// route and GET /auth/check-account-by-telegram/{id} behind BotAuthGuard,
// which OpenAPI describes (the console serves the document at GET
// /openapi.json).
func (b *Service) Routes(r *mux.Router) {
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
}

// AdminRoutes registers the operator routes on r, which is already the
// /admin/api subrouter behind admin auth: the backend actions that emit
// (users, wallet, register, nft), raw emit, and the outbox's event list,
// detail and redrive.
func (b *Service) AdminRoutes(r *mux.Router) {
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
			return contract.MaxPendingWait, nil
		}
		return 0, contract.Invalidf("wait must be whole seconds from 0 to 30, not %q", s)
	}
	if n < 0 {
		return 0, contract.Invalidf("wait must be whole seconds from 0 to 30, not %q", s)
	}
	return min(time.Duration(n)*time.Second, contract.MaxPendingWait), nil
}

// longPollMargin is what a long poll's connection is held for beyond its
// wait: the read of the page and the answer.
const longPollMargin = 10 * time.Second

func (b *Service) handlePending(w http.ResponseWriter, r *http.Request) error {
	limit, err := contract.ParseLimit(r)
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
	httpjson.Write(w, http.StatusOK, contract.PendingResponse{Events: events})
	return nil
}

func (b *Service) handleAck(w http.ResponseWriter, r *http.Request) error {
	var req contract.AckRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	res, err := b.outbox.AckBy(r.Context(), req, r.Header.Get(contract.InstanceHeader))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, res)
	return nil
}

func (b *Service) handleResolveLeader(w http.ResponseWriter, r *http.Request) error {
	l, err := b.ResolveLeader(r.Context(), r.URL.Query().Get("code"))
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, l)
	return nil
}

func (b *Service) handleUserState(w http.ResponseWriter, r *http.Request) error {
	tg, err := contract.ParseTelegramID(r.URL.Query().Get("telegramId"))
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

func (b *Service) handleBind(w http.ResponseWriter, r *http.Request) error {
	var req contract.BindRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	if req.UID <= 0 || req.TelegramID == "" {
		return contract.Invalidf("uid and telegramId are required")
	}
	u, err := b.BindTelegram(r.Context(), req.UID, req.TelegramID)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, contract.BindResponse{UID: u.UID, TelegramID: *u.TelegramID})
	return nil
}

func (b *Service) handleNotification(w http.ResponseWriter, r *http.Request) error {
	var req contract.NewNotification
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

func (b *Service) handleConnectLink(w http.ResponseWriter, r *http.Request) error {
	var req contract.ConnectLinkRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	if req.UID <= 0 {
		return contract.Invalidf("uid is required")
	}
	link, err := b.MintConnectLink(r.Context(), req.UID)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, link)
	return nil
}

func (b *Service) handleRedeem(w http.ResponseWriter, r *http.Request) error {
	var req contract.RedeemRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	if req.TelegramID == "" {
		return contract.Invalidf("telegramId is required")
	}
	red, err := b.RedeemConnect(r.Context(), req.Token, req.TelegramID)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, red)
	return nil
}

func (b *Service) handleCheckAccount(w http.ResponseWriter, r *http.Request) error {
	tg, err := contract.ParseTelegramID(mux.Vars(r)["id"])
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

func parseUID(s string) (contract.UID, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, contract.Invalidf("uid %q is not a positive integer", s)
	}
	return contract.UID(n), nil
}

func parseEventID(s string) (contract.EventID, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, contract.Invalidf("event id %q is not a positive integer", s)
	}
	return contract.EventID(n), nil
}

func (b *Service) handleCreateUser(w http.ResponseWriter, r *http.Request) error {
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

func (b *Service) handleGetUser(w http.ResponseWriter, r *http.Request) error {
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
	Notifications []contract.Notification `json:"notifications"`
}

func (b *Service) handleListNotifications(w http.ResponseWriter, r *http.Request) error {
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
func actionHandler[T any](w http.ResponseWriter, r *http.Request, run func(uid contract.UID, body T) (ActionResult, error)) error {
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

func (b *Service) handleWallet(w http.ResponseWriter, r *http.Request) error {
	return actionHandler(w, r, func(uid contract.UID, body struct {
		Addr string `json:"addr"`
	}) (ActionResult, error) {
		return b.ConnectWallet(r.Context(), uid, body.Addr)
	})
}

func (b *Service) handleRegister(w http.ResponseWriter, r *http.Request) error {
	return actionHandler(w, r, func(uid contract.UID, body struct {
		LeaderUID *contract.UID `json:"leaderUid"`
	}) (ActionResult, error) {
		if body.LeaderUID != nil && *body.LeaderUID <= 0 {
			return ActionResult{}, contract.Invalidf("leaderUid must be a positive uid or null")
		}
		return b.Register(r.Context(), uid, body.LeaderUID)
	})
}

func (b *Service) handleNFT(w http.ResponseWriter, r *http.Request) error {
	return actionHandler(w, r, func(uid contract.UID, body struct {
		Level contract.NftLevel `json:"level"`
	}) (ActionResult, error) {
		return b.ActivateNFT(r.Context(), uid, body.Level)
	})
}

// EmitRequest is the body of POST /admin/api/bot/events (raw emit).
type EmitRequest struct {
	EventType  contract.EventType  `json:"eventType"`
	TelegramID contract.TelegramID `json:"telegramId,omitempty"`
	MagnetUID  contract.UID        `json:"magnetUid,omitempty"`
	Payload    json.RawMessage     `json:"payload,omitempty"`
}

// EmitResponse is the answer of a raw emit.
type EmitResponse struct {
	ID contract.EventID `json:"id"`
}

func (b *Service) handleEmit(w http.ResponseWriter, r *http.Request) error {
	var req EmitRequest
	if err := httpjson.Decode(r, &req); err != nil {
		return err
	}
	if !req.EventType.Valid() {
		return contract.Invalidf("eventType must be one of %v, not %q", contract.EventTypes, req.EventType)
	}
	if req.MagnetUID < 0 {
		return contract.Invalidf("magnetUid must be positive")
	}
	if req.MagnetUID == 0 && req.TelegramID == "" {
		return contract.Invalidf("telegramId or magnetUid is required")
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

func (b *Service) handleListEvents(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := EventFilter{State: EventState(q.Get("state")), Type: contract.EventType(q.Get("type"))}
	if s := q.Get("magnetUid"); s != "" {
		uid, err := parseUID(s)
		if err != nil {
			return err
		}
		f.MagnetUID = uid
	}
	if s := q.Get("telegramId"); s != "" {
		tg, err := contract.ParseTelegramID(s)
		if err != nil {
			return err
		}
		f.TelegramID = tg
	}
	if q.Has("limit") {
		n, err := contract.ParseLimit(r)
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
	if s := q.Get("afterId"); s != "" {
		id, err := parseEventID(s)
		if err != nil {
			return err
		}
		f.AfterID = id
	}
	f.Search = q.Get("q")
	list, err := b.outbox.ListEvents(r.Context(), f)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, EventsResponse{Events: list})
	return nil
}

func (b *Service) handleGetEvent(w http.ResponseWriter, r *http.Request) error {
	id, err := parseEventID(mux.Vars(r)["id"])
	if err != nil {
		return err
	}
	rec, err := b.outbox.GetEvent(r.Context(), id)
	if err != nil {
		return err
	}
	attempts, err := b.outbox.EventAttempts(r.Context(), id)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, struct {
		EventRecord
		// AttemptHistory is the event's attempts (attempts.go); attempts
		// counts its failed attempts since the last redrive.
		AttemptHistory []EventAttempt `json:"attemptHistory"`
	}{rec, attempts})
	return nil
}

func (b *Service) handleRedrive(w http.ResponseWriter, r *http.Request) error {
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
