package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"switchyard/authlimit"
	"switchyard/bot/backend"
	"switchyard/bot/onboarding"
	"switchyard/omni"
	"switchyard/openapi"
	"switchyard/queue"
	"switchyard/referral"
	"switchyard/retention"
	"switchyard/rollup"
	"switchyard/store"
	"switchyard/telegram"
	tgsandbox "switchyard/telegram/sandbox"
	"switchyard/telemetry"
	"switchyard/web"
)

// app is a wired process: its HTTP handler, the workers its roles run, and
// what must happen when the HTTP server starts shutting down.
type app struct {
	handler    http.Handler
	workers    []worker
	onShutdown []func()
	closers    []func()
	// sandbox is the built-in Bot API of the bots without a token, nil when
	// every bot has one.
	sandbox *sandbox
}

// workerFunc is a worker made of a function.
type workerFunc struct {
	name string
	run  func(ctx context.Context) error
}

func (w workerFunc) Name() string                  { return w.name }
func (w workerFunc) Run(ctx context.Context) error { return w.run(ctx) }

func (a *app) close() {
	for _, c := range a.closers {
		c()
	}
}

// urls are this process's own address (for calls to itself) and the address
// people and Telegram reach it at.
type urls struct{ self, public string }

// wiring is what every subsystem is built from.
type wiring struct {
	cfg *config
	db  *store.DB
	sec secrets
	log *slog.Logger
	u   urls
	// authLimit is the one throttle of failed authentication for every
	// surface that checks a secret, so a client's failures count together
	// wherever it guesses.
	authLimit *authlimit.Limiter
	// traces are the recent spans kept for the console, nil when none are.
	traces *telemetry.Ring
}

// part is what one subsystem adds to the process: routes on the root router
// (they bring their own authentication), routes on the admin API (behind the
// admin token), workers, what runs when the HTTP server starts shutting
// down, and what runs when the process ends; publicAPI and adminAPI describe
// its routes in OpenAPI.
type part struct {
	public, admin       []web.RoutesFunc
	publicAPI, adminAPI []openapi.Part
	workers             []worker
	onShutdown          []func()
	closers             []func()
}

// wire builds the subsystems a serving process runs, one function each, and
// the console that serves their routes.
func wire(ctx context.Context, cfg *config, db *store.DB, sec secrets, log *slog.Logger, u urls) (*app, error) {
	return wireRun(ctx, cfg, db, sec, log, u, nil, nil)
}

// wireRun is wire with run, `switchyard demo`'s run (nil under serve), which
// it hands to the demo worker.
func wireRun(ctx context.Context, cfg *config, db *store.DB, sec secrets, log *slog.Logger, u urls, run *demoRun, traces *telemetry.Ring) (*app, error) {
	w := wiring{cfg: cfg, db: db, sec: sec, log: log, u: u, traces: traces,
		authLimit: authlimit.New(authlimit.Opts{Logger: log.With(slog.String("subsystem", "auth")), TrustedProxies: cfg.TrustedProxies})}
	queues, queuesPart := wireQueues(w)
	sb, sandboxPart, err := wireSandbox(ctx, w)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	be, ob, botPart, err := wireBot(w, sb)
	if err != nil {
		return nil, err
	}
	ref, referralPart, err := wireReferral(ctx, w)
	if err != nil {
		return nil, fmt.Errorf("referral: %w", err)
	}
	chat, chatPart := wireChat(w, sb)
	dw, demoPart := wireDemo(w, sb, run)
	ru, rollupPart := wireRollups(w, be, ref, chat)
	rt, retentionPart := wireRetention(w, queues, be, ref, chat, ru)
	sampler, alertsPart := wireAlerts(w)
	clockPart := wireClock(w)

	// The console's domain objects; a page whose object is unset says its
	// subsystem is not wired in this process.
	wo := consoleOptions(w)
	wo.Queues, wo.Outbox, wo.Referral, wo.Chat = queues, be.Outbox(), ref, chat
	wo.Retention = rt
	wo.Rollups = ru
	wo.AlertCounters = sampler
	// The funnel's counts are read from the database in any process.
	wo.Funnel = onboarding.NewStats(w.db)
	// The search asks each subsystem's owner what its tables know.
	wo.History = append(wo.History, be.Outbox(), ref, chat, queues)
	if ob != nil {
		wo.Onboarding = ob
		wo.History = append(wo.History, ob)
	}
	if sb != nil {
		sbx := tgsandbox.New(tgsandbox.Opts{Server: sb.server, OnboardingToken: sb.onboardingToken, ChatToken: sb.omniToken})
		wo.Admin = append(wo.Admin, sbx.AdminRoutes)
		sandboxPart.adminAPI = append(sandboxPart.adminAPI, tgsandbox.AdminOpenAPI())
		wo.Sandbox = sbx
	}
	if dw != nil {
		wo.Demo = demoSwitch{ctl: dw.Controller(), log: log.With(slog.String("subsystem", "demo"))}
	}
	a := assemble(wo, queuesPart, sandboxPart, botPart, referralPart, chatPart, demoPart, rollupPart, retentionPart, alertsPart, clockPart)
	a.sandbox = sb
	return a, nil
}

