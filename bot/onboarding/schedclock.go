package onboarding

import (
	"sync"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"

	"switchyard/store"
)

// schedulerClock is the option that sets the clock of the bot's gocron
// schedules (the outbox poll, the midnight prune): none, the real time,
// unless the store's clock is moved by hand (a test's, store.ManualClock).
// Then the schedules run on a fake clock that follows the store's — every
// move of it moves the fake, which fires what came due — so that a test
// that moves the clock past midnight sees the prune. stop ends the
// following.
func schedulerClock(db *store.DB) (opts []gocron.SchedulerOption, stop func()) {
	if _, manual := db.Clock.(*store.ManualClock); !manual {
		return nil, func() {}
	}
	var mu sync.Mutex
	fc := clockwork.NewFakeClockAt(db.Now())
	stop = db.OnClockMove(func() {
		mu.Lock()
		defer mu.Unlock()
		if d := db.Now().Sub(fc.Now()); d > 0 {
			fc.Advance(d)
		}
	})
	return []gocron.SchedulerOption{gocron.WithClock(fc)}, stop
}
