// Package rollup keeps the console's throughput per minute: for each series
// (events handled, identity events consumed, chat messages in and out…),
// how many rows its owner stamped in each minute, in the table
// rollup_minutes. A chart of seven days then reads at most 10,080 small rows
// per series, grouped into its bars by the database, however many rows the
// week wrote.
//
// The counting stays with the tables' owners: each series is a CountFunc
// handed to New by the wiring (backend.Outbox.CountHandled,
// referral.Service.ConsumedBetween, …), and this package names no table but
// its own. Once a minute, one process of the database (the lease LeaseName)
// counts the minutes that are over and settled and writes each minute's
// whole count; a minute is never added to, so processes that roll up the
// same minute (a lease handed over mid-pass) write the same row, and no row
// is counted twice. Reads add the minutes not rolled up yet (the current
// one, and the last one until it settles) by asking the owner directly.
package rollup

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"switchyard/store"
)

// Table is the table of the rollups, for the retention runner's console.
const Table = "rollup_minutes"

// LeaseName is the lease of the process that rolls up.
const LeaseName = "rollup"

// Series names a throughput line.
type Series string

// The console's throughput series; cli/wire.go gives each its owner's count.
const (
	OutboxHandled    Series = "bot.outbox.handled"
	IdentityConsumed Series = "referral.identity.consumed"
	BondsCreated     Series = "referral.bonds.created"
	ChatInbound      Series = "omni.messages.inbound"
	ChatOutbound     Series = "omni.messages.outbound"
)

// CountFunc counts a series' rows stamped in [from, to); a zero to has no
// end.
type CountFunc func(ctx context.Context, from, to time.Time) (int64, error)

// Defaults of Opts.
const (
	// DefaultBackfill is how far back a series with no rollups yet is
	// rolled up: the longest chart.
	DefaultBackfill = 7 * 24 * time.Hour
	// DefaultSettle is how long after a minute ends its count is taken as
	// final: a transaction stamped inside the minute may commit a little
	// later.
	DefaultSettle = 5 * time.Second
)

// Opts configure New. Zero values get defaults.
type Opts struct {
	DB *store.DB
	// Sources count each series; a series without one has no rollups.
	Sources map[Series]CountFunc
	// Backfill (DefaultBackfill) and Settle (DefaultSettle), as above.
	Backfill time.Duration
	Settle   time.Duration
	// LeaseTTL of LeaseName (store.DefaultLeaseTTL).
	LeaseTTL time.Duration
	Logger   *slog.Logger
}

// Rollups rolls the series up and reads them. It is a worker: Name and Run.
type Rollups struct {
	opts   Opts
	log    *slog.Logger
	series []Series // the sources' keys, sorted
	// done keeps the buckets read whole from the rollups: a bucket all of
	// whose minutes are rolled up never changes, so a chart polled again
	// reads only its newest buckets.
	mu   sync.Mutex
	done map[doneKey]Bucket
}

type doneKey struct {
	sr    Series
	step  minute
	start minute
}

