package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"switchyard/demo"
	"switchyard/web"
)

// demoRun is what `switchyard demo` asks of the process it serves: traffic at
// rate for duration, progress on out, stopped by signals. It reaches the demo
// worker through wire's context.
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

type demoRunKey struct{}

// errRunFailed is the exit of a demo whose summary shows a failed run: a
// broken or unchecked promise, most journeys of a flow failed.
var errRunFailed = errors.New("demo: the run failed (see the summary)")

// demoCmd is `switchyard demo`: serve with the same flags, on the sandbox Bot
// API, plus the simulator driving this very process at --rate arrivals per
// second for --duration (0: until Ctrl-C). Ctrl-C stops the traffic first,
// lets the work in flight finish, prints the summary, then stops the server.
// It fails when the run failed (demo.Summary.Problems): an invariant broken
// or not checked, most journeys of a flow failed.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	rate, duration, rest, err := demoFlags(args)
	if err != nil {
		return err
	}
	if slicesHasHelp(rest) {
		fmt.Fprint(stdout, `Usage: switchyard demo [--rate N] [--duration D] [serve options]

Runs Switchyard on the sandbox Bot API with simulated traffic on all three flows.
  --rate N       new arrivals per second, shared by the three flows (default 3)
  --duration D   how long traffic flows, e.g. 2m (default 0: until Ctrl-C)

`)
		_, err := parseConfig("serve", []string{"--help"}, getenv, stdout)
		return err
	}
	if !hasFlag(rest, "log-level") && getenv("SWITCHYARD_LOG_LEVEL") == "" {
		// The progress lines are the show; keep the log to what needs attention.
		rest = append(rest, "--log-level", "warn")
	}
	cfg, err := parseConfig("serve", rest, getenv, stdout)
	if err != nil {
		return err
	}
	switch {
	case cfg.BotTelegramToken != "" || cfg.OmniToken != "":
		return errors.New("demo runs on the sandbox Bot API and never writes to real Telegram users: unset BOT_TELEGRAM_TOKEN and OMNI_TELEGRAM_TOKEN")
	case len(cfg.Roles) != len(allRoles):
		return errors.New("demo needs every role in this process (--roles all)")
	case cfg.BackendURL != "":
		return errors.New("demo needs the bot to call this process (unset SWITCHYARD_BACKEND_URL)")
	}

	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServe()
	var (
		mu     sync.Mutex
		result error
	)
	run := &demoRun{
		rate: rate, duration: duration, out: stdout, signals: ctx, started: make(chan struct{}),
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
	err = serve(context.WithValue(serveCtx, demoRunKey{}, run), cfg, stdout, stderr)
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(err, result)
}

// demoFlags takes --rate and --duration out of args and leaves serve's.
func demoFlags(args []string) (rate float64, duration time.Duration, rest []string, err error) {
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || (name != "rate" && name != "duration") {
			rest = append(rest, args[i])
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return 0, 0, nil, fmt.Errorf("flag --%s needs a value", name)
			}
			i++
			value = args[i]
		}
		switch name {
		case "rate":
			rate, err = strconv.ParseFloat(value, 64)
			if err != nil || rate <= 0 || rate > demo.MaxRate {
				return 0, 0, nil, fmt.Errorf("--rate must be a number of arrivals per second above 0 and at most %d, not %q", demo.MaxRate, value)
			}
		case "duration":
			duration, err = time.ParseDuration(value)
			if err != nil || duration < 0 {
				return 0, 0, nil, fmt.Errorf("--duration must be a duration such as 90s or 5m (0: until Ctrl-C), not %q", value)
			}
		}
	}
	return rate, duration, rest, nil
}

func slicesHasHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// hasFlag reports whether args set the flag name (-name, --name, with or
// without =value).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && n == name {
			return true
		}
	}
	return false
}

// demoWorker is the demo inside a sandbox process: it seeds the database
// once the server is up (so the console is never empty on a first look),
// holds the simulator's controller for the console, and under
// `switchyard demo` runs the simulator.
type demoWorker struct {
	opts demo.Opts
	ctl  *demo.Controller
	run  *demoRun // nil under plain serve
	log  *slog.Logger
}

// newDemoWorker returns the demo worker of a process whose bots both run on
// its sandbox, or nil when a bot has a real token (no demo data, ever, next
// to real Telegram users) or does not run here.
func newDemoWorker(ctx context.Context, cfg *config, sec secrets, u urls, sb *sandbox, log *slog.Logger) *demoWorker {
	if sb == nil || sb.onboardingToken == "" || sb.omniToken == "" ||
		cfg.BotTelegramToken != "" || cfg.OmniToken != "" {
		return nil
	}
	opts := demo.Opts{
		BaseURL: u.self, AdminToken: sec.AdminToken, BotSecret: sec.BotToBackend, Sandbox: sb.server,
		OnboardingToken: sb.onboardingToken, OmniToken: sb.omniToken,
		Logger: log,
	}
	run, _ := ctx.Value(demoRunKey{}).(*demoRun)
	if run != nil {
		opts.Rate, opts.Duration, opts.Progress = run.rate, run.duration, run.out
	}
	return &demoWorker{opts: opts, ctl: demo.NewController(opts), run: run, log: log}
}

func (w *demoWorker) Name() string { return "demo" }

// Controller is the simulator's start/stop control for the console.
func (w *demoWorker) Controller() *demo.Controller { return w.ctl }

// Run seeds, or runs `switchyard demo`'s simulator, then waits for ctx.
func (w *demoWorker) Run(ctx context.Context) error {
	if w.run == nil {
		if _, err := demo.Seed(ctx, w.opts); err != nil && ctx.Err() == nil {
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
