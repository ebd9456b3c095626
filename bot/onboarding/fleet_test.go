package onboarding

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// These tests run the bot's single-flight work as several instances do: two
// onboarding bots on two handles of one database (two processes on one
// SQLite file, or two instances on one PostgreSQL database). They run the
// workers themselves, without Run's gocron schedule, so that nothing but the
// lease hands the work over.

// worker runs fn(ctx) in the background until the returned stop is called,
// and stop waits for it (20 s at most). The test's end stops it too.
func worker(t *testing.T, fn func(ctx context.Context)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Errorf("the worker did not return within 20 s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitLease waits until the lease name is held by owner.
func (e *onbEnv) waitLease(name, owner string) {
	e.t.Helper()
	e.waitDB(fmt.Sprintf("lease %s held by %s", name, owner), func() bool {
		l, ok, err := e.db.Lease(context.Background(), name)
		return err == nil && ok && l.Owner == owner && l.HeldAt(e.db.Now())
	})
}

// secondInstance opens e's database a second time, as another process or
// instance does, on e's clock.
func (e *onbEnv) secondInstance(t *testing.T) *store.DB {
	t.Helper()
	opts := store.Options{Path: e.db.Path()}
	if e.clock != nil {
		opts.Clock = e.clock
	}
	return storetest.NewWith(t, opts)
}

// within polls cond until it holds (true) or d passes (false), for waits
// off the test's goroutine, where testwait.Until may not fail the test.
func within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(testwait.Every)
	}
	return true
}

// instance names a bot's lease owner and keeps its cron from ticking.
func instance(name string) func(*Opts) {
	return func(o *Opts) { o.Instance = name; o.PollInterval = time.Hour }
}

func TestConsumerAcrossInstances(t *testing.T) {
	t.Parallel()

	t.Run("a standby instance's consumer takes over within seconds when the holder stops, with no cron tick to help", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		a := e.newBot(e.db, instance("a"))
		b := e.newBot(e.secondInstance(t), instance("b"))
		stopA := worker(t, a.runConsumer)
		e.waitLease(OutboxLeaseName, "a")
		worker(t, b.runConsumer)

		e.emitNft(backend.Target{TelegramID: "7001"})
		e.waitDB("the first event handled by the holder", func() bool { return e.unprocessed() == 0 })
		stopA()
		e.emitNft(backend.Target{TelegramID: "7002"})
		e.waitDB("the second event handled by the standby", func() bool { return e.unprocessed() == 0 })
		if a.handled.Load() != 1 || b.handled.Load() != 1 {
			t.Fatalf("a handled %d, b %d; want one each", a.handled.Load(), b.handled.Load())
		}
		e.waitLease(OutboxLeaseName, "b")
	})

	t.Run("a standby takes over from a holder that died once its lease expired", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t, func(o *onbEnvOpts) { o.manualClock = true })
		ctx := context.Background()
		if held, err := e.db.AcquireLease(ctx, OutboxLeaseName, "dead-process", LeaseTTL); err != nil || !held {
			t.Fatalf("take the lease as a process that dies: %v %v", held, err)
		}
		b := e.newBot(e.secondInstance(t), instance("b"))
		worker(t, b.runConsumer)
		e.emitNft(backend.Target{TelegramID: "7003"})
		e.clock.Advance(LeaseTTL)
		e.waitDB("the event handled once the dead holder's lease expired", func() bool { return e.unprocessed() == 0 })
		e.waitLease(OutboxLeaseName, "b")
	})

	t.Run("a page slower than the lease's TTL keeps the lease: no other instance consumes meanwhile", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t, func(o *onbEnvOpts) { o.manualClock = true })
		ctx := context.Background()
		rival := e.secondInstance(t)
		a := e.newBot(e.db, instance("a"))
		var (
			once    sync.Once
			outcome = make(chan error, 1)
		)
		// Between the page's commit and its ack (outside its transaction,
		// where a slow backend keeps a consumer), 30 s pass by the clock in
		// three steps, more than the lease's 25 s.
		a.afterCommit = func(_, _ []contract.EventID) {
			once.Do(func() {
				outcome <- func() error {
					for range 3 {
						before, _, err := e.db.Lease(ctx, OutboxLeaseName)
						if err != nil {
							return err
						}
						e.clock.Advance(10 * time.Second)
						renewed := within(15*time.Second*testwait.Slack, func() bool {
							l, _, err := e.db.Lease(ctx, OutboxLeaseName)
							return err == nil && l.Owner == "a" && l.ExpiresAt.After(before.ExpiresAt)
						})
						if !renewed {
							return fmt.Errorf("the lease was not renewed while the page was in hand, %v after its last renewal",
								e.clock.Now().Sub(before.ExpiresAt.Add(-LeaseTTL)))
						}
					}
					held, err := rival.AcquireLease(ctx, OutboxLeaseName, "rival", LeaseTTL)
					if err != nil {
						return err
					}
					if held {
						return fmt.Errorf("another instance took the lease %s while the holder still handled its page", OutboxLeaseName)
					}
					return nil
				}()
			})
		}
		worker(t, a.runConsumer)
		e.waitLease(OutboxLeaseName, "a")
		e.emitNft(backend.Target{TelegramID: "7004"})
		select {
		case err := <-outcome:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(3 * time.Minute):
			t.Fatal("the page was not handled within 3 minutes")
		}
		e.waitDB("the slow page acked", func() bool { return e.unprocessed() == 0 })
	})
}

