package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"switchyard/connlimit"
	"switchyard/mask"
	"switchyard/store"
	"switchyard/telemetry"
)

func newLogger(cfg *config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	ho := &slog.HandlerOptions{Level: level}
	// Every line passes through mask: no phone number reaches the log whole,
	// whichever call site logged it.
	if cfg.LogFormat == "json" {
		return slog.New(mask.NewHandler(slog.NewJSONHandler(w, ho)))
	}
	return slog.New(mask.NewHandler(slog.NewTextHandler(w, ho)))
}

func openStore(ctx context.Context, cfg *config, log *slog.Logger) (*store.DB, error) {
	return store.Open(ctx, store.Options{Path: cfg.DB, Synchronous: cfg.Sync, Logger: log, Clock: cfg.Clock.storeClock()})
}

// serveCmd is `switchyard serve`.
func serveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig("serve", args, getenv, stdout)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, nil, stdout, stderr)
}

// migrateCmd is `switchyard migrate`.
func migrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig("migrate", args, getenv, stdout)
	if err != nil {
		return err
	}
	return migrate(ctx, cfg, stdout, stderr)
}

func migrate(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	db, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer db.Close()
	applied, err := db.Migrate(ctx)
	if err != nil {
		return err
	}
	st, err := db.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "nothing to apply; schema at version %d\n", st.Current)
		return nil
	}
	fmt.Fprintf(stdout, "applied %d migration(s) %v; schema at version %d\n", len(applied), applied, st.Current)
	return nil
}

// secrets resolves each secret from the environment, or from the database,
// generating it on first start. generated names the ones not from the environment.
type secrets struct {
	AdminToken, BotToBackend, BotWebhook, OmniWebhook string
	adminFromEnv                                      bool
}

func loadSecrets(ctx context.Context, db *store.DB, cfg *config) (secrets, error) {
	s := secrets{AdminToken: cfg.AdminToken, BotToBackend: cfg.BotToBackend, BotWebhook: cfg.BotWebhookSecret, OmniWebhook: cfg.OmniWebhook, adminFromEnv: cfg.AdminToken != ""}
	for _, sec := range []struct {
		key string
		val *string
	}{
		{"secret.admin_token", &s.AdminToken},
		{"secret.bot_to_backend", &s.BotToBackend},
		{"secret.bot_webhook", &s.BotWebhook},
		{"secret.omni_webhook", &s.OmniWebhook},
	} {
		if *sec.val != "" {
			continue
		}
		v, _, err := db.EnsureSecret(ctx, sec.key)
		if err != nil {
			return s, fmt.Errorf("secret %s: %w", sec.key, err)
		}
		*sec.val = v
	}
	return s, nil
}

// listen opens cfg.Addr under the connection cap (connlimit), lowered to
// fit the process's open-file limit when that is too low for it.
func listen(cfg *config, log *slog.Logger) (*connlimit.Listener, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	n, files := connlimit.Fit(cfg.MaxConnections)
	if n < cfg.MaxConnections {
		log.Warn("the open-file limit is too low for --max-connections; serving fewer (raise it with ulimit -n)",
			slog.Int("max_connections", n), slog.Int("asked", cfg.MaxConnections), slog.Uint64("open_file_limit", files))
	}
	return connlimit.New(ln, n), nil
}

// httpServer is serve's HTTP server on ln: a request has ReadTimeout to
// arrive, body included (a slow body is cut), and WriteTimeout for its
// answer — long polls hold their own connection for their wait
// (httpjson.HoldOpen); idle keep-alive connections close after two minutes,
// or sooner when ln is at its cap.
func httpServer(cfg *config, h http.Handler, ln *connlimit.Listener, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(10*time.Second, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       120 * time.Second,
		ConnState:         ln.ConnState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// worker is a long-running part of the process (a consumer, a scheduler). Run
// returns when ctx is cancelled, after finishing the work in hand.
type worker interface {
	Name() string
	Run(ctx context.Context) error
}

// serve runs the process on cfg until ctx ends, then shuts it down. run is
// `switchyard demo`'s run, nil under serve.
func serve(ctx context.Context, cfg *config, run *demoRun, stdout, stderr io.Writer) error {
	if err := checkSandboxExposure(cfg); err != nil {
		return err
	}
	if err := checkClock(cfg); err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	// A ready file left by a process that was killed is not this one's.
	removeReadyFile(cfg, log)
	defer removeReadyFile(cfg, log)
	tracing, err := telemetry.Setup(ctx, telemetry.Options{RingSize: cfg.TraceRing, Console: stderr, Version: version()})
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, log)
	removeEphemeral, err := ephemeralDB(cfg, log)
	if err != nil {
		return err
	}
	defer removeEphemeral()
	db, err := openServeStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeStore(db, log)
	sec, err := loadSecrets(ctx, db, cfg)
	if err != nil {
		return err
	}
	ln, err := listen(cfg, log)
	if err != nil {
		return err
	}
	u := serveURLs(cfg, ln)
	app, err := wireRun(ctx, cfg, db, sec, log, u, run, tracing.Ring)
	if err != nil {
		ln.Close()
		return err
	}
	defer app.close()
	srv := httpServer(cfg, app.handler, ln, log)
	for _, f := range app.onShutdown {
		srv.RegisterOnShutdown(f)
	}
	if !cfg.Start.ReadyJSON {
		printBanner(stdout, u.public, sec, sandboxExposed(cfg), cfg.Start.ReadyFile)
	}
	log.Info("switchyard started", slog.String("addr", ln.Addr().String()), slog.String("db", store.Redact(cfg.DB)),
		slog.Any("roles", cfg.Roles), slog.String("version", version()))
	ann := announcer{cfg: cfg, db: db, info: newReadyInfo(u, sec, app.sandbox), stdout: stdout, log: log}
	return runServer(ctx, cfg, srv, ln, app.workers, ann.ready, log)
}

// shutdownTracing sends the spans still buffered to the exporter, giving it
// a few seconds: a collector that is down must not hold the exit.
func shutdownTracing(t *telemetry.Tracing, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("trace export at shutdown", slog.Any("err", err))
	}
}

