package onboarding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/gorilla/mux"
	"github.com/mymmrac/telego"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"switchyard/authlimit"
	"switchyard/bot/contract"
	"switchyard/httpjson"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/telegram"
)

// Update modes of the onboarding bot (BOT_TELEGRAM_UPDATES).
const (
	UpdatesLongPoll = "longpoll"
	UpdatesWebhook  = "webhook"
)

// Constants of the consumer, named as the spec names them.
const (
	// BATCH_LIMIT is how many events one processOnce fetches.
	BATCH_LIMIT = 100
	// RETENTION_DAYS is how long the dedup ledger keeps a handled event.
	RETENTION_DAYS = 30
)

// Lease names and their time to live: the single-flight locks of the
// consumer (the spec's Redlock key) and of the Telegram updates worker,
// both held with store.RunExclusive. The sender holds a third,
// telegram.SenderLeaseName of the bot's id, with the same TTL. Whichever
// process holds one does that work for every process on the database; the
// others stand by and take over within a second of a release, or within
// LeaseTTL of the holder's death.
//
// PruneLeaseName is the daily prune's (PruneLeaseTTL): the first process
// whose midnight comes takes it and prunes, and keeps it, so that the
// others' midnights, a little later by their clocks, find it held and skip.
const (
	OutboxLeaseName  = "onboarding:outbox"
	UpdatesLeaseName = "onboarding:updates"
	LeaseTTL         = 25 * time.Second
	PruneLeaseName   = "onboarding:prune"
	PruneLeaseTTL    = time.Hour
)

var (
	metricEventsHandled = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_bot_onboarding_events_total",
		Help: "Outbox events the onboarding bot finished, by event type and outcome (handled, duplicate, retry).",
	}, []string{"event_type", "outcome"})
	metricEventLatency = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "switchyard_bot_onboarding_event_latency_seconds",
		Help:    "Time from an outbox event's emit to its handling by the onboarding bot committing.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	metricMessages = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_bot_onboarding_messages_total",
		Help: "Outgoing Telegram calls of the onboarding bot, by method and outcome (sent, retry, fallback, notified, failed).",
	}, []string{"method", "outcome"})
	metricUpdates = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_bot_onboarding_updates_total",
		Help: "Telegram updates of the onboarding bot, by kind and outcome (received, duplicate, handled, retry, failed).",
	}, []string{"kind", "outcome"})
	metricLeaderSwitches = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_bot_onboarding_leader_switches_total",
		Help: "Users who registered under a leader other than the one they arrived with.",
	})
)

// outcomeDuplicate: an outbox event handled before, acked again.
const outcomeDuplicate = "duplicate"

// surfaceBotWebhook names POST /webhooks/bot's secret check in authlimit.
const surfaceBotWebhook = "bot-webhook"

// Label values of the onboarding bot's counters, whose series exist at 0
// from New on (declareMetrics): the outcomes of an outbox event,
// the Telegram methods the sender calls and the outcomes of one call.
var (
	eventOutcomes    = []string{outcomeHandled, outcomeDuplicate, outcomeRetry}
	outgoingMethods  = []string{methodSendMessage, methodEditReplyMarkup, methodAnswerCallback}
	deliveryOutcomes = []string{outcomeSent, outcomeRetry, outcomeFallback, outcomeNotified, outcomeFailed}
)

// declareMetrics makes the series of the events-handled and messages
// counters exist at 0, so an alert on them sees 0, not "no data".
func declareMetrics() {
	for _, t := range contract.EventTypes {
		for _, o := range eventOutcomes {
			metricEventsHandled.WithLabelValues(string(t), o)
		}
	}
	for _, m := range outgoingMethods {
		for _, o := range deliveryOutcomes {
			metricMessages.WithLabelValues(m, o)
		}
	}
}

