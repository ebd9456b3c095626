package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"modernc.org/sqlite"

	"switchyard/store/storetest"
)

// A receive's statement is compiled once: SQLite compiles a prepared
// statement again whenever a value that decides its plan is bound anew — a
// LIMIT's value among them — so a receive that bound its batch size was
// compiled again at every receive. Counted through SQLite's authorizer,
// which SQLite calls as it compiles, on a connection of the test's own.
func TestReceiveIsNotCompiledAgain(t *testing.T) {
	storetest.SQLiteOnly(t, "SQLite compiles a prepared statement again when a bound value decides its plan; PostgreSQL has no such step")
	ctx := context.Background()
	db := storetest.New(t)
	raw, err := sql.Open("sqlite", db.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	conn, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
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
		t.Fatal(err)
	}
	for _, n := range []int{1, 3, 8, 63, maxReceiveBatch} {
		t.Run(fmt.Sprintf("a receive of %d", n), func(t *testing.T) {
			st, err := conn.PrepareContext(ctx, receiveSQL(db, n))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			run := func(v int) {
				rows, err := st.QueryContext(ctx, fmt.Sprintf("2026-12-04T10:00:%02d.000Z", v), "q", fmt.Sprintf("2026-12-04T09:00:%02d.000Z", v), 10+v)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
				}
				if err := rows.Close(); err != nil {
					t.Fatal(err)
				}
			}
			run(1)
			before := compiled.Load()
			run(2)
			run(3)
			if n := compiled.Load() - before; n != 0 {
				t.Errorf("compiled again on new values (%d authorizer calls)", n)
			}
		})
	}
}
