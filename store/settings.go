package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
)

// Setting returns the stored value of key, and whether it exists.
func (db *DB) Setting(ctx context.Context, key string) (string, bool, error) {
	var v string
	err := db.Read.QueryRowContext(ctx, `select value from store_settings where key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return v, err == nil, err
}

// SetSetting stores value under key.
func (db *DB) SetSetting(ctx context.Context, key, value string) error {
	return db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx,
			`insert into store_settings (key, value, updated_at) values (?, ?, ?)
			 on conflict (key) do update set value = excluded.value, updated_at = excluded.updated_at`,
			key, value, TS(db.Now()))
		return err
	})
}

// EnsureSecret returns the secret stored under key, generating and storing a
// random 32-byte hex value on first use. created tells whether it was made now.
// Two processes racing on first start agree on one value.
func (db *DB) EnsureSecret(ctx context.Context, key string) (value string, created bool, err error) {
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", false, err
	}
	fresh := hex.EncodeToString(buf)
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`insert into store_settings (key, value, updated_at) values (?, ?, ?) on conflict (key) do nothing`,
			key, fresh, TS(db.Now()))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		created = n == 1
		return tx.QueryRowContext(ctx, `select value from store_settings where key = ?`, key).Scan(&value)
	})
	return value, created, err
}
