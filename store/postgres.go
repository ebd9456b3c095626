package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// DialectPostgres is PostgreSQL (15 or newer), opened from a postgres:// URL.
const DialectPostgres Dialect = "postgres"

// IsPostgresURL reports whether source names a PostgreSQL database (a
// postgres:// or postgresql:// URL) rather than a SQLite file.
func IsPostgresURL(source string) bool {
	return strings.HasPrefix(source, "postgres://") || strings.HasPrefix(source, "postgresql://")
}

// Redact returns source fit for a log line or a message: a PostgreSQL URL
// with its password (in the URL or as a password parameter) replaced by
// "xxxxx"; a file path as it is.
func Redact(source string) string {
	if !IsPostgresURL(source) {
		return source
	}
	u, err := url.Parse(source)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// openPostgres opens the two pools of a PostgreSQL database: Write for
// transactions, Read for reads on sessions that refuse writes
// (default_transaction_read_only), as the SQLite read pool does.
func openPostgres(ctx context.Context, db *DB, opts Options) error {
	cfg, err := pgx.ParseConfig(opts.Path)
	if err != nil {
		// pgx's message quotes the URL, password included.
		return fmt.Errorf("store: bad PostgreSQL URL %s", Redact(opts.Path))
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "switchyard"
	}
	// Any time the server renders is UTC, as every stored time is.
	cfg.RuntimeParams["timezone"] = "UTC"
	readCfg := cfg.Copy()
	readCfg.RuntimeParams = maps.Clone(cfg.RuntimeParams)
	readCfg.RuntimeParams["default_transaction_read_only"] = "on"

	if opts.WriteConns <= 0 {
		opts.WriteConns = max(8, 4*runtime.NumCPU())
	}
	write := sql.OpenDB(&connector{Connector: stdlib.GetConnector(*cfg), keepCancel: true, rebind: true, onErr: db.sawError})
	write.SetMaxOpenConns(opts.WriteConns)
	write.SetMaxIdleConns(min(opts.WriteConns, 4))
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return fmt.Errorf("store: open %s: %w", Redact(opts.Path), err)
	}
	read := sql.OpenDB(&connector{Connector: stdlib.GetConnector(*readCfg), keepCancel: true, rebind: true, onErr: db.sawError})
	read.SetMaxOpenConns(opts.ReadConns)
	read.SetMaxIdleConns(min(opts.ReadConns, 4))
	db.Write, db.Read = write, read
	db.notes = newNotifier(cfg.Copy(), opts.BroadcastInterval, db.log)
	return nil
}

// SQLSTATE codes the store tells apart (PostgreSQL's appendix A).
const (
	sqlstateUniqueViolation      = "23505"
	sqlstateSerializationFailure = "40001"
	sqlstateDeadlock             = "40P01"
	sqlstateDiskFull             = "53100"
	sqlstateOutOfMemory          = "53200"
	sqlstateDataCorrupted        = "XX001"
	sqlstateIndexCorrupted       = "XX002"
)

// sqlstate returns the SQLSTATE of a PostgreSQL error in err's chain, or "".
func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// IsRetryable reports whether err is a PostgreSQL serialization failure or
// deadlock: the transaction was rolled back and may simply run again. Tx
// retries these itself; SQLite never returns them.
func IsRetryable(err error) bool {
	switch sqlstate(err) {
	case sqlstateSerializationFailure, sqlstateDeadlock:
		return true
	}
	return false
}
