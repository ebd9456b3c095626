package web

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"switchyard/referral"
	"switchyard/referral/referraltest"
	"switchyard/store/storetest"
)

// The console counts each series through its owner and keeps the counts of
// the minutes that are over. (That the owners' counts match a scan of their
// table is store's TestCountByIDMatchesAScan.)
func TestPerMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	ref, err := referral.New(ctx, referral.Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{DB: db, AdminToken: "admin-token-0123456789abcdef", Referral: ref})
	start := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	var marks []time.Time
	at := start
	for range 600 {
		if rng.IntN(4) > 0 {
			at = at.Add(time.Duration(rng.IntN(20)) * time.Second)
		}
		marks = append(marks, at)
	}
	referraltest.Marks(t, db, referral.OutcomeR1, marks...)
	scan := func(from, to time.Time) int64 {
		var n int64
		for _, m := range marks {
			if !m.Before(from) && m.Before(to) {
				n++
			}
		}
		return n
	}

	t.Run("finished minutes are counted once and kept", func(t *testing.T) {
		now := start.Add(10 * time.Minute)
		first, err := s.perMinute(ctx, identityConsumed, now)
		if err != nil {
			t.Fatal(err)
		}
		key := minuteKey(start.Add(2 * time.Minute))
		if n, ok := s.minutes.get(identityConsumed, key); !ok || n != first[key] || n != scan(start.Add(2*time.Minute), start.Add(3*time.Minute)) {
			t.Fatalf("cached %d (%v), counted %d", n, ok, first[key])
		}
		if _, ok := s.minutes.get(identityConsumed, minuteKey(now)); ok {
			t.Fatal("the current minute was cached as final")
		}
	})
	t.Run("a series whose owner is not wired counts nothing", func(t *testing.T) {
		bare := New(Options{DB: db, AdminToken: "admin-token-0123456789abcdef"})
		counts, err := bare.perMinute(ctx, identityConsumed, start.Add(10*time.Minute))
		if err != nil || len(counts) != 0 {
			t.Fatalf("counts %v err %v", counts, err)
		}
		if n, err := bare.since(ctx, identityConsumed, start); err != nil || n != 0 {
			t.Fatalf("since: %d %v", n, err)
		}
	})
}
