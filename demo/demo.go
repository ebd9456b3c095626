package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"switchyard/telegram/fakebot"
)

// Opts configure Seed, Run and NewController. BaseURL, AdminToken,
// BotSecret, Sandbox and the two bot tokens are required; zero values of the
// rest get defaults.
type Opts struct {
	// BaseURL is the running instance, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// AdminToken opens /admin/api, where the demo plays the web cabinet,
	// the operators and the identity service.
	AdminToken string
	// BotSecret is BOT_TO_BACKEND_SECRET: the cabinet mints Telegram
	// connect links through the /bot/* contract, and Seed finds existing
	// leaders by their codes there.
	BotSecret string
	// Sandbox is the instance's built-in fake Bot API, through which the
	// demo acts as Telegram users. It must be the one the instance's bots
	// talk to (the same process).
	Sandbox *fakebot.Server
	// OnboardingToken and OmniToken are the sandbox tokens of the
	// onboarding bot and of the business-inbox bot (random per database in
	// the app; fakebot.Token(id) on a fake without Opts.Tokens).
	OnboardingToken string
	OmniToken       string
	// Rate is new arrivals per second, taken in turn by the three flows (a
	// bot user, an identity scenario, a customer message). Default 3.
	Rate float64
	// Duration is how long Run lets traffic flow; 0 runs until ctx ends.
	Duration time.Duration
	// Drain bounds how long stopping waits for nothing: journeys in flight
	// finish as long as they move, and are cancelled once none has moved (an
	// answer of the instance, a journey ended) for Drain; the invariants are
	// then checked until they hold or have not improved for Drain. A loaded
	// machine makes a stop slower, not a failure. Run stops within
	// maxStopDrains Drains in any case. Default 30 s.
	Drain time.Duration
	// Progress receives Run's progress lines and summary; nil discards.
	Progress io.Writer
	// ProgressEvery is the time between progress lines. Default 5 s.
	ProgressEvery time.Duration
	// Seed seeds the simulator's random choices; 0 picks one from the clock.
	Seed uint64
	// Logger gets the demo's own lines (ids only); nil discards.
	Logger *slog.Logger
	// HTTPClient calls the instance; a client with a 20 s timeout when nil.
	HTTPClient *http.Client
}

// Errors of the controller and of bad options.
var (
	ErrRunning    = errors.New("demo: the simulator is already running")
	ErrNotRunning = errors.New("demo: the simulator is not running")
	ErrNoSandbox  = errors.New("demo: needs the sandbox Bot API (no real bot tokens) and the instance's URL, admin token and bot secret")
)

// DefaultRate is the arrivals per second when Opts.Rate is zero.
const DefaultRate = 3

// MaxRate caps the arrivals per second a simulator accepts.
const MaxRate = 500

