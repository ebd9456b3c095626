package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Stamped names the rows of one table that a timestamp column stamps, for
// counting them by time: the per-minute throughput the console charts. The
// owning package declares one per series beside its other SQL, so the table
// is still named in one package only; the counting, which is the same for
// every table, lives here. Timestamps are TimeLayout text, so text order is
// time order.
type Stamped struct {
	// Table and Column name the table and its timestamp column: constants of
	// the owning package, never input.
	Table, Column string
	// Where is an extra condition with ? placeholders, bound to Args; a
	// constant, never input.
	Where string
	Args  []any
	// ByID says the column grows with the rowid (rows stamped with the
	// store's clock as the one writer inserts them) but has no index: minute
	// boundaries are then found by binary search over the ids, so a count
	// reads only the rows of its range, never the whole table.
	ByID bool
}

// CountBetween counts the rows stamped in [from, to) on the read pool; a
// zero to has no end.
func (s Stamped) CountBetween(ctx context.Context, db *DB, from, to time.Time) (int64, error) {
	var (
		q    string
		args []any
	)
	if s.ByID {
		lo, err := s.firstIDAt(ctx, db, from)
		if err != nil {
			return 0, err
		}
		q, args = `select count(*) from `+s.Table+` where id >= ?`, []any{lo}
		if !to.IsZero() {
			hi, err := s.firstIDAt(ctx, db, to)
			if err != nil {
				return 0, err
			}
			if hi <= lo {
				return 0, nil
			}
			q, args = q+` and id < ?`, append(args, hi)
		}
	} else {
		q, args = `select count(*) from `+s.Table+` where `+s.Column+` >= ?`, []any{stamp(from)}
		if !to.IsZero() {
			q, args = q+` and `+s.Column+` < ?`, append(args, stamp(to))
		}
	}
	if s.Where != "" {
		q, args = q+` and (`+s.Where+`)`, append(args, s.Args...)
	}
	var n int64
	if err := db.Read.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s.%s: %w", s.Table, s.Column, err)
	}
	return n, nil
}

// firstIDAt is the smallest id from which the rows are stamped at or after
// t (one past the last id when none is): a binary search over the ids, one
// indexed lookup per step.
func (s Stamped) firstIDAt(ctx context.Context, db *DB, t time.Time) (int64, error) {
	// Two queries: SQLite answers min(id) or max(id) alone from the b-tree's
	// edge, but both in one select scan the table.
	var lo, hi sql.NullInt64
	if err := db.Read.QueryRowContext(ctx, `select min(id) from `+s.Table).Scan(&lo); err != nil {
		return 0, fmt.Errorf("id range of %s: %w", s.Table, err)
	}
	if err := db.Read.QueryRowContext(ctx, `select max(id) from `+s.Table).Scan(&hi); err != nil {
		return 0, fmt.Errorf("id range of %s: %w", s.Table, err)
	}
	if !lo.Valid {
		return 1, nil
	}
	want := stamp(t)
	l, h := lo.Int64, hi.Int64+1
	for l < h {
		mid := l + (h-l)/2
		var (
			id int64
			at string
		)
		err := db.Read.QueryRowContext(ctx,
			`select id, `+s.Column+` from `+s.Table+` where id >= ? order by id limit 1`, mid).Scan(&id, &at)
		if errors.Is(err, sql.ErrNoRows) {
			h = mid
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("search %s: %w", s.Table, err)
		}
		if at >= want {
			h = mid // no row between mid and id: the first one at or after t is at most mid
		} else {
			l = id + 1
		}
	}
	return l, nil
}

func stamp(t time.Time) string { return t.UTC().Format(TimeLayout) }
