package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"switchyard/authlimit"
	"switchyard/bot/backend"
	"switchyard/bot/onboarding"
	"switchyard/omni"
	"switchyard/queue"
	"switchyard/referral"
	"switchyard/store"
	"switchyard/telegram"
	tgsandbox "switchyard/telegram/sandbox"
	"switchyard/web"
)

// app is a wired process: its HTTP handler, the workers its roles run, and
// what must happen when the HTTP server starts shutting down.
type app struct {
	handler    http.Handler
	workers    []worker
	onShutdown []func()
	closers    []func()
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

// wire builds the subsystems this process runs and mounts their routes.
func wire(ctx context.Context, cfg *config, db *store.DB, sec secrets, log *slog.Logger, u urls) (*app, error) {
	a := &app{}
	// One throttle of failed authentication for every surface that checks
	// a secret, so a client's failures count together wherever it guesses.
	authLimit := authlimit.New(authlimit.Opts{Logger: log.With(slog.String("subsystem", "auth")), TrustedProxies: cfg.TrustedProxies})
	wo := web.Options{
		DB:         db,
		AdminToken: sec.AdminToken,
		Logger:     log,
		BodyLimit:  cfg.BodyLimit,
		Version:    version(),
		Roles:      cfg.Roles,
	}
	wo.AuthLimiter = authLimit

	// Queues and topics: the operator API, the console's Queues page, and
	// the janitor that applies retention.
	qa := queue.NewAdmin(queue.AdminOpts{DB: db, Logger: log.With(slog.String("subsystem", "queue"))})
	wo.Admin = append(wo.Admin, qa.AdminRoutes)
	wo.Queues = qa
	a.workers = append(a.workers, workerFunc{"queue-janitor", func(ctx context.Context) error {
		qa.RunJanitor(ctx)
		return nil
	}})

	// The sandbox (sandbox.go): a fake Telegram Bot API inside the process,
	// for every bot that has no real token, so `go run .` works end to end
	// offline.
	sb, err := newSandbox(ctx, cfg, db, u, log)
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if sb != nil {
		a.closers = append(a.closers, sb.server.Close)
		// Its long polls end when the server starts shutting down.
		a.onShutdown = append(a.onShutdown, sb.server.Close)
		wo.Public = append(wo.Public, func(r *mux.Router) { r.PathPrefix(sandboxPath + "/").Handler(sb.server) })
	}

	// Bot outbox: the backend's contract, and the onboarding bot that polls it.
	botToken, botAPI, botUsername := cfg.BotTelegramToken, cfg.TelegramAPIURL, cfg.BotUsername
	if sb != nil && sb.onboardingToken != "" {
		botToken, botAPI = sb.onboardingToken, u.self+sandboxPath
	}
	if botUsername == "" && cfg.BotTelegramToken == "" {
		botUsername = fmt.Sprintf("fake%d_bot", sandboxOnboardingBotID)
	}
	be := backend.New(backend.Opts{
		DB:          db,
		Secret:      sec.BotToBackend,
		AuthLimiter: authLimit,
		Logger:      log.With(slog.String("subsystem", "bot-backend")),
		BotUsername: botUsername,
	})
	// Operators can always act on the backend domain; the /bot/* contract is
	// served by processes that run the backend role.
	wo.Admin = append(wo.Admin, be.AdminRoutes)
	wo.Outbox = be.Outbox()
	// The funnel's counts are read from the database in any process.
	wo.Funnel = onboarding.NewStats(db)
	if cfg.has("backend") {
		wo.Public = append(wo.Public, be.Routes)
		a.onShutdown = append(a.onShutdown, be.Shutdown)
	}
	if cfg.has("bot") {
		backendURL := cfg.BackendURL
		if backendURL == "" {
			backendURL = u.self
		}
		ob, err := onboarding.New(onboarding.Opts{
			DB:             db,
			Logger:         log.With(slog.String("subsystem", "onboarding-bot")),
			BackendURL:     backendURL,
			BackendSecret:  sec.BotToBackend,
			TelegramToken:  botToken,
			TelegramAPIURL: botAPI,
			Updates:        cfg.BotUpdates,
			WebhookSecret:  sec.BotWebhook,
			AuthLimiter:    authLimit,
			WebhookURL:     u.public + onboardingWebhookPath,
			CabinetURL:     u.public + "/admin",
		})
		if err != nil {
			return nil, fmt.Errorf("onboarding bot: %w", err)
		}
		wo.Public = append(wo.Public, ob.Routes)
		wo.Admin = append(wo.Admin, ob.AdminRoutes)
		wo.Onboarding = ob
		a.workers = append(a.workers, ob)
	}

	// Referral: topics are declared by every process (so publishes work
	// anywhere); the consumer group runs under the referral role.
	ref, err := referral.New(ctx, referral.Opts{DB: db, Logger: log.With(slog.String("subsystem", "referral"))})
	if err != nil {
		return nil, fmt.Errorf("referral: %w", err)
	}
	wo.Admin = append(wo.Admin, ref.AdminRoutes)
	wo.Referral = ref
	if cfg.has("referral") {
		a.workers = append(a.workers, ref)
	}

	// Chat platform: the admin surface everywhere; inbound, chat and outbound
	// by role, each of which can be its own process on the same file.
	omniToken, omniAPI := cfg.OmniToken, cfg.TelegramAPIURL
	if sb != nil && sb.omniToken != "" {
		omniToken, omniAPI = sb.omniToken, u.self+sandboxPath
	}
	omniLog := log.With(slog.String("subsystem", "omni"))
	chatAdmin := omni.NewAdmin(omni.AdminOpts{DB: db, Logger: omniLog})
	wo.Admin = append(wo.Admin, chatAdmin.AdminRoutes)
	wo.Chat = chatAdmin
	if cfg.has("inbound") {
		in := omni.NewInbound(omni.InboundOpts{DB: db, Token: omniToken, WebhookSecret: sec.OmniWebhook, AuthLimiter: authLimit, Logger: omniLog})
		wo.Public = append(wo.Public, in.Routes)
		// Telegram (or the sandbox) is told where to deliver once the server
		// is up; a refusal (no public HTTPS URL) is logged, not fatal.
		webhookBase := u.public
		if cfg.OmniToken == "" {
			webhookBase = u.self
		}
		a.workers = append(a.workers, workerFunc{"omni-webhook", func(ctx context.Context) error {
			tg, err := telegram.NewBot(omniToken, omniAPI)
			if err != nil {
				return err
			}
			// Until Telegram takes it, no chat update arrives: retry with
			// backoff (a 5xx, a network blip) until it does or we stop.
			for wait := time.Second; ; wait = min(2*wait, time.Minute) {
				err := in.SetWebhook(ctx, tg, webhookBase)
				if err == nil || ctx.Err() != nil {
					return nil
				}
				omniLog.Warn("telegram webhook not set; retrying (check the public URL if this persists)",
					slog.Duration("retry_in", wait), slog.Any("err", err))
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
		}})
	}
	if cfg.has("chat") {
		a.workers = append(a.workers, omni.NewChat(omni.ChatOpts{DB: db, Logger: omniLog, GroupChats: cfg.OmniGroupChats}))
	}
	if cfg.has("outbound") {
		a.workers = append(a.workers, omni.NewOutbound(omni.OutboundOpts{DB: db, Token: omniToken, APIURL: omniAPI, Logger: omniLog}))
	}

	// The sandbox's admin API and the console's Sandbox page, when a bot runs on the fake.
	if sb != nil {
		sbx := tgsandbox.New(tgsandbox.Opts{Server: sb.server, OnboardingToken: sb.onboardingToken, ChatToken: sb.omniToken})
		wo.Admin = append(wo.Admin, sbx.AdminRoutes)
		wo.Sandbox = sbx
	}

	// Demo (demo.go): with both bots on the sandbox, seed the database once
	// it serves, and run the simulator under `switchyard demo`.
	if dw := newDemoWorker(ctx, cfg, sec, u, sb, log); dw != nil {
		a.workers = append(a.workers, dw)
		wo.Demo = demoSwitch{ctl: dw.Controller(), log: log.With(slog.String("subsystem", "demo"))}
	}

	a.handler = web.New(wo)
	return a, nil
}