// consoleOptions are the console's own settings, before the subsystems'
// routes and domain objects.
func consoleOptions(w wiring) web.Options {
	return web.Options{
		DB:          w.db,
		AdminToken:  w.sec.AdminToken,
		Logger:      w.log,
		Traces:      w.traces,
		AuthLimiter: w.authLimit,
		BodyLimit:   w.cfg.BodyLimit,
		Version:     version(),
		Roles:       w.cfg.Roles,
	}
}

// assemble is the process made of the parts, in order, with the console
// serving their routes.
func assemble(wo web.Options, parts ...part) *app {
	a := &app{}
	var publicAPI, adminAPI []openapi.Part
	for _, p := range parts {
		wo.Public = append(wo.Public, p.public...)
		wo.Admin = append(wo.Admin, p.admin...)
		publicAPI = append(publicAPI, p.publicAPI...)
		adminAPI = append(adminAPI, p.adminAPI...)
		a.workers = append(a.workers, p.workers...)
		a.onShutdown = append(a.onShutdown, p.onShutdown...)
		a.closers = append(a.closers, p.closers...)
	}
	wo.OpenAPI = apiDocument(publicAPI, adminAPI)
	a.handler = web.New(wo)
	return a
}

// wireQueues wires queues and topics: the operator API, the console's Queues
// page, and the janitor that applies retention.
func wireQueues(w wiring) (*queue.Admin, part) {
	// Topic records are the retention runner's (wireRetention).
	qa := queue.NewAdmin(queue.AdminOpts{DB: w.db, LeaveRecords: true, Logger: w.log.With(slog.String("subsystem", "queue"))})
	return qa, part{
		admin:    []web.RoutesFunc{qa.AdminRoutes},
		adminAPI: []openapi.Part{queue.AdminOpenAPI()},
		workers: []worker{workerFunc{"queue-janitor", func(ctx context.Context) error {
			qa.RunJanitor(ctx)
			return nil
		}}},
	}
}

// wireSandbox wires the sandbox (sandbox.go): a fake Telegram Bot API inside
// the process, for every bot that has no real token, so `go run .` works end
// to end offline. It is nil when every bot of this process has a token.
func wireSandbox(ctx context.Context, w wiring) (*sandbox, part, error) {
	sb, err := newSandbox(ctx, w.cfg, w.db, w.u, w.log)
	if err != nil || sb == nil {
		return nil, part{}, err
	}
	return sb, part{
		public:  []web.RoutesFunc{sb.routes},
		closers: []func(){sb.server.Close},
		// Its long polls end when the server starts shutting down.
		onShutdown: []func(){sb.server.Close},
		// Its bots are this process's while it runs (claimSandboxBot).
		workers: []worker{workerFunc{"sandbox-claims", func(ctx context.Context) error {
			return sb.holdClaims(ctx, w.db, w.log.With(slog.String("subsystem", "sandbox")))
		}}},
	}, nil
}

// wireBot wires the bot outbox: the backend's contract (wireBackend), and
// the onboarding bot that polls it (wireOnboarding; nil unless this process
// runs the bot role).
func wireBot(w wiring, sb *sandbox) (*backend.Service, *onboarding.Bot, part, error) {
	be, bp := wireBackend(w)
	if !w.cfg.has("bot") {
		return be, nil, bp, nil
	}
	ob, op, err := wireOnboarding(w, sb)
	if err != nil {
		return nil, nil, part{}, fmt.Errorf("onboarding bot: %w", err)
	}
	bp.public = append(bp.public, op.public...)
	bp.admin = append(bp.admin, op.admin...)
	bp.adminAPI = append(bp.adminAPI, op.adminAPI...)
	bp.workers = append(bp.workers, op.workers...)
	return be, ob, bp, nil
}

