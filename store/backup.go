package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrNotOnPostgres is returned by the operations that are SQLite's alone:
// Backup and CheckIntegrity.
var ErrNotOnPostgres = errors.New("store: not on PostgreSQL")

// Backup writes a consistent copy of the database to path with VACUUM INTO.
// It reads a WAL snapshot on a connection of its own, so it is safe while the
// process serves: writers go on, and the copy is the database as of the
// backup's start. path must not exist. The copy is created with mode 0600,
// like the database: it holds the same secrets.
//
// On PostgreSQL it refuses with ErrNotOnPostgres: the server's own tools
// back it up.
func (db *DB) Backup(ctx context.Context, path string) error {
	if db.Postgres() {
		return fmt.Errorf("%w: back up a PostgreSQL database with pg_dump (pg_dump --format=custom --file=switchyard.dump \"$SWITCHYARD_DB\"), restore it with pg_restore", ErrNotOnPostgres)
	}
	// VACUUM INTO writes into an empty file, so the file is made here first,
	// with the mode the copy must have and failing if it exists.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("store: backup: %s already exists", path)
	}
	if err != nil {
		return fmt.Errorf("store: backup: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("store: backup: %w", err)
	}
	conn, err := db.Read.Conn(ctx)
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("store: backup: %w", err)
	}
	// The read pool's connections are query_only, which VACUUM INTO needs
	// lifted; this one is thrown away afterwards rather than returned writable.
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	}()
	if _, err := conn.ExecContext(ctx, "pragma query_only = off"); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("store: backup: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "vacuum into ?", path); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("store: backup to %s: %w", path, err)
	}
	return nil
}
