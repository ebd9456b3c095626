package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

func TestManualClockMoves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a move wakes a sleep judged by the store's clock, and OnClockMove hears it", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		heard := make(chan struct{}, 1)
		stop := db.OnClockMove(func() { heard <- struct{}{} })
		woke := make(chan bool, 1)
		go func() { woke <- db.Sleep(ctx, time.Hour) }()
		// The sleeper may not be listening yet: move until it wakes.
		deadline := time.After(10 * time.Second)
		for done := false; !done; {
			clock.Advance(time.Minute)
			<-heard
			select {
			case ok := <-woke:
				if !ok {
					t.Fatal("Sleep reported its context ended")
				}
				done = true
			case <-deadline:
				t.Fatal("an hour's Sleep did not wake at a move of the clock")
			case <-time.After(10 * time.Millisecond):
			}
		}
		stop()
		clock.Advance(time.Minute)
		select {
		case <-heard:
			t.Fatal("heard a move after stop")
		default:
		}
	})

	t.Run("an advance carries the live leases forward and leaves the expired ones expired", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		if held, err := db.AcquireLease(ctx, "live", "me", 30*time.Second); err != nil || !held {
			t.Fatalf("acquire live = %v, %v", held, err)
		}
		if held, err := db.AcquireLease(ctx, "dead", "gone", time.Second); err != nil || !held {
			t.Fatalf("acquire dead = %v, %v", held, err)
		}
		clock.Advance(2 * time.Second) // "dead" expires
		now, err := db.AdvanceClock(ctx, time.Hour)
		if err != nil || !now.Equal(clock.Now()) {
			t.Fatalf("AdvanceClock = %v, %v; the clock says %v", now, err, clock.Now())
		}
		live, _, err := db.Lease(ctx, "live")
		if err != nil || !live.HeldAt(now) || live.Owner != "me" {
			t.Fatalf("the live lease after an hour's advance: %+v, %v", live, err)
		}
		if held, err := db.AcquireLease(ctx, "live", "thief", time.Minute); err != nil || held {
			t.Fatalf("another owner took the live lease after the advance: %v, %v", held, err)
		}
		dead, _, _ := db.Lease(ctx, "dead")
		if dead.HeldAt(now) {
			t.Fatalf("an expired lease came back to life: %+v", dead)
		}
	})

	t.Run("AdvanceClock refuses the system clock and a move that is not forward", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		if _, err := db.AdvanceClock(ctx, time.Minute); !errors.Is(err, store.ErrClockNotManual) {
			t.Fatalf("AdvanceClock on the system clock = %v", err)
		}
		mdb, clock := storetest.NewWithClock(t)
		before := clock.Now()
		for _, d := range []time.Duration{0, -time.Minute} {
			if _, err := mdb.AdvanceClock(ctx, d); err == nil || !clock.Now().Equal(before) {
				t.Fatalf("AdvanceClock(%v) = %v; the clock moved to %v", d, err, clock.Now())
			}
		}
	})
}
