package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// LeasesByPrefix reads every lease whose name starts with one of prefixes
// (read pool), expired ones included, and the time they are judged by: the
// lease clock (see AcquireLease), read just before them, so that
// Lease.HeldAt(now) tells who holds each. Released leases (ReleaseLease) are
// not there. It is one indexed read of the lease table, cheap enough for a
// loop that looks at its peers' leases at every poll.
func (db *DB) LeasesByPrefix(ctx context.Context, prefixes ...string) (leases []Lease, now time.Time, err error) {
	if now, err = db.leaseNowRead(ctx); err != nil {
		return nil, time.Time{}, err
	}
	if len(prefixes) == 0 {
		return nil, now, nil
	}
	// A prefix is a range of names, [prefix, prefix with its last byte
	// incremented), which uses the primary key (the names compare bytewise:
	// SQLite's binary collation, collate "C" on PostgreSQL).
	var (
		where []string
		args  []any
	)
	for _, p := range prefixes {
		if upper, ok := prefixEnd(p); ok {
			where = append(where, `(name >= ? and name < ?)`)
			args = append(args, p, upper)
		} else {
			where = append(where, `name >= ?`)
			args = append(args, p)
		}
	}
	rows, err := db.Read.QueryContext(ctx,
		`select name, owner, expires_at from store_leases where `+strings.Join(where, ` or `)+` order by name`, args...)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: read leases: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			l   Lease
			exp Timestamp
		)
		if err := rows.Scan(&l.Name, &l.Owner, &exp); err != nil {
			return nil, time.Time{}, fmt.Errorf("store: read leases: %w", err)
		}
		l.ExpiresAt = exp.Time
		for _, p := range prefixes {
			if strings.HasPrefix(l.Name, p) {
				leases = append(leases, l)
				break
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("store: read leases: %w", err)
	}
	return leases, now, nil
}

// prefixEnd is the least name above every name starting with prefix, when
// prefix ends in a byte that can be incremented within ASCII (a text value
// must stay valid UTF-8).
func prefixEnd(prefix string) (string, bool) {
	if prefix == "" || prefix[len(prefix)-1] >= 0x7f {
		return "", false
	}
	return prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1), true
}

// leaseNowRead is leaseNow outside a transaction (read pool).
func (db *DB) leaseNowRead(ctx context.Context) (time.Time, error) {
	if _, system := db.Clock.(SystemClock); !system || !db.Postgres() {
		return db.Now(), nil
	}
	var now time.Time
	if err := db.Read.QueryRowContext(ctx, `select clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("store: read the database clock: %w", err)
	}
	return now.UTC(), nil
}

// LeaseHeldTx reports, inside tx, whether owner holds the lease name: it is
// owner's and unexpired by the lease clock. Work fenced by a lease checks it
// this way in the transaction that commits the work, as its last step, so
// that a holder whose lease ran out commits nothing. On PostgreSQL the check
// also locks the lease's row (for share) until tx ends: nobody can take the
// lease over between the check and the commit, so the next holder, which
// takes it only after, sees what this transaction committed. (On SQLite, tx
// is the only writer.) tx must belong to db.
func (db *DB) LeaseHeldTx(ctx context.Context, tx *sql.Tx, name, owner string) (bool, error) {
	q := `select owner, expires_at from store_leases where name = ?`
	if db.Postgres() {
		q += ` for share`
	}
	var (
		holder string
		exp    Timestamp
	)
	err := tx.QueryRowContext(ctx, q, name).Scan(&holder, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: check lease %s: %w", name, err)
	}
	if holder != owner {
		return false, nil
	}
	now, err := db.leaseNow(ctx, tx)
	if err != nil {
		return false, err
	}
	return exp.After(now), nil
}

// PruneLeases deletes the leases whose names start with prefix and that
// expired before cutoff, and returns how many: leases named after an owner
// (one per process run) are left behind, expired, by each holder that died
// without releasing them.
func (db *DB) PruneLeases(ctx context.Context, prefix string, cutoff time.Time) (int64, error) {
	q, args := `delete from store_leases where name >= ? and expires_at < ?`, []any{prefix, TS(cutoff)}
	if upper, ok := prefixEnd(prefix); ok {
		q, args = `delete from store_leases where name >= ? and name < ? and expires_at < ?`, []any{prefix, upper, TS(cutoff)}
	}
	var n int64
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune leases %s…: %w", prefix, err)
	}
	return n, nil
}
