package web

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

// The id search must count exactly what a scan of the timestamps counts,
// with gaps in the ids and several rows in one instant.
func TestCountByIDMatchesAScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	s := &Server{opts: Options{DB: db}}
	start := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		at, id := start, int64(0)
		for i := range 600 {
			id += 1 + rng.Int64N(3) // gaps, as deleted or rolled-back rows leave
			if rng.IntN(4) > 0 {
				at = at.Add(time.Duration(rng.IntN(20)) * time.Second)
			}
			if _, err := tx.Exec(`insert into referral_processed_messages (id, mark, user_id, outcome, processed_at) values (?, ?, 'u', 'R1', ?)`,
				id, fmt.Sprint("m", i), store.TS(at)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	scan := func(from, to time.Time) int64 {
		var n int64
		q := `select count(*) from referral_processed_messages where processed_at >= ?`
		args := []any{store.TS(from)}
		if !to.IsZero() {
			q, args = q+` and processed_at < ?`, append(args, store.TS(to))
		}
		if err := db.Read.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 200 {
		from := start.Add(time.Duration(rng.IntN(4000)-200) * time.Second)
		to := from.Add(time.Duration(rng.IntN(600)) * time.Second)
		if rng.IntN(5) == 0 {
			to = time.Time{}
		}
		got, err := s.countBetween(ctx, identityConsumed, from, to)
		if err != nil {
			t.Fatal(err)
		}
		if want := scan(from, to); got != want {
			t.Fatalf("[%v, %v): counted %d by id, %d by scan", from, to, got, want)
		}
	}
	t.Run("an empty table counts zero", func(t *testing.T) {
		s := &Server{opts: Options{DB: storetest.New(t)}}
		if n, err := s.countBetween(ctx, chatInbound, start, time.Time{}); err != nil || n != 0 {
			t.Fatalf("n %d err %v", n, err)
		}
	})
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
}
