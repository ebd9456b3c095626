package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// The SQLite driver interrupts a connection (sqlite3_interrupt) when the
// context of a running statement ends, and an interrupted write inside an
// explicit transaction rolls the whole transaction back. On the writer that
// transaction is shared by every caller of a group commit, so one caller who
// hangs up would abort everyone's writes. The writer's connections therefore
// run every statement on a context that is never cancelled: a caller whose
// context ends is handled by the batcher, which rolls back that caller's
// savepoint only (see commit).
//
// Both pools also watch the errors SQLite returns, so that a corrupt file is
// noticed the first time any statement meets it (see DB.Corrupt).

// connector opens connections of a driver (SQLite's, or pgx's on
// PostgreSQL) through conn.
type connector struct {
	driver.Connector
	// keepCancel passes contexts through unchanged (the read pool, where an
	// interrupt stops only the reader's own statement, and every PostgreSQL
	// connection, where a cancelled statement aborts only its own caller's
	// transaction).
	keepCancel bool
	// rebind turns ? placeholders into PostgreSQL's $n (see Rebind).
	rebind bool
	// onErr sees every error a statement returns.
	onErr func(error)
}

func newConnector(dsn string, keepCancel bool, onErr func(error)) (*connector, error) {
	base, err := sqlite.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	return &connector{Connector: base, keepCancel: keepCancel, onErr: onErr}, nil
}

func (c *connector) sql(query string) string {
	if c.rebind {
		return Rebind(query)
	}
	return query
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		c.onErr(err)
		return nil, err
	}
	return &conn{c: c, Conn: dc}, nil
}

// conn forwards every optional interface the SQLite driver's connections
// implement (sqlite.NewConnector documents the list); pgx's implement the
// same and NamedValueChecker.
type conn struct {
	c *connector
	driver.Conn
}

var (
	_ driver.ConnBeginTx        = (*conn)(nil)
	_ driver.ConnPrepareContext = (*conn)(nil)
	_ driver.ExecerContext      = (*conn)(nil)
	_ driver.QueryerContext     = (*conn)(nil)
	_ driver.Pinger             = (*conn)(nil)
	_ driver.SessionResetter    = (*conn)(nil)
	_ driver.Validator          = (*conn)(nil)
	_ driver.NamedValueChecker  = (*conn)(nil)
)

// Unwrap returns the driver's own connection.
func (c *conn) Unwrap() driver.Conn { return c.Conn }

func (c *conn) ctx(ctx context.Context) context.Context {
	if c.c.keepCancel {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

func (c *conn) seen(err error) error {
	if err != nil {
		c.c.onErr(err)
	}
	return err
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	t, err := c.Conn.(driver.ConnBeginTx).BeginTx(c.ctx(ctx), opts)
	if err != nil {
		return nil, c.seen(err)
	}
	return &tx{c: c, Tx: t}, nil
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(c.ctx(ctx), c.c.sql(query))
	if err != nil {
		return nil, c.seen(err)
	}
	return &stmt{c: c, Stmt: s}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.Conn.(driver.ExecerContext).ExecContext(c.ctx(ctx), c.c.sql(query), args)
	return r, c.seen(err)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.Conn.(driver.QueryerContext).QueryContext(c.ctx(ctx), c.c.sql(query), args)
	if err != nil {
		return nil, c.seen(err)
	}
	return &rows{c: c, Rows: r}, nil
}

func (c *conn) Ping(ctx context.Context) error {
	return c.seen(c.Conn.(driver.Pinger).Ping(c.ctx(ctx)))
}

func (c *conn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// IsValid forwards the driver's own answer; pgx's connections give none,
// and ResetSession tells database/sql when they are broken.
func (c *conn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

// CheckNamedValue lets pgx take the argument types it knows; for SQLite's
// connections, database/sql's default conversion applies.
func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

type tx struct {
	c *conn
	driver.Tx
}

func (t *tx) Commit() error   { return t.c.seen(t.Tx.Commit()) }
func (t *tx) Rollback() error { return t.c.seen(t.Tx.Rollback()) }

type stmt struct {
	c *conn
	driver.Stmt
}

var (
	_ driver.StmtExecContext  = (*stmt)(nil)
	_ driver.StmtQueryContext = (*stmt)(nil)
)

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	r, err := s.Stmt.(driver.StmtExecContext).ExecContext(s.c.ctx(ctx), args)
	return r, s.c.seen(err)
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	r, err := s.Stmt.(driver.StmtQueryContext).QueryContext(s.c.ctx(ctx), args)
	if err != nil {
		return nil, s.c.seen(err)
	}
	return &rows{c: s.c, Rows: r}, nil
}

type rows struct {
	c *conn
	driver.Rows
}

func (r *rows) Next(dest []driver.Value) error {
	err := r.Rows.Next(dest)
	if err != nil && !errors.Is(err, io.EOF) {
		r.c.seen(err)
	}
	return err
}

// The column-type interfaces of the driver's rows, for sql.Rows.ColumnTypes;
// an answer the driver does not give is "unknown".

func (r *rows) ColumnTypeDatabaseTypeName(i int) string {
	if ct, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return ct.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *rows) ColumnTypeLength(i int) (int64, bool) {
	if ct, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return ct.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *rows) ColumnTypeNullable(i int) (bool, bool) {
	if ct, ok := r.Rows.(driver.RowsColumnTypeNullable); ok {
		return ct.ColumnTypeNullable(i)
	}
	return false, false
}

func (r *rows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if ct, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return ct.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *rows) ColumnTypeScanType(i int) reflect.Type {
	if ct, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return ct.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

// IsCorrupt reports whether err says the database is damaged (SQLite's
// SQLITE_CORRUPT and SQLITE_NOTADB, PostgreSQL's data_corrupted and
// index_corrupted): retrying cannot help, and it must be restored from a
// backup.
func IsCorrupt(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrCorrupt) {
		return true
	}
	switch sqlstate(err) {
	case "":
	case sqlstateDataCorrupted, sqlstateIndexCorrupted:
		return true
	default:
		return false
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return true
		}
		return false
	}
	s := err.Error()
	return strings.Contains(s, "database disk image is malformed") || strings.Contains(s, "file is not a database")
}