// Opts configure New. Zero values get defaults.
type Opts struct {
	// DB holds the bot's own tables (migrations 00005, 00011) and its DM
	// queue (DMQueue). Required.
	DB *store.DB
	// Logger gets the bot's lines; nil discards.
	Logger *slog.Logger

	// Backend is the client of the backend's /bot/* contract. When nil, one
	// is built from BackendURL and BackendSecret (BOT_TO_BACKEND_SECRET).
	Backend       *BackendClient
	BackendURL    string
	BackendSecret string
	// HTTPClient carries the backend calls of a client built here; nil is a
	// client without an overall timeout (every call has its own deadline).
	HTTPClient *http.Client

	// TelegramToken is BOT_TELEGRAM_TOKEN. Required: for the offline sandbox,
	// pass a fakebot token and the fake's URL as TelegramAPIURL.
	TelegramToken string
	// TelegramAPIURL is the Bot API base URL (TELEGRAM_API_URL); empty is
	// Telegram's.
	TelegramAPIURL string
	// TelegramTimeout bounds one Bot API call; 0 is telegram.DefaultRequestTimeout.
	TelegramTimeout time.Duration
	// Limits are the Telegram rate limits the sender keeps; zero fields take
	// telegram.DefaultLimits.
	Limits telegram.Limits

	// Updates is UpdatesLongPoll (default) or UpdatesWebhook (BOT_TELEGRAM_UPDATES).
	Updates string
	// WebhookSecret is BOT_TELEGRAM_WEBHOOK_SECRET, required in webhook mode:
	// POST /webhooks/bot accepts only X-Telegram-Bot-Api-Secret-Token equal to it.
	WebhookSecret string
	// WebhookURL is the public URL of POST /webhooks/bot. When set in webhook
	// mode, Run registers it with setWebhook; when empty, the operator does.
	WebhookURL string
	// AuthLimiter throttles wrong webhook secrets on POST /webhooks/bot. Pass
	// the process's one limiter; nil gets a limiter of this bot's own.
	AuthLimiter *authlimit.Limiter

	// CabinetURL is the web cabinet's address, shown in the sign-up step.
	CabinetURL string

	// PollInterval is the safety-net schedule of the consumer (the spec's
	// 10 s cron). Default 10 s.
	PollInterval time.Duration
	// LongPollWait is how long one GET /bot/events/pending waits for an
	// event. Default 10 s (well inside LeaseTTL).
	LongPollWait time.Duration
	// SenderPollInterval is how often the sender looks for DMs another
	// process recorded; DMs recorded in this process wake it at once.
	// Default queue.DefaultPollInterval.
	SenderPollInterval time.Duration
	// Instance names this process as a lease owner; default
	// store.NewOwnerID() (hostname:pid:random).
	Instance string
}

// Bot is the onboarding Telegram bot: the outbox consumer with its event
// handlers and funnel, the Telegram conversation, and the sender every
// Telegram call goes through (the queue DMQueue). It is a worker (Name, Run)
// and serves POST /webhooks/bot (Routes) and an operator view (AdminRoutes).
type Bot struct {
	db      *store.DB
	log     *slog.Logger
	backend *BackendClient
	tg      *telego.Bot
	botID   int64
	limiter *telegram.Limiter
	// dms is DMQueue; queues reads it for the operator (ListDMs).
	dms        *queue.Queue
	queues     *queue.Admin
	senderPoll time.Duration

	mode          string
	webhookSecret []byte
	authLimit     *authlimit.Limiter
	webhookURL    string
	cabinetURL    string
	pollEvery     time.Duration
	longPoll      time.Duration
	owner         string

	// flight keeps the consumer's sessions of this process one at a time
	// (the loop's and the cron's); the lease does it across processes.
	flight sync.Mutex
	// updatesWake wakes the updates worker (a webhook update was stored).
	updatesWake chan struct{}

	usernameMu sync.Mutex
	username   string

	// handled counts the handler runs of this instance whose batch committed
	// (tests compare instances).
	handled atomic.Int64
	// beforeHandle, when set (tests only), runs before an event's handler
	// inside its transaction; an error fails the event like a handler error.
	beforeHandle func(ev contract.Event) error
	// afterCommit, when set (tests only), runs after a batch committed and
	// before its ack.
	afterCommit func(processed, retry []contract.EventID)
}