// New returns Rollups over opts.Sources; a nil DB panics.
func New(opts Opts) *Rollups {
	if opts.DB == nil {
		panic("rollup: New needs a DB")
	}
	if opts.Backfill <= 0 {
		opts.Backfill = DefaultBackfill
	}
	if opts.Settle <= 0 {
		opts.Settle = DefaultSettle
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Rollups{opts: opts, log: opts.Logger, series: slices.Sorted(maps.Keys(opts.Sources))}
}

// Name is the worker's name.
func (r *Rollups) Name() string { return "rollup" }

// Run rolls up, while it holds the lease, just after each minute has
// settled, until ctx ends.
func (r *Rollups) Run(ctx context.Context) error {
	return r.opts.DB.RunExclusive(ctx, store.LeaseOpts{Name: LeaseName, TTL: r.opts.LeaseTTL, Logger: r.log},
		func(ctx context.Context, _ store.Lease) error {
			for {
				now := r.opts.DB.Now()
				if _, err := r.RollUp(ctx, now); err != nil && ctx.Err() == nil {
					r.log.Error("roll up the throughput", slog.Any("err", err))
				}
				next := now.Truncate(time.Minute).Add(time.Minute + r.opts.Settle + 100*time.Millisecond)
				// A clock moved by hand (a test's) rolls up at once.
				if !r.opts.DB.Sleep(ctx, next.Sub(now)) {
					return nil
				}
			}
		})
}

// minute is a minute as stored: whole minutes since 1970-01-01 UTC.
type minute int64

func minuteOf(t time.Time) minute { return minute(t.Unix() / 60) }

func (m minute) time() time.Time { return time.Unix(int64(m)*60, 0).UTC() }

// chunk is how many minutes RollUp counts at once: a chunk that counts
// nothing is skipped with one count (split), and a chunk's rows are written
// in one short transaction.
const chunk = 60

// RollUp writes the rollups of every minute that is over and settled at now
// and not rolled up yet, at most Backfill back, and returns how many minutes
// it rolled up. A minute that counted nothing gets no row, except the
// series' last minute, which marks how far the series is rolled up.
func (r *Rollups) RollUp(ctx context.Context, now time.Time) (int, error) {
	last := minuteOf(now.Add(-r.opts.Settle)) - 1
	total := 0
	for _, sr := range r.series {
		n, err := r.rollUp(ctx, sr, r.opts.Sources[sr], minuteOf(now.Add(-r.opts.Backfill)), last)
		total += n
		if err != nil {
			return total, fmt.Errorf("roll up %s: %w", sr, err)
		}
	}
	return total, nil
}

func (r *Rollups) rollUp(ctx context.Context, sr Series, count CountFunc, first, last minute) (int, error) {
	wm, ok, err := r.watermark(ctx, sr)
	if err != nil {
		return 0, err
	}
	if ok && wm+1 > first {
		first = wm + 1
	}
	done := 0
	for from := first; from <= last; from += chunk {
		to := min(from+chunk, last+1)
		values := map[minute]int64{}
		n, err := count(ctx, from.time(), to.time())
		if err != nil {
			return done, err
		}
		if err := split(ctx, count, from, to, n, values); err != nil {
			return done, err
		}
		if _, ok := values[last]; !ok && to == last+1 {
			values[last] = 0 // marks how far the series is rolled up
		}
		if len(values) > 0 {
			if err := r.write(ctx, sr, values); err != nil {
				return done, err
			}
		}
		done += int(to - from)
	}
	return done, nil
}

// split puts into values the count of each minute of [from, to) that
// counts something, given n, the span's count: it halves the span, counting
// the first half and taking the rest as the second's, and leaves alone a
// half that counts nothing. A busy hour costs about one count per minute, a
// quiet one a few.
func split(ctx context.Context, count CountFunc, from, to minute, n int64, values map[minute]int64) error {
	if n <= 0 {
		return nil
	}
	if to-from == 1 {
		values[from] = n
		return nil
	}
	mid := from + (to-from)/2
	a, err := count(ctx, from.time(), mid.time())
	if err != nil {
		return err
	}
	if err := split(ctx, count, from, mid, a, values); err != nil {
		return err
	}
	return split(ctx, count, mid, to, n-a, values)
}

const watermarkSQL = `select max(minute) from rollup_minutes where series = ?`

// watermark is the newest minute of sr rolled up; false when none is.
func (r *Rollups) watermark(ctx context.Context, sr Series) (minute, bool, error) {
	var wm sql.NullInt64
	if err := r.opts.DB.Read.QueryRowContext(ctx, watermarkSQL, string(sr)).Scan(&wm); err != nil {
		return 0, false, fmt.Errorf("newest rollup of %s: %w", sr, err)
	}
	return minute(wm.Int64), wm.Valid, nil
}

// upsertSQL writes a minute's whole count: rolling a minute up again (two
// processes, one after the other) writes the same row, never a sum.
const upsertSQL = `insert into rollup_minutes (series, minute, value) values (?, ?, ?)
	on conflict (series, minute) do update set value = excluded.value`

func (r *Rollups) write(ctx context.Context, sr Series, values map[minute]int64) error {
	return r.opts.DB.Tx(ctx, func(tx *sql.Tx) error {
		for _, m := range slices.Sorted(maps.Keys(values)) {
			if _, err := tx.ExecContext(ctx, upsertSQL, string(sr), int64(m), values[m]); err != nil {
				return fmt.Errorf("write rollup of %s: %w", sr, err)
			}
		}
		return nil
	})
}

const pruneSQL = `delete from rollup_minutes
	where (series, minute) in (select series, minute from rollup_minutes where minute < ? order by minute limit ?)`

// Prune deletes, in one transaction, at most limit rollups of minutes
// before cutoff, oldest first, and returns how many: a retention.PruneFunc.
// A series' newest rollup goes only once it is older than cutoff, when a
// chart no longer reaches back to it.
func (r *Rollups) Prune(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	var n int64
	err := r.opts.DB.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, pruneSQL, int64(minuteOf(cutoff)), limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rollup: prune: %w", err)
	}
	return n, nil
}

// Query asks for a series' counts in N buckets of Step each, the first
// starting at From.
type Query struct {
	Series Series
	// From is truncated to its minute; Step is a whole number of minutes,
	// at least one.
	From time.Time
	Step time.Duration
	N    int
}

