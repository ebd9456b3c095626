package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"switchyard/telegram/fakebot"
)

// flow names one of the three flows.
type flow int

const (
	flowBot flow = iota
	flowReferral
	flowChat
)

func (f flow) String() string {
	return [...]string{"bot", "referral", "chat"}[f]
}

const (
	// maxInFlight caps the journeys running at once; arrivals beyond it are
	// skipped (the instance is slower than the chosen rate).
	maxInFlight = 256
	// stepTimeout bounds each wait for the instance (a bot's answer).
	stepTimeout = 20 * time.Second
	// operatorEvery is how often the operator looks at the inbox.
	operatorEvery = 700 * time.Millisecond
	// checkEvery is how often stopping re-checks the invariants.
	checkEvery = 500 * time.Millisecond
)

// sim is one simulator run: the arrivals, the journeys in flight, the
// operator, and the ledger of what was done, which the invariants are
// checked against.
type sim struct {
	opts       Opts
	c          *client
	log        *slog.Logger
	cast       Cast
	onboarding *fakebot.Bot
	inbox      *fakebot.Bot
	run        string // a short id of this run, in codes and slugs
	idBase     int64  // Telegram ids of this run's users are idBase+n
	seq        atomic.Int64
	rate       atomic.Uint64 // math.Float64bits of arrivals per second

	rngMu sync.Mutex
	rng   *rand.Rand

	// journeys run under jctx; cancelJourneys ends them.
	jctx           context.Context
	cancelJourneys context.CancelFunc
	journeys       sync.WaitGroup
	inFlight       atomic.Int64
	// lastStep is when a journey last moved (UnixNano): an answer of the
	// instance, a bot's message, a journey's end. Stopping waits for the
	// journeys in flight while they move; stalled is set when it gave up.
	lastStep atomic.Int64
	stalled  atomic.Bool
	// arrivals run under actx until stopArrivals, the operator under octx
	// until stopOperator (after the journeys ended).
	actx         context.Context
	stopArrivals context.CancelFunc
	arrivalsDone chan struct{}
	octx         context.Context
	stopOperator context.CancelFunc
	operatorDone chan struct{}

	mu       sync.Mutex
	started  time.Time
	stopped  time.Time
	arrivals int
	skipped  int
	flows    [3]FlowStats
	led      ledger
}

func newSim(opts Opts, cast Cast) *sim {
	now := time.Now()
	s := &sim{
		opts:       opts,
		c:          newClient(opts),
		log:        opts.Logger.With(slog.String("subsystem", "demo")),
		cast:       cast,
		onboarding: opts.Sandbox.Bot(opts.OnboardingToken),
		inbox:      opts.Sandbox.Bot(opts.OmniToken),
		run:        fmt.Sprintf("%x", now.Unix()%0xfffff),
		// A new block of a million ids every second keeps runs on one
		// database apart: Telegram ids are unique per account.
		idBase: 1_000_000_000_000 + (now.Unix()%1_000_000)*1_000_000,
		rng:    rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		led:    newLedger(),
	}
	s.rate.Store(math.Float64bits(opts.Rate))
	s.jctx, s.cancelJourneys = context.WithCancel(context.Background())
	s.actx, s.stopArrivals = context.WithCancel(context.Background())
	s.octx, s.stopOperator = context.WithCancel(context.Background())
	s.arrivalsDone, s.operatorDone = make(chan struct{}), make(chan struct{})
	return s
}

func (s *sim) setRate(r float64) { s.rate.Store(math.Float64bits(r)) }

func (s *sim) currentRate() float64 { return math.Float64frombits(s.rate.Load()) }

// start begins arrivals and the operator.
func (s *sim) start() {
	s.mu.Lock()
	s.started = time.Now()
	s.mu.Unlock()
	go func() { defer close(s.arrivalsDone); s.arrive() }()
	go func() { defer close(s.operatorDone); s.operate(s.octx) }()
	s.log.Info("demo traffic started", slog.Float64("rate", s.currentRate()), slog.String("run", s.run))
}

// arrive starts a journey every 1/rate seconds (±20 %), the flows in turn.
func (s *sim) arrive() {
	t := time.NewTimer(0)
	defer t.Stop()
	next := time.Now()
	for n := 0; ; n++ {
		select {
		case <-s.actx.Done():
			return
		case <-t.C:
		}
		f := flow(n % 3)
		s.mu.Lock()
		s.arrivals++
		full := s.inFlight.Load() >= maxInFlight
		if full {
			s.skipped++
		} else {
			s.flows[f].Started++
		}
		s.mu.Unlock()
		if !full {
			s.inFlight.Add(1)
			s.journeys.Go(func() {
				defer s.inFlight.Add(-1)
				s.journey(f)
			})
		}
		// The schedule is kept in absolute time, so a late wake-up (a busy
		// machine) does not lower the rate; a stall of over a second is not
		// made up in a burst.
		next = next.Add(time.Duration(float64(time.Second) / s.currentRate() * (0.8 + 0.4*s.float())))
		if now := time.Now(); next.Before(now.Add(-time.Second)) {
			next = now
		}
		t.Reset(time.Until(next))
	}
}