// wireBackend wires the bot backend. Operators can always act on its
// domain; the /bot/* contract is served by processes that run the backend
// role.
func wireBackend(w wiring) (*backend.Service, part) {
	username := w.cfg.BotUsername
	if username == "" && w.cfg.BotTelegramToken == "" {
		username = fmt.Sprintf("fake%d_bot", sandboxOnboardingBotID)
	}
	be := backend.New(backend.Opts{
		DB:          w.db,
		Secret:      w.sec.BotToBackend,
		AuthLimiter: w.authLimit,
		Logger:      w.log.With(slog.String("subsystem", "bot-backend")),
		BotUsername: username,
	})
	p := part{admin: []web.RoutesFunc{be.AdminRoutes}, adminAPI: []openapi.Part{backend.AdminOpenAPI()}}
	if w.cfg.has("backend") {
		p.public = append(p.public, be.Routes)
		p.publicAPI = append(p.publicAPI, backend.OpenAPI())
		p.onShutdown = append(p.onShutdown, be.Shutdown)
	}
	return be, p
}

// wireOnboarding wires the onboarding bot: on the sandbox when it has no
// token, calling the backend at --backend-url (default this process).
func wireOnboarding(w wiring, sb *sandbox) (*onboarding.Bot, part, error) {
	token, api := w.cfg.BotTelegramToken, w.cfg.TelegramAPIURL
	if sb != nil && sb.onboardingToken != "" {
		token, api = sb.onboardingToken, w.u.self+sandboxPath
	}
	backendURL := w.cfg.BackendURL
	if backendURL == "" {
		backendURL = w.u.self
	}
	ob, err := onboarding.New(onboarding.Opts{
		DB:             w.db,
		Logger:         w.log.With(slog.String("subsystem", "onboarding-bot")),
		BackendURL:     backendURL,
		BackendSecret:  w.sec.BotToBackend,
		TelegramToken:  token,
		TelegramAPIURL: api,
		Updates:        w.cfg.BotUpdates,
		WebhookSecret:  w.sec.BotWebhook,
		AuthLimiter:    w.authLimit,
		WebhookURL:     w.u.public + onboardingWebhookPath,
		CabinetURL:     w.u.public + "/admin",
		Limits:         sandboxLimits(w.cfg),
	})
	if err != nil {
		return nil, part{}, err
	}
	return ob, part{public: []web.RoutesFunc{ob.Routes}, admin: []web.RoutesFunc{ob.AdminRoutes},
		adminAPI: []openapi.Part{onboarding.AdminOpenAPI()}, workers: []worker{ob}}, nil
}

// wireReferral wires referral: its topics are declared by every process (so
// publishes work anywhere); the consumer group runs under the referral role.
func wireReferral(ctx context.Context, w wiring) (*referral.Service, part, error) {
	ref, err := referral.New(ctx, referral.Opts{DB: w.db, Logger: w.log.With(slog.String("subsystem", "referral"))})
	if err != nil {
		return nil, part{}, err
	}
	p := part{admin: []web.RoutesFunc{ref.AdminRoutes}, adminAPI: []openapi.Part{referral.AdminOpenAPI()}}
	if w.cfg.has("referral") {
		p.workers = append(p.workers, ref)
	}
	return ref, p, nil
}

// wireChat wires the chat platform: the admin surface everywhere; inbound,
// chat and outbound by role, each of which can be its own process on the
// same database (with a real token: a sandbox bot is one process's,
// claimSandboxBot).
func wireChat(w wiring, sb *sandbox) (*omni.Admin, part) {
	cfg := w.cfg
	token, api := cfg.OmniToken, cfg.TelegramAPIURL
	if sb != nil && sb.omniToken != "" {
		token, api = sb.omniToken, w.u.self+sandboxPath
	}
	log := w.log.With(slog.String("subsystem", "omni"))
	chatAdmin := omni.NewAdmin(omni.AdminOpts{DB: w.db, Logger: log})
	p := part{admin: []web.RoutesFunc{chatAdmin.AdminRoutes}, adminAPI: []openapi.Part{omni.AdminOpenAPI()}}
	if cfg.has("inbound") {
		in := omni.NewInbound(omni.InboundOpts{DB: w.db, Token: token, WebhookSecret: w.sec.OmniWebhook, AuthLimiter: w.authLimit, Logger: log})
		p.public = append(p.public, in.Routes)
		// Telegram (or the sandbox) is told where to deliver once the
		// server is up, and told again until it takes it: Telegram by one
		// instance of the fleet, the sandbox (this process's own) by this
		// process.
		base, own := w.u.public, cfg.OmniToken == ""
		if own {
			base = w.u.self
		}
		p.workers = append(p.workers, workerFunc{"omni-webhook", func(ctx context.Context) error {
			tg, err := telegram.NewBot(token, api)
			if err != nil {
				return fmt.Errorf("omni webhook: %w", err)
			}
			return in.RegisterWebhook(ctx, omni.RegisterOpts{Bot: tg, BaseURL: base, OwnAPI: own})
		}})
	}
	if cfg.has("chat") {
		p.workers = append(p.workers, omni.NewChat(omni.ChatOpts{DB: w.db, Logger: log, GroupChats: cfg.OmniGroupChats}))
	}
	if cfg.has("outbound") {
		p.workers = append(p.workers, omni.NewOutbound(omni.OutboundOpts{DB: w.db, Token: token, APIURL: api, Logger: log, Limits: sandboxLimits(cfg)}))
	}
	return chatAdmin, p
}