// New checks opts and returns the bot; it starts nothing until Run.
// A nil DB is a wiring mistake and panics; configuration mistakes (no token,
// an unknown update mode, webhook mode without a secret, no backend) are errors.
func New(opts Opts) (*Bot, error) {
	if opts.DB == nil {
		panic("onboarding: New needs a DB")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.TelegramToken == "" {
		return nil, errors.New("bot: BOT_TELEGRAM_TOKEN is required (for the sandbox, a fake Bot API's token and URL)")
	}
	botID, ok := telegram.BotIDFromToken(opts.TelegramToken)
	if !ok {
		return nil, errors.New("bot: BOT_TELEGRAM_TOKEN is not a bot token (<id>:<secret>)")
	}
	switch opts.Updates {
	case "":
		opts.Updates = UpdatesLongPoll
	case UpdatesLongPoll, UpdatesWebhook:
	default:
		return nil, fmt.Errorf("bot: BOT_TELEGRAM_UPDATES must be %s or %s, not %q", UpdatesLongPoll, UpdatesWebhook, opts.Updates)
	}
	if opts.Updates == UpdatesWebhook && opts.WebhookSecret == "" {
		return nil, errors.New("bot: webhook updates need BOT_TELEGRAM_WEBHOOK_SECRET")
	}
	if opts.WebhookSecret != "" && !validWebhookSecret(opts.WebhookSecret) {
		return nil, errors.New("bot: BOT_TELEGRAM_WEBHOOK_SECRET must be 1 to 256 of A-Z a-z 0-9 _ -")
	}
	backend := opts.Backend
	if backend == nil {
		if opts.BackendURL == "" || opts.BackendSecret == "" {
			return nil, errors.New("bot: the onboarding bot needs the backend's URL and BOT_TO_BACKEND_SECRET")
		}
		backend = NewBackendClient(opts.BackendURL, opts.BackendSecret, opts.HTTPClient)
	}
	// telego's own log lines stay off: at debug level they carry the calls'
	// texts, which name people. Failures come back as errors and are logged here.
	var tgOpts []telegram.BotOption
	if opts.TelegramTimeout > 0 {
		tgOpts = append(tgOpts, telegram.WithTimeout(opts.TelegramTimeout))
	}
	tg, err := telegram.NewBot(opts.TelegramToken, opts.TelegramAPIURL, tgOpts...)
	if err != nil {
		return nil, err
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 10 * time.Second
	}
	if opts.LongPollWait <= 0 {
		opts.LongPollWait = 10 * time.Second
	}
	opts.LongPollWait = min(opts.LongPollWait, LeaseTTL/2)
	if opts.Instance == "" {
		opts.Instance = store.NewOwnerID()
	}
	if opts.AuthLimiter == nil {
		opts.AuthLimiter = authlimit.New(authlimit.Opts{Logger: opts.Logger})
	}
	opts.AuthLimiter.Declare(surfaceBotWebhook)
	declareMetrics()
	return &Bot{
		db:            opts.DB,
		log:           opts.Logger,
		backend:       backend,
		tg:            tg,
		botID:         botID,
		limiter:       telegram.NewLimiter(opts.Limits),
		dms:           queue.New(queue.NewOpts{DB: opts.DB, Name: DMQueue, Retry: dmRetry, Logger: opts.Logger}),
		queues:        queue.NewAdmin(queue.AdminOpts{DB: opts.DB, Logger: opts.Logger}),
		senderPoll:    opts.SenderPollInterval,
		mode:          opts.Updates,
		webhookSecret: []byte(opts.WebhookSecret),
		authLimit:     opts.AuthLimiter,
		webhookURL:    opts.WebhookURL,
		cabinetURL:    opts.CabinetURL,
		pollEvery:     opts.PollInterval,
		longPoll:      opts.LongPollWait,
		owner:         opts.Instance,
		updatesWake:   make(chan struct{}, 1),
	}, nil
}

// Name names the worker.
func (o *Bot) Name() string { return "onboarding-bot" }

// Run runs the bot until ctx ends: the consumer (long-polling
// GET /bot/events/pending under the lease onboarding:outbox, with the 10 s
// gocron schedule as the spec's cycle beside it), the daily prune at
// midnight UTC (one process of the database prunes: PruneLeaseName), the
// Telegram updates worker (long polling or webhook, under the lease
// onboarding:updates) and the sender (under the bot's sender lease). It
// returns once ctx is cancelled and the work in hand — a batch being
// handled and acked, updates being handled, calls being made — has
// finished, and the leases it held are released.
func (o *Bot) Run(ctx context.Context) error {
	clockOpts, stopClock := schedulerClock(o.db)
	defer stopClock()
	sched, err := gocron.NewScheduler(append(clockOpts, gocron.WithLocation(time.UTC))...)
	if err != nil {
		return fmt.Errorf("onboarding scheduler: %w", err)
	}
	if _, err := sched.NewJob(gocron.DurationJob(o.pollEvery),
		gocron.NewTask(func(ctx context.Context) { o.poll(ctx) }),
		gocron.WithName("onboarding-outbox-poll"),
		gocron.WithContext(ctx),
		gocron.WithSingletonMode(gocron.LimitModeReschedule),
		gocron.WithStartAt(gocron.WithStartImmediately()),
	); err != nil {
		return fmt.Errorf("schedule the outbox poll: %w", err)
	}
	if _, err := sched.NewJob(gocron.DailyJob(1, gocron.NewAtTimes(gocron.NewAtTime(0, 0, 0))),
		gocron.NewTask(o.scheduledPrune),
		gocron.WithName("onboarding-processed-prune"),
		gocron.WithContext(ctx),
		gocron.WithSingletonMode(gocron.LimitModeReschedule),
	); err != nil {
		return fmt.Errorf("schedule the prune: %w", err)
	}

	var wg sync.WaitGroup
	wg.Go(func() { o.runConsumer(ctx) })
	wg.Go(func() { o.runUpdates(ctx) })
	wg.Go(func() { o.runSender(ctx) })
	sched.Start()
	o.log.Info("onboarding bot started", slog.String("updates", o.mode), slog.Int64("bot_id", o.botID))

	<-ctx.Done()
	shutdownErr := sched.Shutdown() // waits for a running poll or prune
	wg.Wait()
	o.log.Info("onboarding bot stopped")
	if shutdownErr != nil {
		return fmt.Errorf("onboarding scheduler: %w", shutdownErr)
	}
	return nil
}

// wake does a non-blocking send on a wake-up channel of capacity one.
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// workContext is the context in-flight work finishes under once ctx is
// cancelled: not cancelled with it, but bounded.
func workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// AdminRoutes registers the onboarding bot's operator routes on r, which is
// already the /admin/api subrouter behind admin auth: the funnels (with the
// users who left for another leader), one funnel with its history, and the
// DMs to one chat (their retries, dead letters and redrive are DMQueue's, on
// the queues' routes).
func (o *Bot) AdminRoutes(r *mux.Router) {
	r.Handle("/bot/funnel", handler(o.handleListFunnels)).Methods(http.MethodGet)
	r.Handle("/bot/funnel/{telegramId}", handler(o.handleGetFunnel)).Methods(http.MethodGet)
	r.Handle("/bot/dms", handler(o.handleListDMs)).Methods(http.MethodGet)
	r.Handle("/bot/dms/{id}/redrive", handler(o.handleRedriveDM)).Methods(http.MethodPost)
}

// handler adapts a handler that returns a domain error to httpjson.
func handler(f func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return httpjson.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		return contract.HTTPError(f(w, r))
	})
}

