// Package store opens Switchyard's database — one SQLite file, or a
// PostgreSQL database named by a postgres:// URL — and owns everything
// dialect-specific: the connection set-up, pragmas, write transactions (group
// commit on SQLite, retried READ COMMITTED transactions on PostgreSQL), the
// clock, lease locks, settings, error classes and the migration runner.
//
// The domain packages write one SQL text in the subset both dialects share,
// with ? placeholders (the PostgreSQL connections rebind them to $n, see
// Rebind), and keep times as store.Timestamp: fixed-width UTC text on both,
// so that text order is time order.
//
// On SQLite, writes go through one writer connection: DB.Tx runs the caller's function
// inside a shared immediate transaction together with the functions of other
// concurrent callers (each in its own savepoint) and commits them with one
// fsync. A nil error from Tx means the caller's writes are committed, and a
// caller whose context ends affects nobody else's writes. Reads go to a
// separate pool of read-only connections (DB.Read), which WAL lets run beside
// the writer. A statement on either pool that finds the file damaged marks
// the database corrupt for good (DB.Corrupt): readiness fails and workers stop
// taking work until the file is restored.
//
// On PostgreSQL, several processes (instances) may share the database; they
// wake one another with Broadcast and OnBroadcast (LISTEN/NOTIFY, sent after
// the commit on connections of their own, see notify.go).
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Dialect names the SQL flavour behind the store.
type Dialect string

// DialectSQLite is a SQLite file, opened from its path.
const DialectSQLite Dialect = "sqlite"

// Synchronous modes that Open accepts (SQLite's PRAGMA synchronous).
const (
	SyncFull   = "FULL"
	SyncNormal = "NORMAL"
)

// Options configure Open. Zero values get defaults.
type Options struct {
	// Path of the SQLite file, created when missing; or a postgres:// URL
	// of an existing PostgreSQL database.
	Path string
	// Synchronous is FULL (default: a commit survives a power cut) or NORMAL
	// (SQLite only; PostgreSQL's durability is the server's own setting).
	Synchronous string
	// BusyTimeout is how long a statement waits for another process's lock
	// (SQLite only; default 10 s).
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool (default: max(4, 2×CPUs)).
	ReadConns int
	// WriteConns is the size of the PostgreSQL writer pool, the number of
	// transactions that run at once (default: max(8, 4×CPUs)). SQLite has
	// one writer connection.
	WriteConns int
	// MaxBatch caps how many callers share one commit (SQLite only; default 256).
	MaxBatch int
	// Clock tells the time; nil means the system clock.
	Clock Clock
	// Logger gets store events; nil discards them.
	Logger *slog.Logger
	// BroadcastInterval is the shortest time between two statements that
	// send broadcasts (wake-ups) to the other instances on a PostgreSQL
	// database, stretched up to ten times while broadcasts keep coming
	// (default DefaultBroadcastInterval); negative turns broadcasts off, so
	// that the others find work by polling alone. See Broadcast.
	BroadcastInterval time.Duration
}

// DB is an open Switchyard database.
type DB struct {
	// Write is the single writer connection. Use Tx for writes; the raw handle
	// exists for libraries that begin their own transactions (goose, goqite).
	Write *sql.DB
	// Read is a pool of read-only connections.
	Read *sql.DB
	// Clock tells the time for every domain rule.
	Clock Clock
	// Dialect of the database behind Write and Read.
	Dialect Dialect

	path    string
	log     *slog.Logger
	batcher *batcher // nil on PostgreSQL
	// checkpoint copies the WAL into the file (SQLite only).
	checkpoint *checkpointer
	closed     atomic.Bool
	commits    commitLog
	hooks      hooks
	retries    txRetries
	corrupt    atomic.Pointer[error] // the first corruption any statement met
	ready      readiness
	ext        sync.Map  // Ext's values, by their owners' keys
	notes      *notifier // broadcasts to other instances; nil on SQLite
	leases     leaseWakes
}

