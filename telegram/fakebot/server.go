package fakebot

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/httpjson"
	"switchyard/telegram"
)

// Opts configures a Server. The zero value is a working fake.
type Opts struct {
	// BasePath is where the fake is mounted, e.g. "/sandbox/telegram"; bots
	// then use telego.WithAPIServer(origin+BasePath). Empty for httptest.
	BasePath string
	// Now is the fake's clock for message dates and call times; time.Now
	// when nil.
	Now func() time.Time
	// Log receives the fake's own lines; discarded when nil.
	Log *slog.Logger
	// HTTPClient posts webhook deliveries; a client with a 10 s timeout
	// when nil.
	HTTPClient *http.Client
	// WebhookRetryMin and WebhookRetryMax bound the doubling wait between
	// failed webhook deliveries (100 ms and 5 s when zero).
	WebhookRetryMin, WebhookRetryMax time.Duration
	// Limits, when set, makes sendMessage answer 429 with retry_after once a
	// chat, a group or the bot goes over them (see RateLimited); a zero field
	// takes its value from TelegramLimits, so &telegram.Limits{} is Telegram
	// as the fake models it. Limits are checked after the request is
	// validated: a send that is wrong gets its 400 or 403, never a 429. Nil
	// enforces no limits.
	Limits *telegram.Limits
	// LimitSlack forgives clients' timing jitter when enforcing Limits: a
	// send that would be allowed within LimitSlack is accepted. 100 ms when
	// zero; negative means none.
	LimitSlack time.Duration
	// Seed seeds the random source of probabilistic faults.
	Seed uint64
	// FirstUpdateID is the update_id of each bot's first update (1 when
	// zero). A fake that restarts in front of a bot that remembers its
	// offset (the sandbox across process restarts) must start above it, as
	// Telegram's ids only grow: see UpdateIDFromClock.
	FirstUpdateID int
	// MaxCalls is how many calls the log keeps (oldest dropped first);
	// 10,000 when zero.
	MaxCalls int
	// MaxMessagesPerChat is how many messages a chat keeps in the read
	// model; 1,000 when zero.
	MaxMessagesPerChat int
	// Tokens, when set, are the only tokens the fake accepts, one per bot
	// id: any other token (Token(id) included) answers 401 Unauthorized,
	// and a Bot handle on it fails with ErrBadToken. When empty, the fake
	// accepts Token(id) for every id, which is what tests want; a fake that
	// others can reach (the app's sandbox) must list random tokens here.
	Tokens []string
	// CheckWebhookFunc, when set, vets the URL of every setWebhook call of
	// the bot botID: an error refuses the call with 400 "Bad Request: bad
	// webhook: <error>", so that a fake others can reach delivers updates
	// only where its owner intends. It runs with the fake's lock held and
	// must not call the Server.
	CheckWebhookFunc func(botID int64, url string) error
	// RefuseCrossOrigin makes the fake answer 403 Forbidden to every
	// request a browser marks as sent from another origin (Sec-Fetch-Site,
	// or an Origin that is not the Host), whatever its method: the Bot API
	// takes a GET with its parameters in the query string as readily as a
	// POST, so no method is safe. Programs such as telego send neither
	// header and pass. Set it when the fake is mounted where browsers go.
	RefuseCrossOrigin bool
}

// Server is a fake Telegram Bot API. It serves /bot<TOKEN>/<method> for any
// number of bots, each with the token Token(id) or, when Opts.Tokens is set,
// with only the tokens listed there (any other token answers 401
// Unauthorized, as Telegram does), and lets tests and the sandbox act as
// Telegram users. It is safe for concurrent use.
type Server struct {
	opts    Opts
	log     *slog.Logger
	now     func() time.Time
	limiter *telegram.Limiter // nil when limits are not enforced
	slack   time.Duration
	tokens  map[int64]string            // Opts.Tokens by bot id; nil: Token(id) for every id
	csrf    *http.CrossOriginProtection // nil unless Opts.RefuseCrossOrigin

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	closed      bool
	bots        map[string]*botState // by token
	users       map[int64]telego.User
	calls       []Call
	callSeq     int
	faults      []*faultState
	rng         *rand.Rand
	rateLimited int
	changed     chan struct{} // closed and replaced on every change
	seq         int           // business connection and callback query ids
}

