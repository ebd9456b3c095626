package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// AcquireLease takes the lease name for owner until now+ttl, when it is free,
// expired, or already owner's (then it is renewed). It reports whether owner
// holds the lease afterwards. This is the single-flight lock of the specs
// (their Redlock): work guarded by a lease runs in one process at a time.
func (db *DB) AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	var held bool
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		now, err := db.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		held, err = acquireLeaseTx(ctx, tx, name, owner, TS(now), ttl)
		return err
	})
	return held, err
}

// leaseNow is the time lease expiries are stored in and judged by: the
// store's clock, except on PostgreSQL with the system clock, where it is the
// database server's, so that every instance on one database judges a lease
// by the same clock however far their own clocks drift.
func (db *DB) leaseNow(ctx context.Context, tx *sql.Tx) (time.Time, error) {
	if _, system := db.Clock.(SystemClock); !system || !db.Postgres() {
		return db.Now(), nil
	}
	var now time.Time
	if err := tx.QueryRowContext(ctx, `select clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("store: read the database clock: %w", err)
	}
	return now.UTC(), nil
}

const acquireLeaseQuery = `
	insert into store_leases (name, owner, expires_at) values (?, ?, ?)
	on conflict (name) do update set owner = excluded.owner, expires_at = excluded.expires_at
	where store_leases.expires_at <= ? or store_leases.owner = excluded.owner`

func acquireLeaseTx(ctx context.Context, tx *sql.Tx, name, owner string, now Timestamp, ttl time.Duration) (bool, error) {
	res, err := tx.ExecContext(ctx, acquireLeaseQuery, name, owner, TS(now.Add(ttl)), now)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// RenewLease extends owner's unexpired lease to now+ttl. It reports false when
// owner no longer holds it (it expired and someone else took it).
func (db *DB) RenewLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	var held bool
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		now, err := db.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx,
			`update store_leases set expires_at = ? where name = ? and owner = ? and expires_at > ?`,
			TS(now.Add(ttl)), name, owner, TS(now))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		held = n > 0
		return err
	})
	return held, err
}

// ReleaseLease gives up owner's lease; releasing a lease one does not hold is a no-op.
func (db *DB) ReleaseLease(ctx context.Context, name, owner string) error {
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `delete from store_leases where name = ? and owner = ?`, name, owner)
		return err
	})
	if err == nil {
		db.leases.released(name)
	}
	return err
}

// Lease is a lease as stored: who took it last and until when. A lease whose
// ExpiresAt has passed is free, whoever its Owner.
type Lease struct {
	Name      string
	Owner     string
	ExpiresAt time.Time
}

// HeldAt reports whether the lease is held by someone at t.
func (l Lease) HeldAt(t time.Time) bool { return l.Owner != "" && l.ExpiresAt.After(t) }

// Lease reads the lease name (read pool). ok is false when nobody ever took
// it, or its last holder released it with ReleaseLease.
func (db *DB) Lease(ctx context.Context, name string) (l Lease, ok bool, err error) {
	var exp Timestamp
	err = db.Read.QueryRowContext(ctx, `select owner, expires_at from store_leases where name = ?`, name).Scan(&l.Owner, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("store: read lease %s: %w", name, err)
	}
	l.Name, l.ExpiresAt = name, exp.Time
	return l, true, nil
}

// NewOwnerID returns a lease owner id that names this process and is unique
// to the call: hostname:pid:random. Two runners in one process get two ids,
// as they must: a lease taken by one owner is renewed, not refused, when the
// same owner asks again.
func NewOwnerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// DefaultLeaseTTL is the time to live of a RunExclusive lease when
// LeaseOpts.TTL is zero.
const DefaultLeaseTTL = 20 * time.Second

// ErrLeaseLost is the cause (context.Cause) of the cancellation of a
// RunExclusive function's context when the lease was lost: another owner took
// it, or it could not be renewed in time.
var ErrLeaseLost = errors.New("store: lease lost")

// LeaseOpts configure RunExclusive.
type LeaseOpts struct {
	// Name names the lease, e.g. "telegram:sender:<bot id>". Required.
	Name string
	// Owner names the runner in the lease row and the logs; NewOwnerID()
	// when empty. It must be this runner's alone: a lease lets its own
	// owner in again, so two runners with one owner would run together.
	Owner string
	// TTL is how long the lease outlives its last renewal: how long a
	// standby waits for a holder that died without releasing it
	// (DefaultLeaseTTL when zero). The holder renews every TTL/3 and stops
	// its work when it has not managed to for 2/3 of the TTL, so the work
	// has the last third to wind down before anyone else may take over.
	TTL time.Duration
	// Logger gets the runner's lines (taken, standing by, lost); nil
	// discards. Give it the attributes that say whose work it is.
	Logger *slog.Logger
}

// ExclusiveFunc is work run under a lease by RunExclusive. ctx is cancelled,
// with cause ErrLeaseLost, when the lease is lost, and when RunExclusive's own
// ctx ends; fn must then wind down promptly (within TTL/3) and return. prev
// is the lease as it stood before this owner took it, when another owner
// held it last: that owner's work ended by prev.ExpiresAt (its release time,
// or its expiry), which is what a caller needs to let rate limits it kept in
// memory run out. prev is the zero Lease when this owner held it last or
// nobody did.
type ExclusiveFunc func(ctx context.Context, prev Lease) error

// RunExclusive runs fn while holding the lease opts.Name, so that across all
// processes on the database at most one fn of that name runs at a time. It
// waits, polling, while another owner holds the lease; takes it when it is
// released or expires; renews it while fn runs; cancels fn's context as soon
// as the lease is lost or could not be renewed in time — before it expires,
// so two holders never overlap while the holder's renewals keep trying —;
// releases it when fn returns, so that a standby takes over at its next look
// (within a second) rather than at the expiry; and after a loss stands by
// again. It logs once when it finds the lease held by another owner, once
// when it takes it, and when it loses it.
//
// RunExclusive returns when ctx ends (nil while standing by; fn's error when
// fn was running), or when fn returns by itself (not because the lease was
// lost): then it returns fn's error. Database errors while taking the lease
// are logged and retried, never returned.
func (db *DB) RunExclusive(ctx context.Context, opts LeaseOpts, fn ExclusiveFunc) error {
	r := newExclusive(db, opts)
	return r.run(ctx, fn)
}

// exclusive is one RunExclusive call.
type exclusive struct {
	db    *DB
	name  string
	owner string
	ttl   time.Duration
	// poll is how often a standby looks at the lease and a holder checks
	// its renewal: TTL/20 within [10 ms, 1 s].
	poll time.Duration
	log  *slog.Logger
}

func newExclusive(db *DB, opts LeaseOpts) *exclusive {
	if opts.Name == "" {
		panic("store: RunExclusive needs a lease name")
	}
	if opts.Owner == "" {
		opts.Owner = NewOwnerID()
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultLeaseTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &exclusive{
		db:    db,
		name:  opts.Name,
		owner: opts.Owner,
		ttl:   opts.TTL,
		poll:  min(max(opts.TTL/20, 10*time.Millisecond), time.Second),
		log:   opts.Logger.With(slog.String("lease", opts.Name), slog.String("owner", opts.Owner)),
	}
}

func (r *exclusive) run(ctx context.Context, fn ExclusiveFunc) error {
	var (
		standingBy string // the holder last logged as such; "" when not standing by
		failing    bool   // the last attempt to take the lease failed (logged once)
	)
	for ctx.Err() == nil {
		// A release in this process wakes the standby at once (leaseWakes);
		// the channel is taken before the look so that none is missed.
		released := r.db.leases.wait(r.name)
		prev, held, at, err := r.take(ctx)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			if !failing {
				r.log.Warn("could not take the lease; will retry", slog.Any("err", err))
				failing = true
			}
		case !held:
			failing = false
			if prev.Owner != standingBy {
				r.log.Info("lease held by another process; standing by",
					slog.String("holder", prev.Owner), slog.Time("held_until", prev.ExpiresAt))
				standingBy = prev.Owner
			}
		default:
			failing = false
			var attrs []any
			if prev.Owner != "" {
				attrs = append(attrs, slog.String("previous_owner", prev.Owner))
			}
			if standingBy != "" {
				r.log.Info("took over the lease from another process", attrs...)
			} else {
				r.log.Info("lease taken", attrs...)
			}
			standingBy = ""
			ferr, lost := r.hold(ctx, prev, at, fn)
			if !lost {
				return ferr
			}
			continue // the lease was lost: take it again, or stand by
		}
		t := time.NewTimer(r.poll)
		select {
		case <-t.C:
		case <-released:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
	return nil
}

// take takes the lease if it is free, expired or already this owner's. prev
// is the lease as it stood, when another owner held it last; at is the time
// the lease's expiry counts from (read before the write, so it is never
// later than the one stored).
func (r *exclusive) take(ctx context.Context) (prev Lease, held bool, at time.Time, err error) {
	// A standby reads first: no write while the holder is alive.
	cur, ok, err := r.db.Lease(ctx, r.name)
	if err != nil {
		return Lease{}, false, time.Time{}, err
	}
	at = r.db.Now()
	if ok && cur.Owner != r.owner && cur.HeldAt(at) {
		return cur, false, at, nil
	}
	err = r.db.Tx(ctx, func(tx *sql.Tx) error {
		prev = Lease{}
		var exp Timestamp
		err := tx.QueryRowContext(ctx, `select owner, expires_at from store_leases where name = ?`, r.name).Scan(&prev.Owner, &exp)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			prev = Lease{}
		case err != nil:
			return err
		default:
			prev.Name, prev.ExpiresAt = r.name, exp.Time
		}
		now, err := r.db.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		held, err = acquireLeaseTx(ctx, tx, r.name, r.owner, TS(now), r.ttl)
		return err
	})
	if err != nil {
		return Lease{}, false, time.Time{}, fmt.Errorf("store: take lease %s: %w", r.name, err)
	}
	if prev.Owner == r.owner {
		prev = Lease{}
	}
	return prev, held, at, nil
}

// renewal is the answer of one renewal: held (or err) as of at.
type renewal struct {
	at   time.Time
	held bool
	err  error
}

// hold runs fn under the lease taken at at, renewing it, and releases it when
// fn has returned. lost reports that fn was stopped because the lease was
// lost while ctx was still live.
func (r *exclusive) hold(ctx context.Context, prev Lease, at time.Time, fn ExclusiveFunc) (ferr error, lost bool) {
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- fn(fctx, prev) }()

	renewEvery, guard := r.ttl/3, r.ttl/3
	expires, renewed := at.Add(r.ttl), at
	var (
		renewing      chan renewal // the renewal in flight; nil when none
		gone, stopped bool         // another owner has the lease; fn was told to stop
		failing       bool         // the last renewal failed (logged once)
		finished      bool
	)
	stop := func(why string, attrs ...any) {
		if !stopped {
			stopped = true
			cancel(ErrLeaseLost)
			r.log.Warn(why, attrs...)
		}
	}
	handle := func(rn renewal) {
		renewing = nil
		switch {
		case rn.err != nil:
			if !failing && ctx.Err() == nil {
				r.log.Warn("could not renew the lease; will retry", slog.Time("expires_at", expires), slog.Any("err", rn.err))
			}
			failing = true
		case rn.held:
			failing = false
			expires, renewed = rn.at.Add(r.ttl), rn.at
		default:
			gone = true
			stop("lease taken by another process; stopping the work")
		}
	}
	tick := time.NewTicker(r.poll)
	defer tick.Stop()
	for !finished {
		select {
		case ferr = <-done:
			finished = true
			continue
		case rn := <-renewing:
			handle(rn)
		case <-tick.C:
		}
		now := r.db.Now()
		if renewing == nil && !gone && now.Sub(renewed) >= renewEvery {
			renewing = r.renew(ctx, now)
			// Wait a little for the answer, so that a renewal that goes
			// through is counted before the deadline is judged.
			wait := time.NewTimer(guard / 2)
			select {
			case rn := <-renewing:
				handle(rn)
				if rn.err == nil && rn.held {
					wait.Stop()
					continue // just renewed: the deadline is a full TTL away
				}
			case ferr = <-done:
				finished = true
			case <-wait.C:
			}
			wait.Stop()
			now = r.db.Now()
		}
		if !gone && !now.Before(expires.Add(-guard)) {
			stop("lease not renewed in time; stopping the work before it expires", slog.Time("expires_at", expires))
		}
	}
	if renewing != nil {
		// A renewal landing after the release would take the lease back.
		handle(<-renewing)
	}
	if !gone {
		r.release(ctx)
	}
	return ferr, stopped && ctx.Err() == nil
}

// renew extends the lease if this owner still holds it, expired or not:
// nobody else took it meanwhile, so the work never overlapped another's. It
// answers on the returned channel. It goes on when ctx ends: a holder
// winding down keeps its lease until it releases it.
func (r *exclusive) renew(ctx context.Context, now time.Time) chan renewal {
	ch := make(chan renewal, 1)
	ctx = context.WithoutCancel(ctx)
	go func() {
		var held bool
		err := r.db.Tx(ctx, func(tx *sql.Tx) error {
			now, err := r.db.leaseNow(ctx, tx)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `update store_leases set expires_at = ? where name = ? and owner = ?`,
				TS(now.Add(r.ttl)), r.name, r.owner)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			held = n > 0
			return err
		})
		ch <- renewal{at: now, held: held, err: err}
	}()
	return ch
}

// release ends this owner's hold by expiring the lease now. The row stays,
// naming this owner and the release time, so that the next holder knows
// when this one's work ended (its ExclusiveFunc's prev).
func (r *exclusive) release(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	err := r.db.Tx(ctx, func(tx *sql.Tx) error {
		now, err := r.db.leaseNow(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `update store_leases set expires_at = ? where name = ? and owner = ? and expires_at > ?`,
			TS(now), r.name, r.owner, TS(now))
		return err
	})
	if err != nil {
		r.log.Warn("could not release the lease; a standby takes over when it expires", slog.Any("err", err))
		return
	}
	r.db.leases.released(r.name)
	r.log.Info("lease released")
}

// Sleep waits d of real time, and reports false when ctx ends first: how a
// loop waits between its rounds and still stops at once.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