// journey runs one journey of flow f and counts how it ended.
func (s *sim) journey(f flow) {
	ctx := withStep(s.jctx, s.step)
	var err error
	switch f {
	case flowBot:
		err = s.botJourney(ctx)
	case flowReferral:
		err = s.referralJourney(ctx)
	case flowChat:
		err = s.chatJourney(ctx)
	}
	s.step()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		reason := err.Error()
		switch {
		case errors.Is(err, context.Canceled) && s.stalled.Load():
			reason = fmt.Sprintf("cancelled: no journey moved for %s", s.opts.Drain)
		case errors.Is(err, context.Canceled):
			reason = "stopped before it finished"
		}
		s.flows[f].fail(reason)
		s.log.Info("demo journey failed", slog.String("flow", f.String()), slog.String("outcome", "failed"), slog.Any("err", err))
		return
	}
	s.flows[f].Completed++
}

// stop ends arrivals, waits for the journeys in flight while they move (see
// awaitJourneys), stops the operator and checks the invariants (settle).
func (s *sim) stop(ctx context.Context) Summary {
	s.stopArrivals()
	<-s.arrivalsDone
	s.mu.Lock()
	s.stopped = time.Now()
	s.mu.Unlock()

	s.awaitJourneys(ctx)
	s.stopOperator()
	<-s.operatorDone
	defer s.cancelJourneys()

	inv := s.settle(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := Summary{
		Started: s.started, Elapsed: s.stopped.Sub(s.started), Rate: s.currentRate(),
		Arrivals: s.arrivals, Skipped: s.skipped,
		Bot: s.flows[flowBot].clone(), Referral: s.flows[flowReferral].clone(), Chat: s.flows[flowChat].clone(),
		Invariants: inv,
	}
	sum.Bot.Detail, sum.Referral.Detail, sum.Chat.Detail = s.led.details()
	if s.stalled.Load() {
		sum.Stalled = s.opts.Drain
	}
	s.log.Info("demo traffic stopped", slog.String("run", s.run), slog.Int("arrivals", sum.Arrivals), slog.Bool("passed", sum.OK()))
	return sum
}

// awaitJourneys waits for the journeys in flight to end for as long as they
// move: a busy machine makes every step slow, not the journeys wrong, so
// there is no deadline on the whole. It cancels them once none has moved
// for opts.Drain (the instance stopped answering), or when ctx ends.
func (s *sim) awaitJourneys(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.journeys.Wait(); close(done) }()
	s.step() // the wait starts now, however long ago the last step was
	t := time.NewTimer(s.opts.Drain)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			s.cancelJourneys()
			<-done
			return
		case <-t.C:
			if idle := s.sinceStep(); idle < s.opts.Drain {
				t.Reset(s.opts.Drain - idle)
				continue
			}
			s.stalled.Store(true)
			s.cancelJourneys()
			<-done
			return
		}
	}
}

// step records that a journey moved.
func (s *sim) step() { s.lastStep.Store(time.Now().UnixNano()) }

// sinceStep is how long ago a journey last moved.
func (s *sim) sinceStep() time.Duration { return time.Since(time.Unix(0, s.lastStep.Load())) }

// progressSnapshot is the state of the run for Status.
type progressSnapshot struct {
	Rate                float64
	Started             time.Time
	Elapsed             time.Duration
	Bot, Referral, Chat FlowStats
	InFlight            int
}

func (s *sim) progress() progressSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := time.Now()
	if !s.stopped.IsZero() {
		end = s.stopped
	}
	return progressSnapshot{
		Rate: s.currentRate(), Started: s.started, Elapsed: end.Sub(s.started),
		Bot: s.flows[flowBot].clone(), Referral: s.flows[flowReferral].clone(), Chat: s.flows[flowChat].clone(),
		InFlight: int(s.inFlight.Load()),
	}
}

// next is a number unique in this run.
func (s *sim) next() int64 { return s.seq.Add(1) }

// float is a random number in [0, 1).
func (s *sim) float() float64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Float64()
}

// intn is a random number in [0, n).
func (s *sim) intn(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.IntN(n)
}

// chance is true with probability p.
func (s *sim) chance(p float64) bool { return s.float() < p }

// pause is a user's think time between two actions: 50–250 ms.
func (s *sim) pause(ctx context.Context) error {
	d := time.Duration(50+s.intn(200)) * time.Millisecond
	return sleep(ctx, d)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// preflightWait bounds how long the simulator waits for the onboarding bot
// to answer before its first arrival.
const preflightWait = 15 * time.Second

// ErrBotsDeaf is a sandbox whose onboarding bot does not answer.
var ErrBotsDeaf = errors.New("demo: the onboarding bot does not answer in the sandbox. " +
	"If this database served an earlier process, the bots' saved update offsets may be ahead of this process's " +
	"fresh sandbox, which numbers updates from 1 again; start the demo on a new --db file")

// preflight waits until the onboarding bot answered a seeded leader, so a
// sandbox whose bots hear nothing fails at once with the likely reason
// instead of every journey timing out.
func (s *sim) preflight(ctx context.Context) error {
	for _, l := range s.cast.Leaders {
		if l.TelegramID == 0 || l.Blocked {
			continue
		}
		if _, err := s.botSays(ctx, l.TelegramID, 0, anyMessage, preflightWait); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return ErrBotsDeaf
		}
		return nil
	}
	return nil
}