// Open opens the database opts.Path names. A postgres:// URL opens that
// PostgreSQL database (which must exist). A path opens (creating if needed)
// the SQLite file with WAL, foreign keys, a busy timeout and the configured
// synchronous mode: a new file is created with mode 0600 (its -wal and -shm
// files follow it), an older file readable by others is tightened, and an
// existing file of 0 bytes is refused with ErrEmptyFile. It does not
// migrate; call Migrate.
func Open(ctx context.Context, opts Options) (*DB, error) {
	if opts.Path == "" {
		return nil, errors.New("store: empty database path")
	}
	sync := strings.ToUpper(opts.Synchronous)
	switch sync {
	case "":
		sync = SyncFull
	case SyncFull, SyncNormal:
	default:
		return nil, fmt.Errorf("store: synchronous must be FULL or NORMAL, not %q", opts.Synchronous)
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = max(4, 2*runtime.NumCPU())
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Clock == nil {
		opts.Clock = SystemClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if IsPostgresURL(opts.Path) {
		db := &DB{Clock: opts.Clock, Dialect: DialectPostgres, path: opts.Path, log: opts.Logger}
		if err := openPostgres(ctx, db, opts); err != nil {
			return nil, err
		}
		return db, nil
	}

	pragmas := []string{
		fmt.Sprintf("busy_timeout(%d)", opts.BusyTimeout.Milliseconds()),
		// Before the first table is created, so a new file reuses and
		// returns freed pages (space.go); a no-op on an existing file.
		"auto_vacuum(INCREMENTAL)",
		"journal_mode(WAL)",
		"foreign_keys(ON)",
		"synchronous(" + sync + ")",
		// Savepoint journals of grouped transactions stay in memory.
		"temp_store(MEMORY)",
	}
	db := &DB{
		Clock:   opts.Clock,
		Dialect: DialectSQLite,
		path:    opts.Path,
		log:     opts.Logger,
	}
	if err := prepareFile(opts.Path, opts.Logger); err != nil {
		return nil, err
	}
	wc, err := newConnector(dsn(opts.Path, "immediate", pragmas), false, db.sawError)
	if err != nil {
		return nil, fmt.Errorf("store: open writer: %w", err)
	}
	write := sql.OpenDB(wc)
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("store: open %s: %w", opts.Path, err)
	}

	rc, err := newConnector(dsn(opts.Path, "deferred", append(pragmas[:1:1], "foreign_keys(ON)", "query_only(ON)")), true, db.sawError)
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("store: open readers: %w", err)
	}
	read := sql.OpenDB(rc)
	read.SetMaxOpenConns(opts.ReadConns)
	read.SetMaxIdleConns(opts.ReadConns)

	cc, err := newConnector(dsn(opts.Path, "deferred", pragmas), false, db.sawError)
	if err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("store: open checkpointer: %w", err)
	}
	ckpt := sql.OpenDB(cc)
	ckpt.SetMaxOpenConns(1)
	ckpt.SetMaxIdleConns(1)
	ckpt.SetConnMaxLifetime(0)
	ckpt.SetConnMaxIdleTime(0)

	db.Write, db.Read = write, read
	db.checkpoint = newCheckpointer(ckpt, opts.Logger)
	if db.batcher, err = newBatcher(write, &db.hooks, &db.commits, opts.MaxBatch, db.checkpoint.committed); err != nil {
		_ = db.checkpoint.close()
		write.Close()
		read.Close()
		return nil, err
	}
	return db, nil
}

func dsn(path, txlock string, pragmas []string) string {
	q := url.Values{}
	q.Set("_txlock", txlock)
	for _, p := range pragmas {
		q.Add("_pragma", p)
	}
	return "file:" + path + "?" + q.Encode()
}

// Path returns the database file's path, or the PostgreSQL URL (see Redact
// before showing it).
func (db *DB) Path() string { return db.path }

// Postgres reports whether the database is PostgreSQL.
func (db *DB) Postgres() bool { return db.Dialect == DialectPostgres }

// Close stops the committer and the broadcasts, drops the values kept by Ext
// (closing those that are io.Closers), then closes both pools. Transactions
// already queued are committed first.
func (db *DB) Close() error {
	db.closed.Store(true)
	if db.batcher != nil {
		db.batcher.close()
	}
	var ckptErr error
	if db.checkpoint != nil {
		ckptErr = db.checkpoint.close()
	}
	if db.notes != nil {
		db.notes.close()
	}
	return errors.Join(db.closeExt(), ckptErr, db.Read.Close(), db.Write.Close())
}

// Now is shorthand for db.Clock.Now().UTC().
func (db *DB) Now() time.Time { return db.Clock.Now().UTC() }

// IsFull reports whether err says the database has no room: SQLite's
// "database or disk is full", PostgreSQL's disk_full (53100) or
// out_of_memory (53200).
func IsFull(err error) bool {
	if err == nil {
		return false
	}
	switch sqlstate(err) {
	case sqlstateDiskFull, sqlstateOutOfMemory:
		return true
	case "":
		return strings.Contains(err.Error(), "(13)") // SQLITE_FULL
	}
	return false
}

// IsUniqueViolation reports whether err is a unique or primary-key
// constraint failure (PostgreSQL's 23505).
func IsUniqueViolation(err error) bool {
	if err == nil {
		return false
	}
	if code := sqlstate(err); code != "" {
		return code == sqlstateUniqueViolation
	}
	s := err.Error()
	return strings.Contains(s, "UNIQUE constraint failed") || strings.Contains(s, "(2067)") || strings.Contains(s, "(1555)")
}
