package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Clock tells the time. Every domain rule reads time from the store's clock so
// tests can move it.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real time.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a clock that tests set and advance. Its zero value starts at
// the zero time; use NewManualClock for a realistic start. Whoever waits on
// the time (a worker's next poll, a long poll, a schedule) hears every move
// through OnMove, so that a move takes effect at once rather than at the
// next poll of real time.
type ManualClock struct {
	mu   sync.Mutex
	now  time.Time
	subs map[*func()]struct{}
}

// NewManualClock returns a clock standing at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t.UTC()} }

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.UTC()
	c.mu.Unlock()
	c.moved()
}

// Advance moves the clock forward by d, and returns the time it then tells.
func (c *ManualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	c.mu.Unlock()
	c.moved()
	return now
}

// OnMove calls fn after every Set and Advance, until stop is called. fn runs
// on the goroutine that moved the clock: it must be quick and must not
// block (wake something up).
func (c *ManualClock) OnMove(fn func()) (stop func()) {
	key := &fn
	c.mu.Lock()
	if c.subs == nil {
		c.subs = map[*func()]struct{}{}
	}
	c.subs[key] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.subs, key)
		c.mu.Unlock()
	}
}

// moved tells the subscribers of OnMove.
func (c *ManualClock) moved() {
	c.mu.Lock()
	fns := make([]func(), 0, len(c.subs))
	for f := range c.subs {
		fns = append(fns, *f)
	}
	c.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// movable is a clock that tells when it is moved (ManualClock).
type movable interface {
	OnMove(fn func()) (stop func())
}

// OnClockMove calls fn whenever the store's clock is moved by hand (a
// ManualClock's Set or Advance), until stop is called; with the system
// clock, which only runs, it does nothing. Whoever waits for the store's
// time to come — a worker's next poll, a long poll, an interval — wakes
// with it and looks again, so that a test that moves the clock need not
// wait out a poll of real time. fn must be quick and must not block.
func (db *DB) OnClockMove(fn func()) (stop func()) {
	if m, ok := db.Clock.(movable); ok {
		return m.OnMove(fn)
	}
	return func() {}
}

// Sleep waits d of real time, or less when the store's clock is moved by
// hand meanwhile (OnClockMove), so that a loop that sleeps between passes
// judged by the store's time looks again at once. It reports false when
// ctx ended first. With the system clock it is the package's Sleep.
func (db *DB) Sleep(ctx context.Context, d time.Duration) bool {
	m, ok := db.Clock.(movable)
	if !ok {
		return Sleep(ctx, d)
	}
	moved := make(chan struct{}, 1)
	stop := m.OnMove(func() {
		select {
		case moved <- struct{}{}:
		default:
		}
	})
	defer stop()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-moved:
		return true
	case <-ctx.Done():
		return false
	}
}

// ErrClockNotManual refuses AdvanceClock on a database whose clock is not a
// ManualClock.
var ErrClockNotManual = errors.New("store: the clock is not manual")

// AdvanceClock moves the database's manual clock forward by d (above zero)
// as if the processes on it had lived through d: every lease live now
// (store_leases: the single-flight locks, a consumer group's members and
// partitions, the sandbox's claims) is carried forward by d first, so that
// its holder, whose renewals could not run in a moment that never passed,
// keeps it — without this, a move past a lease's TTL would take every lease
// away from its living holder at once, failing the fenced work in hand. A
// lease that had expired stays expired. It returns the time the clock then
// tells. A test moves the clock of a running instance with it
// (POST /admin/api/clock/advance); ManualClock.Advance moves the time alone.
func (db *DB) AdvanceClock(ctx context.Context, d time.Duration) (time.Time, error) {
	mc, ok := db.Clock.(*ManualClock)
	if !ok {
		return time.Time{}, ErrClockNotManual
	}
	if d <= 0 {
		return time.Time{}, fmt.Errorf("store: advance the clock by %v: only forward", d)
	}
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `select name, expires_at from store_leases where expires_at > ?`, TS(db.Now()))
		if err != nil {
			return err
		}
		type live struct {
			name string
			exp  Timestamp
		}
		var leases []live
		for rows.Next() {
			var l live
			if err := rows.Scan(&l.name, &l.exp); err != nil {
				rows.Close()
				return err
			}
			leases = append(leases, l)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, l := range leases {
			if _, err := tx.ExecContext(ctx, `update store_leases set expires_at = ? where name = ? and expires_at = ?`,
				TS(l.exp.Add(d)), l.name, l.exp); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("store: carry the leases forward: %w", err)
	}
	return mc.Advance(d), nil
}