// New returns a Server. Call Close when done to stop webhook deliveries and
// release waiting long polls.
func New(opts Opts) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if opts.WebhookRetryMin <= 0 {
		opts.WebhookRetryMin = 100 * time.Millisecond
	}
	if opts.WebhookRetryMax < opts.WebhookRetryMin {
		opts.WebhookRetryMax = max(5*time.Second, opts.WebhookRetryMin)
	}
	if opts.MaxCalls <= 0 {
		opts.MaxCalls = 10_000
	}
	if opts.MaxMessagesPerChat <= 0 {
		opts.MaxMessagesPerChat = 1_000
	}
	opts.BasePath = strings.TrimRight(opts.BasePath, "/")
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:    opts,
		log:     log,
		now:     opts.Now,
		bots:    make(map[string]*botState),
		users:   make(map[int64]telego.User),
		rng:     rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x5eed)),
		changed: make(chan struct{}),
	}
	if len(opts.Tokens) > 0 {
		s.tokens = make(map[int64]string, len(opts.Tokens))
		for _, token := range opts.Tokens {
			id, ok := telegram.BotIDFromToken(token)
			if !ok {
				panic("fakebot: malformed token in Opts.Tokens")
			}
			if _, dup := s.tokens[id]; dup {
				panic(fmt.Sprintf("fakebot: two tokens for bot %d in Opts.Tokens", id))
			}
			s.tokens[id] = token
		}
	}
	if opts.RefuseCrossOrigin {
		s.csrf = http.NewCrossOriginProtection()
	}
	if opts.Limits != nil {
		s.limiter = telegram.NewLimiter(fakeLimits(*opts.Limits))
		s.slack = opts.LimitSlack
		if s.slack == 0 {
			s.slack = 100 * time.Millisecond
		}
		if s.slack < 0 {
			s.slack = 0
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

// Close stops webhook deliveries, answers waiting long polls and waits for
// the fake's goroutines to end. The server keeps answering calls after it.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for _, b := range s.bots {
		b.stopWebhook()
	}
	s.signal()
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// UpdateIDFromClock is a FirstUpdateID that grows with the wall clock (in
// milliseconds), so a fake started later numbers its updates above every id an
// earlier one used, unless that one made more than a thousand updates a second.
func UpdateIDFromClock() int { return int(time.Now().UnixMilli()) }

// Token returns a well-formed, deterministic bot token for botID, accepted
// by telego.NewBot, and by a fake constructed without Opts.Tokens. Anyone can
// compute it: it is for tests, never for a fake others can reach.
func Token(botID int64) string {
	sum := sha256.Sum256([]byte("fakebot:" + strconv.FormatInt(botID, 10)))
	return strconv.FormatInt(botID, 10) + ":" + hex.EncodeToString(sum[:])[:35]
}

// accepts reports whether token is botID's token on this fake, comparing in
// constant time.
func (s *Server) accepts(botID int64, token string) bool {
	want, ok := Token(botID), true
	if s.tokens != nil {
		want, ok = s.tokens[botID]
	}
	return ok && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

// Revoke makes every later call with token answer 401 Unauthorized, like a
// token revoked with @BotFather.
func (s *Server) Revoke(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.bot(token); b != nil {
		b.revoked = true
	}
}

// RateLimited is how many 429s the fake answered because a client went over
// Opts.Limits (injected FaultTooManyRequests answers are not counted).
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateLimited
}

// apiError is a Bot API error answer.
type apiError struct {
	code        int
	description string
	retryAfter  int
}

func badRequest(description string) *apiError {
	return &apiError{code: http.StatusBadRequest, description: "Bad Request: " + description}
}

func forbidden(description string) *apiError {
	return &apiError{code: http.StatusForbidden, description: "Forbidden: " + description}
}

func tooManyRequests(retryAfter int) *apiError {
	return &apiError{
		code:        http.StatusTooManyRequests,
		description: "Too Many Requests: retry after " + strconv.Itoa(retryAfter),
		retryAfter:  retryAfter,
	}
}

var (
	errNotFound     = &apiError{code: http.StatusNotFound, description: "Not Found"}
	errUnauthorized = &apiError{code: http.StatusUnauthorized, description: "Unauthorized"}
	errInternal     = &apiError{code: http.StatusInternalServerError, description: "Internal Server Error"}
)

// answer is what a method handler returns: a result, or an error.
type answer struct {
	result      any
	description string // optional, next to a result (setWebhook's "Webhook was set")
	err         *apiError
}

// ServeHTTP answers Bot API calls at BasePath/bot<TOKEN>/<method>.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.csrf != nil {
		// Check passes every safe method; ask it as if this were a POST.
		asPost := r.WithContext(r.Context())
		asPost.Method = http.MethodPost
		if s.csrf.Check(asPost) != nil {
			writeAnswer(w, answer{err: forbidden("cross-origin request refused")})
			return
		}
	}
	rest, ok := strings.CutPrefix(r.URL.Path, s.opts.BasePath+"/bot")
	if !ok {
		writeAnswer(w, answer{err: errNotFound})
		return
	}
	token, methodName, ok := strings.Cut(rest, "/")
	botID, validToken := telegram.BotIDFromToken(token)
	if !ok || !validToken || methodName == "" || strings.Contains(methodName, "/") {
		writeAnswer(w, answer{err: errNotFound})
		return
	}
	if !s.accepts(botID, token) {
		// A wrong secret part is a wrong token, as at Telegram: a client
		// configured with a typo fails loudly instead of talking to a
		// phantom bot of its own.
		writeAnswer(w, answer{err: errUnauthorized})
		return
	}
	p, err := readParams(r)
	if err != nil {
		s.finish(w, token, botID, methodName, p, answer{err: badRequest(err.Error())}, "")
		return
	}
	m, known := methods[strings.ToLower(methodName)]
	if !known {
		// Telegram's own answer to a method it does not have.
		s.finish(w, token, botID, methodName, p, answer{err: errNotFound}, "")
		return
	}

	s.mu.Lock()
	b := s.bot(token)
	if b.revoked {
		s.mu.Unlock()
		s.finish(w, token, botID, m.name, p, answer{err: errUnauthorized}, "")
		return
	}
	f := s.pickFault(token, m.name, p)
	s.mu.Unlock()

	if f != nil {
		if f.Delay > 0 {
			httpjson.HoldOpen(w, f.Delay+answerMargin)
		}
		if f.Delay > 0 && !s.sleep(r.Context(), f.Delay) {
			s.finish(w, token, botID, m.name, p, answer{err: &apiError{description: "client went away"}}, f.Kind)
			return
		}
		switch f.Kind {
		case FaultBlocked:
			s.finish(w, token, botID, m.name, p, answer{err: forbidden("bot was blocked by the user")}, f.Kind)
			return
		case FaultTooManyRequests:
			s.finish(w, token, botID, m.name, p, answer{err: tooManyRequests(ceilSeconds(f.RetryAfter))}, f.Kind)
			return
		case FaultServerError:
			s.finish(w, token, botID, m.name, p, answer{err: errInternal}, f.Kind)
			return
		case FaultDisconnect:
			s.record(token, botID, m.name, p, answer{err: &apiError{description: "connection closed by fault"}}, f.Kind)
			disconnect(w)
			return
		}
	}

	var ans answer
	if m.name == "getUpdates" {
		// The poll may outlast the server's write timeout (the sandbox is
		// mounted in Switchyard's own server).
		if wait := pollWait(p); wait > 0 {
			httpjson.HoldOpen(w, wait+answerMargin)
		}
		ans = s.getUpdates(r.Context(), b, p)
	} else {
		ans = s.call(m, b, p)
	}
	s.finish(w, token, botID, m.name, p, ans, faultKindOf(f))
}