// openServeStore opens the database serve runs on, refuses a damaged one
// (checkAtStart) and migrates it.
func openServeStore(ctx context.Context, cfg *config, log *slog.Logger) (*store.DB, error) {
	db, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := checkAtStart(ctx, db, log); err != nil {
		closeStore(db, log)
		return nil, err
	}
	applied, err := db.Migrate(ctx)
	if err != nil {
		closeStore(db, log)
		return nil, err
	}
	if len(applied) > 0 {
		log.Info("migrations applied", slog.Any("versions", applied))
	}
	return db, nil
}

func closeStore(db *store.DB, log *slog.Logger) {
	if err := db.Close(); err != nil {
		log.Error("close database", slog.Any("err", err))
	}
}

// serveURLs are the process's own address on ln, and its public URL
// (--public-url, else its own address).
func serveURLs(cfg *config, ln net.Listener) urls {
	self := "http://" + ln.Addr().String()
	public := strings.TrimRight(cfg.PublicURL, "/")
	if public == "" {
		public = self
	}
	return urls{self: self, public: public}
}

// runServer serves ln with srv and runs the workers until ctx ends; then
// the server stops taking requests and finishes those in flight, and the
// workers finish the work in hand, all within cfg.ShutdownTimeout. Once
// both run it calls ready; an error of ready shuts the process down the
// same way, and is runServer's.
func runServer(ctx context.Context, cfg *config, srv *http.Server, ln net.Listener, workers []worker, ready func(context.Context) error, log *slog.Logger) error {
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var wg sync.WaitGroup
	for _, wk := range workers {
		wg.Go(func() {
			if err := wk.Run(workCtx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("worker stopped", slog.String("worker", wk.Name()), slog.Any("err", err))
			}
		})
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	notReady, failed := untilStop(ctx, cfg, ready, serveErr, log)
	if failed != nil {
		stopWork()
		wg.Wait()
		return fmt.Errorf("http server: %w", failed)
	}

	deadline, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(deadline); err != nil {
		log.Warn("http shutdown incomplete", slog.Any("err", err))
		_ = srv.Close()
	}
	stopWork()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-deadline.Done():
		log.Warn("workers did not stop in time; their unacknowledged work is redelivered after restart")
	}
	log.Info("stopped")
	return notReady
}

// untilStop announces that the process is ready (ready) and waits for ctx
// to end. It returns early with ready's error (notReady), unless ctx ended
// during it, or with the HTTP server's (failed) when it stopped serving.
func untilStop(ctx context.Context, cfg *config, ready func(context.Context) error, serveErr <-chan error, log *slog.Logger) (notReady, failed error) {
	if err := ready(ctx); err != nil && ctx.Err() == nil {
		log.Error("shutting down: the start could not be announced", slog.Any("err", err))
		return err, nil
	}
	select {
	case <-ctx.Done():
		log.Info("shutting down", slog.Duration("timeout", cfg.ShutdownTimeout))
		return nil, nil
	case err := <-serveErr:
		return nil, err
	}
}

// printBanner tells the operator where the console is, once per start, on
// stdout (never through the log), and whether the sandbox Bot API is exposed.
// With a ready file (readyFile), the admin token is in it and nowhere else.
func printBanner(w io.Writer, base string, sec secrets, sandboxExposed bool, readyFile string) {
	fmt.Fprintf(w, "\nSwitchyard is running at %s\n", base)
	if sandboxExposed {
		fmt.Fprintf(w, "  WARNING: the sandbox Bot API (%s%s) is reachable by anyone who can reach this port\n", base, sandboxPath)
		fmt.Fprintf(w, "  (--sandbox-public): bots without a token talk to it instead of Telegram. To turn it off, set\n")
		fmt.Fprintf(w, "  BOT_TELEGRAM_TOKEN and OMNI_TELEGRAM_TOKEN, or listen on 127.0.0.1.\n")
	}
	if sec.adminFromEnv {
		fmt.Fprintf(w, "  Admin console: %s/admin (log in with SWITCHYARD_ADMIN_TOKEN)\n\n", base)
		return
	}
	if readyFile != "" {
		fmt.Fprintf(w, "  Admin console: %s/admin (log in with the adminToken of %s)\n\n", base, readyFile)
		return
	}
	fmt.Fprintf(w, "  Admin console: %s/admin/login?token=%s\n", base, sec.AdminToken)
	fmt.Fprintf(w, "  Admin token:   %s\n", sec.AdminToken)
	fmt.Fprintf(w, "  (generated on first start and kept in the database; set SWITCHYARD_ADMIN_TOKEN to choose your own)\n\n")
}