// Bucket is one bucket's count.
type Bucket struct {
	Start time.Time
	// Sum counts the bucket's rows.
	Sum int64
	// Peak is the bucket's busiest minute's count: Sum for a bucket of one
	// minute.
	Peak int64
}

// ErrBadQuery is returned for a Query of no buckets or a step that is not
// whole minutes.
var ErrBadQuery = errors.New("rollup: a query needs buckets of whole minutes")

const bucketsSQL = `select (minute - ?) / ?, cast(sum(value) as bigint), max(value) from rollup_minutes
	where series = ? and minute >= ? and minute < ?
	group by 1`

// liveMinutes is how many minutes before now a read counts one by one when
// they are not rolled up yet: the current minute, the one settling, and
// those of a pass that is late. Older minutes not rolled up (no process
// rolls up, or it is still backfilling) are counted a bucket at a time.
const liveMinutes = 10

// Buckets returns q's buckets: the rollups of the minutes rolled up, and the
// owner's count of the minutes up to now that are not yet. The database
// groups the rollups into the buckets, so a bucket costs one row read
// however many minutes and rows it covers.
func (r *Rollups) Buckets(ctx context.Context, q Query) ([]Bucket, error) {
	step := minute(q.Step / time.Minute)
	if q.N <= 0 || step <= 0 || q.Step%time.Minute != 0 {
		return nil, ErrBadQuery
	}
	from := minuteOf(q.From)
	to := from + step*minute(q.N)
	out := make([]Bucket, q.N)
	for i := range out {
		out[i].Start = (from + step*minute(i)).time()
	}
	wm, ok, err := r.watermark(ctx, q.Series)
	if err != nil {
		return nil, err
	}
	rolled := from // the rolled-up minutes are [from, rolled)
	if ok {
		rolled = min(max(wm+1, from), to)
	}
	// The buckets kept whole, then the rest of the rolled-up minutes.
	read := from
	for i := range out {
		b, ok := r.cached(doneKey{q.Series, step, from + step*minute(i)})
		if !ok || from+step*minute(i+1) > rolled {
			break
		}
		out[i] = b
		read = from + step*minute(i+1)
	}
	if rolled > read {
		if err := r.readRolled(ctx, q.Series, read, rolled, step, out[(read-from)/step:]); err != nil {
			return nil, err
		}
		for i := (read - from) / step; i < minute(len(out)) && from+step*(i+1) <= rolled; i++ {
			r.keep(doneKey{q.Series, step, from + step*i}, out[i])
		}
	}
	count, ok := r.opts.Sources[q.Series]
	if !ok {
		return out, nil
	}
	end := min(to, minuteOf(r.opts.DB.Now())+1)
	oneByOne := max(rolled, end-liveMinutes)
	// Older minutes not rolled up: one count per bucket, or part of one.
	for m := rolled; m < oneByOne; {
		i := (m - from) / step
		next := min(from+step*(i+1), oneByOne)
		n, err := count(ctx, m.time(), next.time())
		if err != nil {
			return nil, err
		}
		out[i].Sum += n
		if step == 1 {
			out[i].Peak = n
		}
		m = next
	}
	for m := oneByOne; m < end; m++ {
		n, err := count(ctx, m.time(), (m + 1).time())
		if err != nil {
			return nil, err
		}
		i := (m - from) / step
		out[i].Sum += n
		out[i].Peak = max(out[i].Peak, n)
	}
	return out, nil
}

func (r *Rollups) cached(k doneKey) (Bucket, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.done[k]
	return b, ok
}

// keepBuckets is how many whole buckets Rollups keeps: more than the
// console's charts show of every series, range and step.
const keepBuckets = 4096

func (r *Rollups) keep(k doneKey, b Bucket) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil || len(r.done) >= keepBuckets {
		r.done = make(map[doneKey]Bucket) // forget them all: the next reads fill it again
	}
	r.done[k] = b
}

func (r *Rollups) readRolled(ctx context.Context, sr Series, from, to, step minute, out []Bucket) error {
	rows, err := r.opts.DB.Read.QueryContext(ctx, bucketsSQL,
		int64(from), int64(step), string(sr), int64(from), int64(to))
	if err != nil {
		return fmt.Errorf("read rollups of %s: %w", sr, err)
	}
	defer rows.Close()
	for rows.Next() {
		var i, sum, peak int64
		if err := rows.Scan(&i, &sum, &peak); err != nil {
			return fmt.Errorf("read rollups of %s: %w", sr, err)
		}
		if i >= 0 && i < int64(len(out)) {
			out[i].Sum, out[i].Peak = sum, peak
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read rollups of %s: %w", sr, err)
	}
	return nil
}