func TestUpdatesAcrossInstances(t *testing.T) {
	t.Parallel()
	t.Run("a standby instance's updates worker takes over within seconds when the holder stops", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		a := e.newBot(e.db, instance("a"))
		b := e.newBot(e.secondInstance(t), instance("b"))
		stopA := worker(t, a.runUpdates)
		e.waitLease(UpdatesLeaseName, "a")
		worker(t, b.runUpdates)
		done := func() int { return e.count(`select count(*) from bot_updates where status = 'done'`) }

		if _, err := e.tgBot().Send(telego.User{ID: 7101, FirstName: "Алиса"}, "/help"); err != nil {
			t.Fatal(err)
		}
		e.waitDB("the first update handled by the holder", func() bool { return done() == 1 })
		stopA()
		if _, err := e.tgBot().Send(telego.User{ID: 7102, FirstName: "Борис"}, "/help"); err != nil {
			t.Fatal(err)
		}
		e.waitDB("the second update handled by the standby", func() bool { return done() == 2 })
		e.waitLease(UpdatesLeaseName, "b")
	})
}

func TestPruneAcrossInstances(t *testing.T) {
	t.Parallel()
	t.Run("instances whose midnights come at once prune once", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t, func(o *onbEnvOpts) { o.manualClock = true })
		ctx := context.Background()
		bots := []*Bot{e.newBot(e.db, instance("a")), e.newBot(e.secondInstance(t), instance("b")), e.newBot(e.secondInstance(t), instance("c"))}
		old := e.clock.Now().AddDate(0, 0, -RETENTION_DAYS-1)
		for i := range 10 {
			if _, err := e.db.Write.Exec(`insert into bot_processed_events (outbox_event_id, event_type, user_key, outcome, emitted_at, processed_at)
				values (?, 'status_nft_activated', 'tg:1', 'handled', ?, ?)`, 1000+i, store.TS(old), store.TS(old)); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, b := range bots {
			wg.Go(func() {
				<-start
				b.scheduledPrune(ctx)
			})
		}
		close(start)
		wg.Wait()
		if n := e.count(`select count(*) from bot_processed_events`); n != 0 {
			t.Fatalf("%d old ledger rows left", n)
		}
		if n := strings.Count(e.logs.String(), "onboarding bot pruned"); n != 1 {
			t.Fatalf("%d prunes ran, want one for the three instances", n)
		}
		// The next day's midnight prunes again.
		e.clock.Advance(24 * time.Hour)
		bots[1].scheduledPrune(ctx)
		if n := strings.Count(e.logs.String(), "onboarding bot pruned"); n != 2 {
			t.Fatalf("%d prunes after the next midnight, want 2", n)
		}
	})
}
