package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"switchyard/demo"
	"switchyard/store"
	"switchyard/web"
)

// demoRun is what `switchyard demo` asks of the process it serves: traffic at
// rate for duration, progress on out, stopped by signals. demoCmd hands it
// to serve, which hands it to wire's demo worker.
type demoRun struct {
	rate     float64
	duration time.Duration
	out      io.Writer
	// signals ends when the user presses Ctrl-C (or SIGTERM arrives): the
	// simulator stops, then the server.
	signals context.Context
	// started is closed when the demo worker took the run.
	started chan struct{}
	// done receives the run's outcome and shuts the server down.
	done func(demo.Summary, error)
}

// errRunFailed is the exit of a demo whose summary shows a failed run: a
// broken or unchecked promise, most journeys of a flow failed.
var errRunFailed = errors.New("demo: the run failed (see the summary)")

// demoTraffic is demo's own options: the simulated traffic, and whether to
// start a database given with --db afresh.
type demoTraffic struct {
	rate     float64
	duration time.Duration
	fresh    bool
}

// demoDB is the database demo runs on unless told otherwise: a file of its
// own, started afresh on every run, so that a demo never writes into serve's
// ./switchyard.db and always begins on the state the tour describes.
const demoDB = "./switchyard-demo.db"

// options are demo's own options; serve's follow them (demoOptions).
func (d *demoTraffic) options() []option {
	return []option{
		{"rate", "", strconv.Itoa(demo.DefaultRate), fmt.Sprintf("new arrivals per second, shared by the three flows (at most %d)", demo.MaxRate), func(v string) error {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || r <= 0 || r > demo.MaxRate {
				return fmt.Errorf("must be a number of arrivals per second above 0 and at most %d", demo.MaxRate)
			}
			d.rate = r
			return nil
		}},
		{"duration", "", "0", "how long traffic flows, e.g. 2m (0: until Ctrl-C)", func(v string) error {
			t, err := time.ParseDuration(v)
			if err != nil || t < 0 {
				return errors.New("must be a duration such as 90s or 5m (0: until Ctrl-C)")
			}
			d.duration = t
			return nil
		}},
		{"fresh", "", "false", "delete the SQLite file --db names before starting (" + demoDB + ", demo's own, always starts afresh)", func(v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errors.New("must be true or false")
			}
			d.fresh = b
			return nil
		}},
	}
}

// demoOptions are everything demo takes, as demo --help lists them: its
// own options, then serve's (demoServeOptions).
func demoOptions(d *demoTraffic, c *config) []option {
	return append(d.options(), demoServeOptions(c)...)
}

// demoServeOptions are serve's options as demo takes them: the database
// defaults to demo's own file, the log level to warn (the progress lines are
// the show and the log keeps to what needs attention), the trace ring to
// 8,192 spans for the console's search.
func demoServeOptions(c *config) []option {
	opts := withDefault(c.options("serve"), "log-level", "warn")
	return withDefault(withDefault(opts, "trace-ring", "8192"), "db", demoDB)
}

// demoCmd is `switchyard demo`: serve with the same flags, on the sandbox Bot
// API, plus the simulator driving this very process at --rate arrivals per
// second for --duration (0: until Ctrl-C). Ctrl-C stops the traffic first,
// lets the work in flight finish, prints the summary, then stops the server.
// It fails when the run failed (demo.Summary.Problems): an invariant broken
// or not checked, most journeys of a flow failed.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	traffic, rest, err := demoFlags(args)
	if err != nil {
		return err
	}
	cfg := &config{}
	if err := cfg.parse("demo", demoServeOptions(cfg), rest, getenv, stdout); err != nil {
		return err
	}
	if err := checkDemoConfig(cfg); err != nil {
		return err
	}
	// --ephemeral brings a fresh database of its own, and leaves --db's be.
	if !cfg.Start.Ephemeral {
		if err := freshDemoDB(cfg.DB, traffic.fresh, stdout); err != nil {
			return err
		}
	}
	return runDemo(ctx, cfg, traffic, stdout, stderr)
}