func (o Opts) withDefaults() (Opts, error) {
	if o.Sandbox == nil || o.BaseURL == "" || o.AdminToken == "" || o.BotSecret == "" ||
		o.OnboardingToken == "" || o.OmniToken == "" {
		return o, ErrNoSandbox
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	o.Rate = min(o.Rate, MaxRate)
	if o.Drain <= 0 {
		o.Drain = 30 * time.Second
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = 5 * time.Second
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}

// Controller starts and stops the simulator against one instance, one run at
// a time; the console's "Start demo traffic" button drives it. Its methods
// are safe for concurrent use.
type Controller struct {
	opts Opts

	mu       sync.Mutex
	run      *sim
	starting bool
	stopping bool
	last     *Summary
}

// NewController returns an idle controller. Options are checked by Start.
func NewController(opts Opts) *Controller {
	return &Controller{opts: opts}
}

// Start seeds what the simulator needs (see Seed; bounded by ctx) and starts
// traffic at rate arrivals per second (Opts.Rate when rate ≤ 0) until Stop.
// It returns ErrRunning while a run is going or stopping.
func (c *Controller) Start(ctx context.Context, rate float64) error {
	c.mu.Lock()
	if c.run != nil || c.starting {
		c.mu.Unlock()
		return ErrRunning
	}
	c.starting = true
	c.mu.Unlock()
	s, err := c.prepare(ctx, rate)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starting = false
	if err != nil {
		return err
	}
	s.start()
	c.run, c.stopping = s, false
	return nil
}

func (c *Controller) prepare(ctx context.Context, rate float64) (*sim, error) {
	opts, err := c.opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if rate > 0 {
		opts.Rate = min(rate, MaxRate)
	}
	cast, err := Seed(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("demo: prepare: %w", err)
	}
	s := newSim(opts, cast)
	if err := s.baseline(ctx); err != nil {
		return nil, fmt.Errorf("demo: prepare: %w", err)
	}
	if err := s.preflight(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// SetRate changes the arrivals per second of the running simulator.
func (c *Controller) SetRate(rate float64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run == nil || c.stopping {
		return ErrNotRunning
	}
	if rate <= 0 {
		return fmt.Errorf("demo: the rate must be positive, not %v", rate)
	}
	c.run.setRate(min(rate, MaxRate))
	return nil
}

// Stop ends arrivals, lets the journeys in flight finish while they move,
// then checks the invariants until they all hold, stop improving or ctx
// ends (see Opts.Drain), and returns the run's summary. Journeys still going
// when ctx ends are cancelled. It returns ErrNotRunning when there is no run
// (or another Stop is stopping it).
func (c *Controller) Stop(ctx context.Context) (Summary, error) {
	c.mu.Lock()
	s := c.run
	if s == nil || c.stopping {
		c.mu.Unlock()
		return Summary{}, ErrNotRunning
	}
	c.stopping = true
	c.mu.Unlock()

	sum := s.stop(ctx)

	c.mu.Lock()
	c.run, c.stopping, c.last = nil, false, &sum
	c.mu.Unlock()
	return sum, nil
}

// Status is what the console shows about the simulator.
type Status struct {
	Running  bool // traffic is flowing
	Stopping bool // arrivals ended; finishing journeys and checking invariants
	Rate     float64
	Started  time.Time
	Elapsed  time.Duration
	// Bot, Referral and Chat count the current run's journeys.
	Bot, Referral, Chat FlowStats
	InFlight            int
	// Last is the summary of the last finished run, if any.
	Last *Summary
}

// Status reports the current run, or the last one's summary.
func (c *Controller) Status() Status {
	c.mu.Lock()
	s, stopping, last := c.run, c.stopping, c.last
	c.mu.Unlock()
	st := Status{Last: last}
	if s == nil {
		return st
	}
	p := s.progress()
	st.Running, st.Stopping = !stopping, stopping
	st.Rate, st.Started, st.Elapsed = p.Rate, p.Started, p.Elapsed
	st.Bot, st.Referral, st.Chat, st.InFlight = p.Bot, p.Referral, p.Chat, p.InFlight
	return st
}

// maxStopDrains caps how many Drains Run's stop may take, however much the
// journeys and the checks keep moving.
const maxStopDrains = 10

// Run seeds, runs traffic at opts.Rate for opts.Duration (or until ctx
// ends), printing a progress line every opts.ProgressEvery, then stops (see
// Controller.Stop and Opts.Drain), prints the summary and returns it. The
// error is for a run that could not start; a run that failed — an invariant
// broken or not checked, most journeys of a flow failed — returns its
// summary (Summary.OK and Summary.Problems report it) and a nil error.
func Run(ctx context.Context, opts Opts) (Summary, error) {
	return NewController(opts).Run(ctx)
}

// Run is the package's Run on this controller, so the console sees the run
// (Status) and can stop it early (Stop; Run then returns that summary).
func (c *Controller) Run(ctx context.Context) (Summary, error) {
	opts, err := c.opts.withDefaults()
	if err != nil {
		return Summary{}, err
	}
	if err := c.Start(ctx, opts.Rate); err != nil {
		return Summary{}, err
	}
	out := opts.Progress
	fmt.Fprintf(out, "demo: simulating traffic at %.4g arrivals/s%s; Ctrl-C stops it\n", opts.Rate, forDuration(opts.Duration))

	var end <-chan time.Time
	if opts.Duration > 0 {
		t := time.NewTimer(opts.Duration)
		defer t.Stop()
		end = t.C
	}
	tick := time.NewTicker(opts.ProgressEvery)
	defer tick.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case <-end:
			break wait
		case <-tick.C:
			st := c.Status()
			if !st.Running {
				break wait
			}
			writeProgress(out, st)
		}
	}
	st := c.Status()
	if st.Running {
		fmt.Fprintf(out, "demo: stopping — %d journeys in flight finish while they move (cancelled after %s without a step), then the invariants are checked\n",
			st.InFlight, opts.Drain)
	}
	drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), maxStopDrains*opts.Drain)
	defer cancel()
	// The stop's own progress lines: journeys finishing, then the checks.
	stopped := make(chan struct{})
	var printing sync.WaitGroup
	printing.Go(func() {
		t := time.NewTicker(opts.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-stopped:
				return
			case <-t.C:
				writeProgress(out, c.Status())
			}
		}
	})
	sum, err := c.Stop(drain)
	close(stopped)
	printing.Wait()
	if errors.Is(err, ErrNotRunning) {
		// Stopped from the console: wait for that stop's summary.
		sum, err = c.awaitLast(drain)
	}
	if err != nil {
		return sum, err
	}
	sum.Write(out)
	return sum, nil
}

// awaitLast waits for a Stop in progress to finish and returns its summary.
func (c *Controller) awaitLast(ctx context.Context) (Summary, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		st := c.Status()
		if !st.Running && !st.Stopping && st.Last != nil {
			return *st.Last, nil
		}
		select {
		case <-ctx.Done():
			return Summary{}, ctx.Err()
		case <-t.C:
		}
	}
}

func forDuration(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return " for " + d.String()
}
