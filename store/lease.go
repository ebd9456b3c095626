package store

import (
	"context"
	"database/sql"
	"time"
)

// AcquireLease takes the lease name for owner until now+ttl, when it is free,
// expired, or already owner's (then it is renewed). It reports whether owner
// holds the lease afterwards. This is the single-flight lock of the specs
// (their Redlock): work guarded by a lease runs in one process at a time.
func (db *DB) AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	const q = `
		insert into store_leases (name, owner, expires_at) values (?, ?, ?)
		on conflict (name) do update set owner = excluded.owner, expires_at = excluded.expires_at
		where store_leases.expires_at <= ? or store_leases.owner = excluded.owner`
	var held bool
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		now := db.Now()
		res, err := tx.ExecContext(ctx, q, name, owner, TS(now.Add(ttl)), TS(now))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		held = n > 0
		return err
	})
	return held, err
}

// RenewLease extends owner's unexpired lease to now+ttl. It reports false when
// owner no longer holds it (it expired and someone else took it).
func (db *DB) RenewLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	var held bool
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		now := db.Now()
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
	return db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `delete from store_leases where name = ? and owner = ?`, name, owner)
		return err
	})
}
