package omni

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/mymmrac/telego"

	"switchyard/authlimit"
	"switchyard/httpjson"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/telegram"
)

// WebhookPath is where omni_inbound takes Telegram's webhook.
const WebhookPath = "/webhooks/telegram"

// WebhookSecretHeader carries the webhook's secret token.
const WebhookSecretHeader = "X-Telegram-Bot-Api-Secret-Token"

// DefaultMaxUpdateBytes caps a webhook body; Telegram's updates are far smaller.
const DefaultMaxUpdateBytes = 1 << 20

// InboundOpts configure NewInbound.
type InboundOpts struct {
	DB *store.DB
	// Token is the business-inbox bot's token (OMNI_TELEGRAM_TOKEN); only its
	// bot id is used here, for the idempotency keys.
	Token string
	// WebhookSecret is the secret Telegram sends in
	// X-Telegram-Bot-Api-Secret-Token (OMNI_WEBHOOK_SECRET). Required.
	WebhookSecret string
	// MaxUpdateBytes caps a body (DefaultMaxUpdateBytes when zero; 413 beyond).
	MaxUpdateBytes int64
	// Logger gets refused and failed requests; nil discards.
	Logger *slog.Logger
	// AuthLimiter throttles wrong webhook secrets. Pass the process's one
	// limiter, so every surface counts a client's failures together; nil
	// gets a limiter of this role's own.
	AuthLimiter *authlimit.Limiter
}

// Inbound is the omni_inbound role: it authenticates Telegram's webhook,
// normalises each update into the envelope v1 and enqueues it on
// receiver.flow under its idempotency key. It holds no chat logic.
type Inbound struct {
	db      *store.DB
	log     *slog.Logger
	botID   int64
	secret  string
	hashed  [sha256.Size]byte
	limiter *authlimit.Limiter
	maxBody int64
	flow    *queue.Queue
}

// NewInbound returns the inbound role. A token without a bot id or an empty
// secret is a wiring mistake and panics.
func NewInbound(opts InboundOpts) *Inbound {
	if opts.DB == nil {
		panic("omni: NewInbound needs a DB")
	}
	botID, ok := telegram.BotIDFromToken(opts.Token)
	if !ok {
		panic("omni: NewInbound needs a bot token of the form <bot id>:<secret>")
	}
	if opts.WebhookSecret == "" {
		panic("omni: NewInbound needs a webhook secret")
	}
	if opts.MaxUpdateBytes <= 0 {
		opts.MaxUpdateBytes = DefaultMaxUpdateBytes
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.AuthLimiter == nil {
		opts.AuthLimiter = authlimit.New(authlimit.Opts{Logger: opts.Logger})
	}
	opts.AuthLimiter.Declare(surfaceWebhook)
	for _, o := range webhookOutcomes {
		metricWebhookUpdates.WithLabelValues(o)
	}
	return &Inbound{
		db:      opts.DB,
		log:     opts.Logger.With(slog.String("role", "inbound")),
		botID:   botID,
		secret:  opts.WebhookSecret,
		hashed:  sha256.Sum256([]byte(opts.WebhookSecret)),
		limiter: opts.AuthLimiter,
		maxBody: opts.MaxUpdateBytes,
		flow:    queue.New(queue.NewOpts{DB: opts.DB, Name: QueueReceiverFlow, Logger: opts.Logger, Retry: queue.RetryPolicy{MaxAttempts: flowAttempts}}),
	}
}

// Routes registers POST /webhooks/telegram on the root router.
func (in *Inbound) Routes(r *mux.Router) {
	r.Handle(WebhookPath, httpjson.HandlerFunc(in.webhook)).Methods(http.MethodPost)
}

// webhook answers 200 only once the envelope is committed on receiver.flow
// (or was already: a duplicate delivery), 401 to a wrong or missing secret,
// 429 to a client throttled for wrong secrets (authlimit), 415 to a body not
// declared application/json, 413 to a body over the cap, 400 to a body that
// is not a UTF-8 JSON object with an integer update_id, and 503 when the
// enqueue failed, so that Telegram delivers the update again. Every other
// body is an update and is stored, whatever its type and content: a 4xx
// would make Telegram drop it for good.
func (in *Inbound) webhook(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	secret := r.Header.Get(WebhookSecretHeader)
	v, wait := authlimit.Refused, time.Duration(0)
	if secret != "" {
		v, wait = in.limiter.Check(r, surfaceWebhook, func() bool {
			// Hashing first makes the comparison's time independent of the length too.
			given := sha256.Sum256([]byte(secret))
			return subtle.ConstantTimeCompare(given[:], in.hashed[:]) == 1
		})
	}
	switch v {
	case authlimit.Throttled:
		metricWebhookUpdates.WithLabelValues(webhookThrottled).Inc()
		return httpjson.TooManyAttempts(w, wait)
	case authlimit.Refused:
		metricWebhookUpdates.WithLabelValues(webhookUnauthorized).Inc()
		return httpjson.Unauthorized()
	}
	if err := httpjson.RequireJSON(r); err != nil {
		// Telegram declares every update application/json.
		metricWebhookUpdates.WithLabelValues(webhookBadRequest).Inc()
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, in.maxBody))
	if err != nil {
		var maxed *http.MaxBytesError
		if errors.As(err, &maxed) {
			metricWebhookUpdates.WithLabelValues(webhookBadRequest).Inc()
			return err
		}
		return httpjson.BadRequest("could not read the body: %v", err)
	}
	env, err := NormalizeTelegram(body, in.botID, in.db.Now())
	if err != nil {
		metricWebhookUpdates.WithLabelValues(webhookBadRequest).Inc()
		return httpjson.BadRequest("%v", err)
	}
	res, err := in.enqueue(r.Context(), env)
	if err != nil && r.Context().Err() != nil {
		// Telegram hung up before the answer: nothing to log; it delivers again.
		metricWebhookUpdates.WithLabelValues(webhookClientGone).Inc()
		return r.Context().Err()
	}
	if err != nil {
		metricWebhookUpdates.WithLabelValues(webhookUnavailable).Inc()
		in.log.Error("webhook update not stored; Telegram will deliver it again",
			slog.String("event_id", env.IdempotencyKey), slog.String("outcome", "unavailable"), slog.Any("err", err))
		return httpjson.Unavailable("the update could not be stored; deliver it again")
	}
	outcome := webhookAccepted
	if res.Duplicate {
		outcome = webhookDuplicate
	}
	metricWebhookUpdates.WithLabelValues(outcome).Inc()
	metricWebhookDuration.Observe(time.Since(start).Seconds())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, `{"ok":true}`)
	return nil
}

