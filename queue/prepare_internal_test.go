package queue

import (
	"context"
	"fmt"
	"testing"

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
	conn, compiled := storetest.CompileCounter(t, db)
	for _, n := range []int{1, 3, 8, 63, maxReceiveBatch} {
		t.Run(fmt.Sprintf("a receive of %d", n), func(t *testing.T) {
			st, err := conn.PrepareContext(ctx, receiveSQL(db, n))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			run := func(v int) {
				rows, err := st.QueryContext(ctx, fmt.Sprintf("2026-12-04T10:00:%02d.000Z", v), "q", fmt.Sprintf("2026-12-04T09:00:%02d.000Z", v), 10+v, "q")
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