// demoFlags takes demo's own options (--rate, --duration, --fresh) out of
// args and reads them with parseFlags; the rest of args are serve's options.
func demoFlags(args []string) (d demoTraffic, rest []string, err error) {
	own, rest := takeOptions(d.options(), args)
	if _, err := parseFlags("demo", d.options(), own, getenv, io.Discard); err != nil {
		return demoTraffic{}, nil, err
	}
	return d, rest, nil
}

// freshDemoDB makes sure the demo starts on a fresh database. Demo's own
// file (demoDB) is deleted, with its WAL, before every run. Another SQLite
// file that already holds a database is deleted only with --fresh; without
// it demo refuses, so it never mixes simulated users into a database it was
// not told to give up. A PostgreSQL database is used as it is: --fresh is
// refused there, for demo drops nothing on a server (give it an empty
// database).
func freshDemoDB(db string, fresh bool, out io.Writer) error {
	if store.IsPostgresURL(db) {
		if fresh {
			return usageError{errors.New("--fresh deletes a SQLite file only; on PostgreSQL give demo an empty database")}
		}
		return nil
	}
	info, err := os.Stat(db)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	own := filepath.Clean(db) == filepath.Clean(demoDB)
	if info.Size() > 0 && !own && !fresh {
		return usageError{fmt.Errorf("%s already holds a database and demo starts on a fresh one: give --db a new file, or add --fresh to delete %s first", db, db)}
	}
	for _, f := range []string{db, db + "-wal", db + "-shm", db + "-journal"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("start %s afresh: %w", db, err)
		}
	}
	fmt.Fprintf(out, "demo: starting on a fresh database, %s\n", db)
	return nil
}

// checkDemoConfig refuses what the demo must never run with: a real bot
// token, a process missing a role, a bot calling another backend.
func checkDemoConfig(cfg *config) error {
	switch {
	case cfg.BotTelegramToken != "" || cfg.OmniToken != "":
		return errors.New("demo runs on the sandbox Bot API and never writes to real Telegram users: unset BOT_TELEGRAM_TOKEN and OMNI_TELEGRAM_TOKEN")
	case len(cfg.Roles) != len(allRoles):
		return errors.New("demo needs every role in this process (--roles all)")
	case cfg.BackendURL != "":
		return errors.New("demo needs the bot to call this process (unset SWITCHYARD_BACKEND_URL)")
	}
	return nil
}

// runDemo serves cfg with the demo run t, until the run ends or a signal
// stops it, and returns the run's outcome with serve's.
func runDemo(ctx context.Context, cfg *config, t demoTraffic, stdout, stderr io.Writer) error {
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServe()
	var (
		mu     sync.Mutex
		result error
	)
	run := &demoRun{
		rate: t.rate, duration: t.duration, out: stdout, signals: ctx, started: make(chan struct{}),
		done: func(sum demo.Summary, err error) {
			mu.Lock()
			result = err
			if err == nil && !sum.OK() {
				result = errRunFailed
			}
			mu.Unlock()
			stopServe()
		},
	}
	go func() {
		// Until the demo worker takes the run, a signal stops the server itself.
		select {
		case <-run.started:
		case <-serveCtx.Done():
		case <-ctx.Done():
			stopServe()
		}
	}()
	err := serve(serveCtx, cfg, run, stdout, stderr)
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(err, result)
}

// demoWorker is the demo inside a sandbox process: it seeds the database
// once the server is up (so the console is never empty on a first look),
// holds the simulator's controller for the console, and under
// `switchyard demo` runs the simulator.
type demoWorker struct {
	opts demo.Opts
	ctl  *demo.Controller
	run  *demoRun // nil under plain serve
	seed bool     // plain serve seeds the demo data (--seed)
	log  *slog.Logger
}