// enqueue puts env on receiver.flow in its own small transaction, which the
// store commits together with concurrent webhooks' on SQLite (group commit).
// The message carries the enqueue's span (omni.inbound.enqueue), so the
// chat role's work on it continues the webhook's trace.
func (in *Inbound) enqueue(ctx context.Context, env *Envelope) (res queue.SendResult, err error) {
	ctx, span := enqueueSpan(ctx, env)
	defer func() { endEnqueue(span, res, err) }()
	raw, err := env.Encode()
	if err != nil {
		return queue.SendResult{}, err
	}
	return in.flow.Send(ctx, queue.Message{Body: raw, Key: env.IdempotencyKey, OrderKey: OrderingKey(env)})
}

// AllowedUpdates are the update types the chat role uses, for setWebhook.
// Telegram sends nothing else, except what an operator asks for later; an
// update of another type is still stored, as "unknown", and ignored.
var AllowedUpdates = []string{
	"message", "edited_message", "business_connection", "business_message",
	"edited_business_message", "deleted_business_messages", "my_chat_member", "callback_query",
}

// SetWebhook asks Telegram (through bot) to deliver the bot's updates to
// publicURL + WebhookPath with the webhook secret. Telegram accepts only
// A-Z, a-z, 0-9, _ and - in a secret, as generated (hex) secrets are.
func (in *Inbound) SetWebhook(ctx context.Context, bot *telego.Bot, publicURL string) error {
	err := bot.SetWebhook(ctx, &telego.SetWebhookParams{
		URL:            strings.TrimRight(publicURL, "/") + WebhookPath,
		SecretToken:    in.secret,
		AllowedUpdates: AllowedUpdates,
	})
	if err != nil {
		return fmt.Errorf("omni: set webhook: %w", err)
	}
	return nil
}

// RegisterOpts configure RegisterWebhook.
type RegisterOpts struct {
	// Bot is the business-inbox bot's Bot API client.
	Bot *telego.Bot
	// BaseURL is where Telegram reaches the inbound role: the webhook is
	// BaseURL + WebhookPath. Behind a load balancer it is the public URL,
	// the same for every instance.
	BaseURL string
	// FirstRetry is the wait after the first failed attempt (1 s when
	// zero); each next wait doubles, up to MaxRetry (1 min when zero).
	FirstRetry, MaxRetry time.Duration
	// OwnAPI says the Bot API is this process's own (the sandbox's fake,
	// in its memory): the webhook is set on it at every start, by this
	// process alone. Otherwise the Bot API — Telegram, or a server at
	// TELEGRAM_API_URL — is every instance's, and the webhook is the
	// fleet's: one instance at a time registers it (the lease
	// WebhookLeaseName), and only when it is not set as wanted already.
	OwnAPI bool
	// LeaseTTL is the lease's time to live (DefaultWebhookLeaseTTL when
	// zero): how long the others wait for a holder that died.
	LeaseTTL time.Duration
}

