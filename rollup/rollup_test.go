package rollup_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/referral"
	"switchyard/referral/referraltest"
	"switchyard/rollup"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// testBundle is a database whose clock the test sets, the referral
// consumer's marks as the series' rows (counted by their owner, as in
// production), and the times of the marks written, to check counts against.
type testBundle struct {
	db    *store.DB
	clock *store.ManualClock
	ref   *referral.Service
	marks []time.Time
	// calls counts the calls of the series' CountFunc.
	calls atomic.Int64
}

// t0 is the manual clock's start: 2026-01-15 12:00 UTC.
var t0 = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

func setup(t *testing.T) *testBundle {
	t.Helper()
	db, clock := storetest.NewWithClock(t)
	ref, err := referral.New(context.Background(), referral.Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{db: db, clock: clock, ref: ref}
}

// rollups are Rollups of the one series rollup.IdentityConsumed.
func (b *testBundle) rollups() *rollup.Rollups {
	return rollup.New(rollup.Opts{DB: b.db, Sources: map[rollup.Series]rollup.CountFunc{
		rollup.IdentityConsumed: func(ctx context.Context, from, to time.Time) (int64, error) {
			b.calls.Add(1)
			return b.ref.ConsumedBetween(ctx, from, to)
		},
	}})
}

func (b *testBundle) mark(t *testing.T, at ...time.Time) {
	t.Helper()
	referraltest.Marks(t, b.db, referral.OutcomeR1, at...)
	b.marks = append(b.marks, at...)
}

// scan counts the marks in [from, to).
func (b *testBundle) scan(from, to time.Time) int64 {
	var n int64
	for _, m := range b.marks {
		if !m.Before(from) && m.Before(to) {
			n++
		}
	}
	return n
}

func perMinute(t *testing.T, r *rollup.Rollups, from time.Time, n int) []rollup.Bucket {
	t.Helper()
	bs, err := r.Buckets(context.Background(), rollup.Query{Series: rollup.IdentityConsumed, From: from, Step: time.Minute, N: n})
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func rowCount(t *testing.T, db *store.DB) int64 {
	t.Helper()
	var n int64
	if err := db.Read.QueryRow(`select count(*) from rollup_minutes`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRollUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a mark counts in the minute it was stamped in, on either side of a boundary", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.mark(t, t0.Add(59*time.Second+999*time.Millisecond), t0.Add(time.Minute), t0.Add(time.Minute+time.Millisecond),
			t0.Add(2*time.Minute-time.Millisecond), t0.Add(2*time.Minute))
		b.clock.Set(t0.Add(3*time.Minute + 10*time.Second))
		r := b.rollups()
		if n, err := r.RollUp(ctx, b.clock.Now()); err != nil || n == 0 {
			t.Fatalf("rolled up %d minutes: %v", n, err)
		}
		got := perMinute(t, r, t0, 4)
		for i, want := range []int64{1, 3, 1, 0} {
			if got[i].Sum != want || got[i].Peak != want || !got[i].Start.Equal(t0.Add(time.Duration(i)*time.Minute)) {
				t.Errorf("minute %d: %+v, want %d", i, got[i], want)
			}
		}
	})

	t.Run("a minute is rolled up once it has settled, and read from its owner until then", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.mark(t, t0.Add(10*time.Second), t0.Add(70*time.Second), t0.Add(71*time.Second))
		r := b.rollups()
		// 12:02:03: 12:00 settled at 12:01:05, 12:01 settles at 12:02:05.
		b.clock.Set(t0.Add(2*time.Minute + 3*time.Second))
		if _, err := r.RollUp(ctx, b.clock.Now()); err != nil {
			t.Fatal(err)
		}
		var newest int64
		if err := b.db.Read.QueryRow(`select max(minute) from rollup_minutes`).Scan(&newest); err != nil {
			t.Fatal(err)
		}
		if newest != t0.Unix()/60 {
			t.Fatalf("rolled up to minute %d, want 12:00 (%d)", newest, t0.Unix()/60)
		}
		// A transaction stamped 12:01:59 that commits late is still seen.
		b.mark(t, t0.Add(119*time.Second))
		got := perMinute(t, r, t0, 3)
		if got[0].Sum != 1 || got[1].Sum != 3 || got[2].Sum != 0 {
			t.Fatalf("buckets %+v, want 1, 3, 0", got)
		}
		b.clock.Set(t0.Add(2*time.Minute + 6*time.Second))
		if _, err := r.RollUp(ctx, b.clock.Now()); err != nil {
			t.Fatal(err)
		}
		if got := perMinute(t, r, t0, 3); got[1].Sum != 3 {
			t.Fatalf("12:01 rolled up as %d, want 3", got[1].Sum)
		}
	})

	t.Run("two processes rolling up the same minutes count each mark once", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var at []time.Time
		for i := range 300 {
			at = append(at, t0.Add(time.Duration(i*737)*time.Millisecond))
		}
		b.mark(t, at...)
		b.clock.Set(t0.Add(10 * time.Minute))
		one, two := b.rollups(), b.rollups()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, r := range []*rollup.Rollups{one, two} {
			wg.Go(func() { _, errs[i] = r.RollUp(ctx, b.clock.Now()) })
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
		// And once more each, as after a lease changed hands.
		for _, r := range []*rollup.Rollups{two, one} {
			if _, err := r.RollUp(ctx, b.clock.Now()); err != nil {
				t.Fatal(err)
			}
		}
		var sum int64
		if err := b.db.Read.QueryRow(`select sum(value) from rollup_minutes`).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		if sum != 300 {
			t.Fatalf("the rollups sum to %d, want the 300 marks", sum)
		}
		for i, bk := range perMinute(t, one, t0, 10) {
			if want := b.scan(bk.Start, bk.Start.Add(time.Minute)); bk.Sum != want {
				t.Errorf("minute %d: %d, want %d", i, bk.Sum, want)
			}
		}
	})

	t.Run("a quiet week is rolled up with a row per minute that counted something and a mark of how far", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		busy := t0.Add(-3 * 24 * time.Hour)
		b.mark(t, busy.Add(30*time.Second), busy.Add(90*time.Second))
		r := b.rollups()
		if _, err := r.RollUp(ctx, b.clock.Now()); err != nil {
			t.Fatal(err)
		}
		if n := rowCount(t, b.db); n != 3 {
			t.Fatalf("%d rows for a week with two marks, want theirs and the last minute's", n)
		}
		bs, err := r.Buckets(ctx, rollup.Query{Series: rollup.IdentityConsumed, From: busy, Step: time.Hour, N: 2})
		if err != nil {
			t.Fatal(err)
		}
		if bs[0].Sum != 2 || bs[0].Peak != 1 || bs[1].Sum != 0 {
			t.Fatalf("buckets %+v, want 2 with a peak of 1, then 0", bs)
		}
	})

	t.Run("a chart of a week reads the rollups and asks the owner only for the minutes not rolled up", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var at []time.Time
		for i := 29; i >= 0; i-- { // in time order, as the owner writes them
			at = append(at, t0.Add(-time.Duration(i)*331*time.Minute-time.Second))
		}
		b.mark(t, at...)
		b.clock.Set(t0.Add(30 * time.Second))
		r := b.rollups()
		if _, err := r.RollUp(ctx, b.clock.Now()); err != nil {
			t.Fatal(err)
		}
		b.calls.Store(0)
		from := t0.Add(-167 * time.Hour).Truncate(time.Hour)
		bs, err := r.Buckets(ctx, rollup.Query{Series: rollup.IdentityConsumed, From: from, Step: time.Hour, N: 168})
		if err != nil {
			t.Fatal(err)
		}
		// 11:59 settles at 12:00:05, before the clock's 12:00:30: only
		// 12:00 is read from the owner.
		if c := b.calls.Load(); c != 1 {
			t.Fatalf("the week's read counted %d times at the owner, want once (the current minute)", c)
		}
		var sum int64
		for _, bk := range bs {
			if want := b.scan(bk.Start, bk.Start.Add(time.Hour)); bk.Sum != want {
				t.Errorf("hour %s: %d, want %d", bk.Start.Format(time.DateTime), bk.Sum, want)
			}
			sum += bk.Sum
		}
		if sum != b.scan(from, t0.Add(time.Minute)) || sum == 0 {
			t.Fatalf("the week sums to %d, want %d", sum, b.scan(from, t0.Add(time.Minute)))
		}
	})

	t.Run("without rollups a read counts at the owner, a bucket at a time beyond the last minutes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.mark(t, t0.Add(-90*time.Minute), t0.Add(-time.Minute), t0.Add(-time.Minute), t0.Add(time.Second))
		r := b.rollups()
		bs, err := r.Buckets(ctx, rollup.Query{Series: rollup.IdentityConsumed, From: t0.Add(-4 * time.Hour), Step: 15 * time.Minute, N: 17})
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, bk := range bs {
			sum += bk.Sum
		}
		// 11:45–12:00 holds the two marks of 11:59, 12:00–12:15 the one of 12:00:01.
		if sum != 4 || bs[15].Sum != 2 || bs[15].Peak != 2 || bs[16].Sum != 1 {
			t.Fatalf("sum %d, last buckets %+v %+v; want 4, 2 with a peak of 2, then 1", sum, bs[15], bs[16])
		}
		if c := b.calls.Load(); c > 30 {
			t.Fatalf("%d counts at the owner for 17 buckets", c)
		}
	})

	t.Run("a query of no whole minutes is refused", func(t *testing.T) {
		t.Parallel()
		r := setup(t).rollups()
		for _, q := range []rollup.Query{{Series: rollup.IdentityConsumed, Step: 90 * time.Second, N: 3}, {Series: rollup.IdentityConsumed, Step: time.Minute}} {
			if _, err := r.Buckets(ctx, q); err != rollup.ErrBadQuery {
				t.Errorf("%+v: %v, want ErrBadQuery", q, err)
			}
		}
	})
}

func TestPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var at []time.Time
	for i := range 10 {
		at = append(at, t0.Add(time.Duration(i)*time.Minute))
	}
	b.mark(t, at...)
	b.clock.Set(t0.Add(11 * time.Minute))
	r := b.rollups()
	if _, err := r.RollUp(ctx, b.clock.Now()); err != nil {
		t.Fatal(err)
	}
	before := rowCount(t, b.db)

	t.Run("it deletes at most limit rows before the cutoff, oldest first", func(t *testing.T) {
		n, err := r.Prune(ctx, t0.Add(5*time.Minute), 3)
		if err != nil || n != 3 {
			t.Fatalf("pruned %d: %v, want 3", n, err)
		}
		bs := perMinute(t, r, t0, 6)
		for i, want := range []int64{0, 0, 0, 1, 1, 1} {
			if bs[i].Sum != want {
				t.Errorf("minute %d: %d, want %d", i, bs[i].Sum, want)
			}
		}
	})
	t.Run("it stops at the cutoff", func(t *testing.T) {
		n, err := r.Prune(ctx, t0.Add(5*time.Minute), 100)
		if err != nil || n != 2 {
			t.Fatalf("pruned %d: %v, want the 2 left before 12:05", n, err)
		}
		if left := rowCount(t, b.db); left != before-5 {
			t.Fatalf("%d rows left, want %d", left, before-5)
		}
	})
}

// Run rolls up in one process at a time, from the moment it starts.
func TestRun(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	ref, err := referral.New(context.Background(), referral.Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	now := db.Now()
	referraltest.Marks(t, db, referral.OutcomeR1, now.Add(-3*time.Minute), now.Add(-3*time.Minute))
	r := rollup.New(rollup.Opts{DB: db, Sources: map[rollup.Series]rollup.CountFunc{rollup.IdentityConsumed: ref.ConsumedBetween}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	testwait.Until(t, 5*time.Second, "the marks of three minutes ago rolled up", func() bool {
		var sum int64
		_ = db.Read.QueryRow(`select coalesce(sum(value), 0) from rollup_minutes`).Scan(&sum)
		return sum == 2
	})
}