// wireDemo wires the demo (demo.go): with both bots on the sandbox, it seeds
// the database once it serves, and runs the simulator under `switchyard
// demo` (run); nil when a bot has a real token.
func wireDemo(w wiring, sb *sandbox, run *demoRun) (*demoWorker, part) {
	dw := newDemoWorker(w.cfg, w.sec, w.u, sb, run, w.log)
	if dw == nil {
		return nil, part{}
	}
	return dw, part{workers: []worker{dw}}
}

// wireRollups wires the console's throughput per minute (rollup/): every
// process runs it, one at a time rolls up, from each series' owner.
func wireRollups(w wiring, be *backend.Service, ref *referral.Service, chat *omni.Admin) (*rollup.Rollups, part) {
	ru := rollup.New(rollup.Opts{DB: w.db, Logger: w.log.With(slog.String("subsystem", "rollup")),
		Sources: map[rollup.Series]rollup.CountFunc{
			rollup.OutboxHandled:    be.Outbox().CountHandled,
			rollup.IdentityConsumed: ref.ConsumedBetween,
			rollup.BondsCreated:     ref.BondsBetween,
			rollup.ChatInbound:      chat.InboundBetween,
			rollup.ChatOutbound:     chat.OutboundBetween,
		}})
	return ru, part{workers: []worker{ru}}
}

// wireRetention wires the retention runner (retention/): every process runs
// it, one at a time prunes, each rule by its --retention-* option.
func wireRetention(w wiring, qa *queue.Admin, be *backend.Service, ref *referral.Service, chat *omni.Admin, ru *rollup.Rollups) (*retention.Runner, part) {
	r := w.cfg.Retention
	db := w.db
	rule := func(name string, keep time.Duration, parts ...retention.Part) retention.Rule {
		return retention.Rule{Name: name, Option: "--retention-" + name, Keep: keep, Parts: parts}
	}
	onboardingPrune := func(f func(context.Context, *store.DB, time.Time, int) (int64, error)) retention.PruneFunc {
		return func(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
			return f(ctx, db, cutoff, limit)
		}
	}
	rules := []retention.Rule{
		rule("webhook-ledger", r.WebhookLedger, retention.Part{Table: omni.LedgerTable, Prune: chat.PruneInboundLedger}),
		rule("dead-letters", r.DeadLetters, retention.Part{Table: queue.DeadLettersTable, Prune: qa.PruneDeadLetters}),
		rule("outbox", r.Outbox, retention.Part{Table: backend.OutboxTable, Prune: be.Outbox().PruneProcessed}),
		rule("referral-marks", r.ReferralMarks, retention.Part{Table: referral.MarksTable, Prune: ref.PruneMarks}),
		rule("topic-records", r.TopicRecords, retention.Part{Table: queue.TopicLogTable, Prune: qa.PruneTopicRecords}),
		rule("bot-updates", r.BotUpdates, retention.Part{Table: onboarding.UpdatesTable, Prune: onboardingPrune(onboarding.PruneUpdates)}),
		rule("deliveries", r.Deliveries, retention.Part{Table: onboarding.DeliveriesTable, Prune: onboardingPrune(onboarding.PruneDeliveries)}),
		rule("chat-messages", r.ChatMessages, retention.Part{Table: omni.MessagesTable, Prune: chat.PruneMessages}),
		rule("queue-keys", r.QueueKeys, retention.Part{Table: queue.KeysTable, Prune: qa.PruneKeys}),
		rule("queue-failures", r.QueueFailures, retention.Part{Table: queue.FailuresTable, Prune: qa.PruneFailures}),
		rule("rollups", r.Rollups, retention.Part{Table: rollup.Table, Prune: ru.Prune}),
	}
	log := w.log.With(slog.String("subsystem", "retention"))
	if keep := r.WebhookLedger; keep > 0 && keep < 24*time.Hour {
		log.Warn("the webhook ledger is kept for less than the 24 hours Telegram may deliver an update again; receiver.flow's idempotency keys still refuse a second webhook of an update for --retention-queue-keys",
			slog.Duration("retention", keep), slog.Duration("queue_keys_retention", r.QueueKeys))
	}
	rt := retention.New(retention.Opts{DB: db, Rules: rules, Interval: r.Interval, Logger: log})
	return rt, part{workers: []worker{rt}}
}