// FunnelsResponse is the body of GET /admin/api/bot/funnel.
type FunnelsResponse struct {
	Funnels []Funnel `json:"funnels"`
}

func (o *Bot) handleListFunnels(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := FunnelFilter{LeftLeader: q.Get("leftLeader") == "true", Search: q.Get("q"), Before: q.Get("before"), After: q.Get("after")}
	if s := q.Get("stage"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > int(StageNftActivated) {
			return contract.Invalidf("stage must be 1 to 9, not %q", s)
		}
		f.Stage = Stage(n)
	}
	if q.Has("limit") {
		n, err := contract.ParseLimit(r)
		if err != nil {
			return err
		}
		f.Limit = n
	}
	list, err := o.ListFunnels(r.Context(), f)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, FunnelsResponse{Funnels: list})
	return nil
}

// FunnelResponse is the body of GET /admin/api/bot/funnel/{telegramId}.
type FunnelResponse struct {
	Funnel  Funnel         `json:"funnel"`
	History []FunnelChange `json:"history"`
}

func (o *Bot) handleGetFunnel(w http.ResponseWriter, r *http.Request) error {
	tg, err := contract.ParseTelegramID(mux.Vars(r)["telegramId"])
	if err != nil {
		return err
	}
	f, hist, err := o.GetFunnel(r.Context(), tg)
	if errors.Is(err, ErrFunnelNotFound) {
		return httpjson.Errorf(http.StatusNotFound, "funnel_not_found", "%s", ErrFunnelNotFound)
	}
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, FunnelResponse{Funnel: f, History: hist})
	return nil
}

// DMsResponse is the body of GET /admin/api/bot/dms?chatId=&status=.
type DMsResponse struct {
	DMs []DM `json:"dms"`
}

// RedriveResponse is the body of POST /admin/api/bot/dms/{id}/redrive.
type RedriveResponse struct {
	Redriven int `json:"redriven"`
}

func (o *Bot) handleRedriveDM(w http.ResponseWriter, r *http.Request) error {
	err := o.RedriveDM(r.Context(), mux.Vars(r)["id"])
	if errors.Is(err, queue.ErrNotFound) {
		return httpjson.Errorf(http.StatusNotFound, "not_found", "%s", err)
	}
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, RedriveResponse{Redriven: 1})
	return nil
}

func (o *Bot) handleListDMs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	var f DMFilter
	if q.Get("chatId") != "" {
		tg, err := contract.ParseTelegramID(q.Get("chatId"))
		if err != nil {
			return err
		}
		f.ChatID = tg
	}
	f.Status = DMStatus(q.Get("status"))
	if q.Has("limit") {
		var err error
		if f.Limit, err = contract.ParseLimit(r); err != nil {
			return err
		}
	}
	list, err := o.ListDMs(r.Context(), f)
	if err != nil {
		return err
	}
	if list == nil {
		list = []DM{}
	}
	httpjson.Write(w, http.StatusOK, DMsResponse{DMs: list})
	return nil
}
