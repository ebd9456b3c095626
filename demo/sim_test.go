package demo

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// stoppable is a simulator whose arrivals and operator never ran, so stop
// goes straight to the journeys in flight and the checks (of an empty
// ledger).
func stoppable(t *testing.T, drain time.Duration) *sim {
	t.Helper()
	s, _, _ := newTestSim(t, &instance{answers: map[string]any{}})
	s.opts.Drain = drain
	close(s.arrivalsDone)
	close(s.operatorDone)
	return s
}

// journeyFor runs a journey of the bot flow that takes a step every every
// until it has moved for d, and reports how it ended.
func journeyFor(s *sim, d, every time.Duration) *atomic.Value {
	var ended atomic.Value
	s.mu.Lock()
	s.flows[flowBot].Started++
	s.mu.Unlock()
	s.journeys.Go(func() {
		ctx := withStep(s.jctx, s.step)
		err := func() error {
			for end := time.Now().Add(d); time.Now().Before(end); {
				if err := sleep(ctx, every); err != nil {
					return err
				}
				s.step()
			}
			return nil
		}()
		ended.Store(errors.Join(err, errors.New("ended")))
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.flows[flowBot].fail(err.Error())
			return
		}
		s.flows[flowBot].Completed++
	})
	return &ended
}

func TestStop(t *testing.T) {
	t.Parallel()

	t.Run("journeys that keep moving finish, however long the stop takes", func(t *testing.T) {
		t.Parallel()
		// Drain 1 s without progress; the journey moves every 10 ms for 6 s,
		// past half of Run's cap (ten Drains), which a wall-clock budget
		// would have given it.
		s := stoppable(t, time.Second)
		ended := journeyFor(s, 6*time.Second, 10*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), maxStopDrains*s.opts.Drain)
		defer cancel()
		sum := s.stop(ctx)
		if sum.Bot.Completed != 1 || sum.Bot.Failed != 0 || sum.Stalled != 0 {
			t.Fatalf("a moving journey: %d completed, %d failed (%v), stalled %s; ended %v",
				sum.Bot.Completed, sum.Bot.Failed, sum.Bot.Errors, sum.Stalled, ended.Load())
		}
	})

	t.Run("journeys that stop moving are cancelled after Drain, and the run says it stalled", func(t *testing.T) {
		t.Parallel()
		s := stoppable(t, 500*time.Millisecond)
		ended := journeyFor(s, time.Hour, time.Hour) // waits, never moves
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		began := time.Now()
		sum := s.stop(ctx)
		if took := time.Since(began); sum.Stalled != s.opts.Drain || sum.Bot.Failed != 1 || took > 50*time.Second {
			t.Fatalf("a stalled journey: stalled %s, %d failed, stop took %s; ended %v", sum.Stalled, sum.Bot.Failed, took, ended.Load())
		}
		if err, _ := ended.Load().(error); !errors.Is(err, context.Canceled) {
			t.Fatalf("the journey ended with %v, want cancelled", err)
		}
		if p := sum.Problems(); len(p) == 0 || !strings.Contains(strings.Join(p, "; "), "none moved for 500ms") {
			t.Fatalf("problems %q", p)
		}
	})

	t.Run("journeys still going when ctx ends are cancelled", func(t *testing.T) {
		t.Parallel()
		s := stoppable(t, time.Minute)
		ended := journeyFor(s, time.Hour, 10*time.Millisecond) // moves, never ends
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		sum := s.stop(ctx)
		if err, _ := ended.Load().(error); !errors.Is(err, context.Canceled) || sum.Stalled != 0 || sum.Bot.Failed != 1 {
			t.Fatalf("ended %v, stalled %s, %d failed", ended.Load(), sum.Stalled, sum.Bot.Failed)
		}
	})
}