// newDemoWorker returns the demo worker of a process whose bots both run on
// its sandbox, or nil when a bot has a real token (no demo data, ever, next
// to real Telegram users) or does not run here.
func newDemoWorker(cfg *config, sec secrets, u urls, sb *sandbox, run *demoRun, log *slog.Logger) *demoWorker {
	if sb == nil || sb.onboardingToken == "" || sb.omniToken == "" ||
		cfg.BotTelegramToken != "" || cfg.OmniToken != "" {
		return nil
	}
	opts := demo.Opts{
		BaseURL: u.self, AdminToken: sec.AdminToken, BotSecret: sec.BotToBackend, Sandbox: sb.server,
		OnboardingToken: sb.onboardingToken, OmniToken: sb.omniToken,
		Logger: log,
	}
	if run != nil {
		opts.Rate, opts.Duration, opts.Progress = run.rate, run.duration, run.out
	}
	return &demoWorker{opts: opts, ctl: demo.NewController(opts), run: run, seed: cfg.Start.Seed, log: log}
}

func (w *demoWorker) Name() string { return "demo" }

// Controller is the simulator's start/stop control for the console.
func (w *demoWorker) Controller() *demo.Controller { return w.ctl }

// Run seeds, or runs `switchyard demo`'s simulator, then waits for ctx.
func (w *demoWorker) Run(ctx context.Context) error {
	if w.run == nil {
		if !w.seed {
			w.log.Debug("demo data not seeded (--seed=false)")
		} else if _, err := demo.Seed(ctx, w.opts); err != nil && ctx.Err() == nil {
			w.log.Warn("demo data not seeded", slog.Any("err", err))
		}
		<-ctx.Done()
		stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := w.ctl.Stop(stop); err != nil && !errors.Is(err, demo.ErrNotRunning) {
			w.log.Warn("demo traffic not stopped cleanly", slog.Any("err", err))
		}
		return nil
	}
	close(w.run.started)
	sum, err := w.ctl.Run(w.run.signals)
	// The sandbox answers its waiting long polls now, so the server's
	// shutdown does not wait out a 20-second getUpdates.
	w.opts.Sandbox.Close()
	w.run.done(sum, err)
	<-ctx.Done()
	return nil
}

// demoSwitch adapts the simulator's Controller to the console's switch.
type demoSwitch struct {
	ctl *demo.Controller
	log *slog.Logger
}

func (d demoSwitch) StartTraffic(ctx context.Context, rate float64) error {
	return d.ctl.Start(ctx, rate)
}

// StopTraffic ends arrivals; the drain and the invariant check run on, and
// their verdict shows as the last run.
func (d demoSwitch) StopTraffic() {
	go func() {
		sum, err := d.ctl.Stop(context.Background())
		if err != nil {
			d.log.Warn("demo traffic stop", slog.Any("err", err))
			return
		}
		d.log.Info("demo traffic stopped", slog.Int("arrivals", sum.Arrivals), slog.Bool("passed", sum.OK()))
	}()
}

func (d demoSwitch) TrafficStatus() web.DemoStatus {
	st := d.ctl.Status()
	out := web.DemoStatus{
		Running: st.Running, Stopping: st.Stopping, Rate: st.Rate, Elapsed: st.Elapsed, InFlight: st.InFlight,
		Started: st.Bot.Started + st.Referral.Started + st.Chat.Started,
		Failed:  st.Bot.Failed + st.Referral.Failed + st.Chat.Failed,
	}
	if st.Last != nil {
		verdict := "every invariant held"
		if p := st.Last.Problems(); len(p) > 0 {
			verdict = "failed: " + strings.Join(p, "; ")
		}
		out.Last = fmt.Sprintf("%d arrivals in %s at %g/s; %s", st.Last.Arrivals, st.Last.Elapsed.Round(time.Second), st.Last.Rate, verdict)
	}
	return out
}