// DefaultWebhookLeaseTTL is RegisterOpts.LeaseTTL's default.
const DefaultWebhookLeaseTTL = 20 * time.Second

// WebhookLeaseName is the lease under which one instance at a time
// registers the webhook of the bot botID.
func WebhookLeaseName(botID int64) string { return "omni:webhook:bot" + strconv.FormatInt(botID, 10) }

// webhookSettingKey is the store setting that records the webhook the
// fleet last registered for the bot (webhookFingerprint).
func webhookSettingKey(botID int64) string { return "omni.webhook.bot" + strconv.FormatInt(botID, 10) }

// webhookFingerprint names one registration: its URL, secret and update
// types. The secret enters through SHA-256 only, so the record does not
// hold it.
func webhookFingerprint(url, secret string, allowed []string) string {
	h := sha256.New()
	for _, part := range append([]string{"switchyard omni webhook", url, secret}, allowed...) {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// RegisterWebhook makes Telegram deliver the bot's updates to
// BaseURL + WebhookPath (SetWebhook), and returns nil once it does, or ctx's
// error when ctx ends first. While Telegram cannot be reached or refuses it
// (a 5xx, a network blip, a public URL it does not take), it tries again
// with a doubling wait, logging each failed attempt as a warning: until the
// webhook is set, no chat update arrives.
//
// Several instances that start at once set the webhook once between them
// (unless OwnAPI): each takes the lease WebhookLeaseName in turn; the
// first sets the webhook and records its fingerprint (URL, secret's hash,
// update types) in the store; the next ones find the record matching
// theirs and Telegram's getWebhookInfo showing the URL and update types,
// and return without setting it again. A changed URL, secret or update
// list — or a webhook someone changed or deleted outside — is set again by
// the first instance that sees it. A holder that dies mid-way is taken
// over within the lease's TTL; one that stops gracefully, within a second.
func (in *Inbound) RegisterWebhook(ctx context.Context, opts RegisterOpts) error {
	if opts.FirstRetry <= 0 {
		opts.FirstRetry = time.Second
	}
	if opts.MaxRetry <= 0 {
		opts.MaxRetry = time.Minute
	}
	opts.MaxRetry = max(opts.MaxRetry, opts.FirstRetry)
	if opts.OwnAPI {
		return in.setWebhookRetrying(ctx, opts)
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultWebhookLeaseTTL
	}
	lease := store.LeaseOpts{
		Name:   WebhookLeaseName(in.botID),
		TTL:    opts.LeaseTTL,
		Logger: in.log.With(slog.Int64("bot_id", in.botID)),
	}
	registered := false
	err := in.db.RunExclusive(ctx, lease, func(held context.Context, _ store.Lease) error {
		err := in.ensureWebhook(held, opts)
		registered = err == nil
		return err
	})
	if err == nil && !registered {
		return ctx.Err() // ended while another instance held the lease
	}
	return err
}

// ensureWebhook is RegisterWebhook's work under the lease: it sets the
// webhook unless the record and Telegram both say it is set as wanted.
func (in *Inbound) ensureWebhook(ctx context.Context, opts RegisterOpts) error {
	url := strings.TrimRight(opts.BaseURL, "/") + WebhookPath
	want := webhookFingerprint(url, in.secret, AllowedUpdates)
	key := webhookSettingKey(in.botID)
	if rec, ok, err := in.db.Setting(ctx, key); err == nil && ok && rec == want {
		info, err := opts.Bot.GetWebhookInfo(ctx)
		if err == nil && info.URL == url && sameUpdates(info.AllowedUpdates, AllowedUpdates) {
			in.log.Info("telegram webhook already set as wanted; not set again", slog.String("url", url))
			return nil
		}
	}
	if err := in.setWebhookRetrying(ctx, opts); err != nil {
		return err
	}
	// The record spares the other instances a setWebhook. One that failed
	// to be written only costs them one more.
	if err := in.db.SetSetting(ctx, key, want); err != nil && ctx.Err() == nil {
		in.log.Warn("telegram webhook set, but not recorded; the next instance sets it again", slog.Any("err", err))
	}
	return nil
}

// sameUpdates reports whether the update types a and b are the same set.
func sameUpdates(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// setWebhookRetrying sets the webhook, trying again with a doubling wait
// until it is set (nil) or ctx ends (ctx's error).
func (in *Inbound) setWebhookRetrying(ctx context.Context, opts RegisterOpts) error {
	for wait := opts.FirstRetry; ; wait = min(2*wait, opts.MaxRetry) {
		err := in.SetWebhook(ctx, opts.Bot, opts.BaseURL)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		in.log.Warn("telegram webhook not set; retrying (check the public URL if this persists)",
			slog.Duration("retry_in", wait), slog.Any("err", err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}
