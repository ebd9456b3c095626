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

// connector opens connections of the SQLite driver through conn.
type connector struct {
	driver.Connector
	// keepCancel passes contexts through unchanged (the read pool, where an
	// interrupt stops only the reader's own statement).
	keepCancel bool
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

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		c.onErr(err)
		return nil, err
	}
	return &conn{c: c, Conn: dc}, nil
}

// conn forwards every optional interface the SQLite driver's connections
// implement (sqlite.NewConnector documents the list).
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
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(c.ctx(ctx), query)
	if err != nil {
		return nil, c.seen(err)
	}
	return &stmt{c: c, Stmt: s}, nil
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.Conn.(driver.ExecerContext).ExecContext(c.ctx(ctx), query, args)
	return r, c.seen(err)
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.Conn.(driver.QueryerContext).QueryContext(c.ctx(ctx), query, args)
	if err != nil {
		return nil, c.seen(err)
	}
	return &rows{c: c, Rows: r}, nil
}

func (c *conn) Ping(ctx context.Context) error {
	return c.seen(c.Conn.(driver.Pinger).Ping(c.ctx(ctx)))
}

func (c *conn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *conn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

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

// The column-type interfaces of the driver's rows, for sql.Rows.ColumnTypes.

func (r *rows) ColumnTypeDatabaseTypeName(i int) string {
	return r.Rows.(driver.RowsColumnTypeDatabaseTypeName).ColumnTypeDatabaseTypeName(i)
}

func (r *rows) ColumnTypeLength(i int) (int64, bool) {
	return r.Rows.(driver.RowsColumnTypeLength).ColumnTypeLength(i)
}

func (r *rows) ColumnTypeNullable(i int) (bool, bool) {
	return r.Rows.(driver.RowsColumnTypeNullable).ColumnTypeNullable(i)
}

func (r *rows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	return r.Rows.(driver.RowsColumnTypePrecisionScale).ColumnTypePrecisionScale(i)
}

func (r *rows) ColumnTypeScanType(i int) reflect.Type {
	return r.Rows.(driver.RowsColumnTypeScanType).ColumnTypeScanType(i)
}

// IsCorrupt reports whether err says the database file is damaged
// (SQLITE_CORRUPT, SQLITE_NOTADB): retrying cannot help, and the file must be
// restored from a backup.
func IsCorrupt(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrCorrupt) {
		return true
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