// call runs a method with the lock held, releasing it even if the method
// panics (net/http recovers the request; the fake goes on answering).
func (s *Server) call(m method, b *botState, p params) answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m.fn(s, b, p).marshaled()
}

func faultKindOf(f *Fault) FaultKind {
	if f == nil {
		return ""
	}
	return f.Kind
}

// finish records the call and writes its answer.
func (s *Server) finish(w http.ResponseWriter, token string, botID int64, method string, p params, ans answer, fault FaultKind) {
	body := s.record(token, botID, method, p, ans, fault)
	if ans.err != nil && ans.err.code == 0 {
		return // the client went away; nobody reads an answer
	}
	w.Header().Set("Content-Type", "application/json")
	status := http.StatusOK
	if ans.err != nil {
		status = ans.err.code
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeAnswer writes an answer that is not recorded (no bot to record it for).
func writeAnswer(w http.ResponseWriter, ans answer) {
	body, _ := encodeAnswer(ans)
	w.Header().Set("Content-Type", "application/json")
	status := http.StatusOK
	if ans.err != nil {
		status = ans.err.code
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

type okBody struct {
	Ok          bool   `json:"ok"`
	Result      any    `json:"result"`
	Description string `json:"description,omitempty"`
}

type errorBody struct {
	Ok          bool        `json:"ok"`
	ErrorCode   int         `json:"error_code"`
	Description string      `json:"description"`
	Parameters  *parameters `json:"parameters,omitempty"`
}

type parameters struct {
	RetryAfter int `json:"retry_after,omitempty"`
}

// encodeAnswer renders the Bot API's JSON shapes and returns the body and the
// result alone.
func encodeAnswer(ans answer) (body, result []byte) {
	if ans.err != nil {
		eb := errorBody{ErrorCode: ans.err.code, Description: ans.err.description}
		if ans.err.retryAfter > 0 {
			eb.Parameters = &parameters{RetryAfter: ans.err.retryAfter}
		}
		body, _ = json.Marshal(eb)
		return body, nil
	}
	result, err := json.Marshal(ans.result)
	if err != nil {
		// A result the fake built itself always marshals; say so loudly if not.
		panic(fmt.Sprintf("fakebot: marshal result: %v", err))
	}
	body, _ = json.Marshal(okBody{Ok: true, Result: json.RawMessage(result), Description: ans.description})
	return body, result
}

// sleep waits d, or until the client goes away (false) or the server closes.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return true
	case <-ctx.Done():
		return false
	}
}

// disconnect closes the client's connection without an answer: a network
// error on the client's side.
func disconnect(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// params are a call's parameters as strings, the way a form carries them;
// JSON values other than strings keep their JSON text (reply_markup).
type params map[string]string

func (p params) int64(key string) (int64, bool, *apiError) {
	v, ok := p[key]
	if !ok || v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, true, badRequest(fmt.Sprintf("invalid %s specified", key))
	}
	return n, true, nil
}

func (p params) bool(key string) bool {
	v, _ := strconv.ParseBool(p[key])
	return v
}

// readParams merges the query string and a JSON, urlencoded or multipart
// body, as Telegram accepts all of them.
func readParams(r *http.Request) (params, error) {
	p := params{}
	for k, vs := range r.URL.Query() {
		if len(vs) > 0 {
			p[k] = vs[0]
		}
	}
	if r.Body == nil || r.Method == http.MethodGet {
		return p, nil
	}
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mediaType {
	case "application/json":
		raw, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
		if err != nil {
			return p, fmt.Errorf("can't read request body: %w", err)
		}
		if len(strings.TrimSpace(string(raw))) == 0 {
			return p, nil
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return p, fmt.Errorf("can't parse JSON request body: %w", err)
		}
		for k, v := range fields {
			text := strings.TrimSpace(string(v))
			switch {
			case text == "null":
			case strings.HasPrefix(text, `"`):
				var s string
				if err := json.Unmarshal(v, &s); err != nil {
					return p, fmt.Errorf("can't parse parameter %s: %w", k, err)
				}
				p[k] = s
			default:
				p[k] = text
			}
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(10 << 20); err != nil {
			return p, fmt.Errorf("can't parse multipart body: %w", err)
		}
		for k, vs := range r.MultipartForm.Value {
			if len(vs) > 0 {
				p[k] = vs[0]
			}
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return p, fmt.Errorf("can't parse form body: %w", err)
		}
		for k, vs := range r.PostForm {
			if len(vs) > 0 {
				p[k] = vs[0]
			}
		}
	}
	return p, nil
}

// validSecret reports whether a webhook secret token uses only the
// characters Telegram allows (A-Z, a-z, 0-9, _ and -), 1 to 256 of them.
func validSecret(secret string) bool {
	if len(secret) < 1 || len(secret) > 256 {
		return false
	}
	for _, c := range secret {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validWebhookURL accepts absolute http and https URLs (Telegram insists on
// https; the fake lets tests use httptest's http).
func validWebhookURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
}

func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 1
	}
	return int((d + time.Second - 1) / time.Second)
}

// signal wakes everything waiting for a change; call with s.mu held.
func (s *Server) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}
