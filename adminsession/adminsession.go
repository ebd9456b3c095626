// Package adminsession keeps the console's sessions: the admin_sessions
// table (migration 00009). A session is a random 32-byte id that the
// operator's cookie carries; the table keeps only its SHA-256, with its
// expiry and a fingerprint of the admin token it was issued under, so a copy
// of the database opens no session. A session counts only under the token
// it names: changing the token ends every session. Ending a session deletes
// its row; expired rows and rows of another token are deleted at the next
// start.
//
// The cookie itself is the web package's; this package never sees a request.
package adminsession

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"

	"switchyard/store"
)

const (
	// IDBytes is the size of a session's random id.
	IDBytes = 32
	// DefaultTTL is how long a session lasts unless Opts.TTL says otherwise.
	DefaultTTL = 12 * time.Hour
)

// Opts configure New.
type Opts struct {
	DB *store.DB
	// Token is the admin token sessions are issued under.
	Token string
	// TTL is how long a session lasts (default DefaultTTL).
	TTL time.Duration
}

// Store is the console's sessions on one database, under one admin token.
type Store struct {
	db      *store.DB
	tokenFP string
	ttl     time.Duration
}

// New returns the sessions of opts.DB under opts.Token. A nil DB or an empty
// token panics: both are wiring mistakes.
func New(opts Opts) *Store {
	if opts.DB == nil {
		panic("adminsession: nil DB")
	}
	if opts.Token == "" {
		panic("adminsession: empty admin token")
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	fp := sha256.Sum256([]byte("switchyard admin session token\x00" + opts.Token))
	return &Store{db: opts.DB, tokenFP: hex.EncodeToString(fp[:]), ttl: opts.TTL}
}

// TTL is how long a session lasts from its start.
func (s *Store) TTL() time.Duration { return s.ttl }

// key is how a session id is kept: the hex of its SHA-256.
func key(id []byte) string {
	h := sha256.Sum256(id)
	return hex.EncodeToString(h[:])
}

const (
	// pruneQuery deletes what can never open the console again.
	pruneQuery  = `delete from admin_sessions where expires_at <= ? or token_fp <> ?`
	insertQuery = `insert into admin_sessions (id_hash, token_fp, created_at, expires_at) values (?, ?, ?, ?)`
	validQuery  = `select count(*) from admin_sessions where id_hash = ? and token_fp = ? and expires_at > ?`
	deleteQuery = `delete from admin_sessions where id_hash = ?`
	countQuery  = `select count(*) from admin_sessions`
)

// Start begins a session and returns its random id of IDBytes bytes.
// Expired sessions and those of another token are pruned in the same
// transaction.
func (s *Store) Start(ctx context.Context) ([]byte, error) {
	id := make([]byte, IDBytes)
	if _, err := rand.Read(id); err != nil {
		return nil, fmt.Errorf("session id: %w", err)
	}
	now := s.db.Now()
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, pruneQuery, store.TS(now), s.tokenFP); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, insertQuery, key(id), s.tokenFP, store.TS(now), store.TS(now.Add(s.ttl)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store the session: %w", err)
	}
	return id, nil
}

// Valid reports whether id names a live session issued under the current
// token. The error is a failed read, never a bad id.
func (s *Store) Valid(ctx context.Context, id []byte) (bool, error) {
	var n int
	if err := s.db.Read.QueryRowContext(ctx, validQuery, key(id), s.tokenFP, store.TS(s.db.Now())).Scan(&n); err != nil {
		return false, fmt.Errorf("read the session: %w", err)
	}
	return n == 1, nil
}

// End revokes the session id names, wherever a copy of its cookie is;
// ending an unknown session is no error.
func (s *Store) End(ctx context.Context, id []byte) error {
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, deleteQuery, key(id))
		return err
	})
	if err != nil {
		return fmt.Errorf("revoke the session: %w", err)
	}
	return nil
}

// Count returns how many sessions are kept, of any token, live or not yet
// pruned.
func (s *Store) Count(ctx context.Context) (int, error) {
	var n int
	if err := s.db.Read.QueryRowContext(ctx, countQuery).Scan(&n); err != nil {
		return 0, fmt.Errorf("count sessions: %w", err)
	}
	return n, nil
}
