package storetest

import (
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"

	"modernc.org/sqlite"

	"switchyard/store"
)

// CompileCounter opens a connection of its own to db's SQLite file whose
// authorizer counts what SQLite compiles: SQLite calls the authorizer as it
// compiles a statement, so a prepared statement run again that the count
// sees was compiled again (SQLite does that when a bound value decides the
// plan). For SQLite only: call SQLiteOnly first.
func CompileCounter(tb testing.TB, db *store.DB) (*sql.Conn, *atomic.Int64) {
	tb.Helper()
	raw, err := sql.Open("sqlite", db.Path())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = raw.Close() })
	conn, err := raw.Conn(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	var compiled atomic.Int64
	err = conn.Raw(func(dc any) error {
		r, ok := dc.(sqlite.AuthorizerRegisterer)
		if !ok {
			return errors.New("the SQLite driver's connection has no authorizer")
		}
		return r.RegisterAuthorizer(func(sqlite.AuthorizerActionCode, string, string, string, string) sqlite.AuthorizerReturnCode {
			compiled.Add(1)
			return sqlite.AuthorizerOK
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	return conn, &compiled
}
