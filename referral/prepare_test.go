package referral

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"switchyard/store/storetest"
)

// TestConsumerStatementsAreNotCompiledAgain runs every statement the
// consumer prepares (Service.stmts) three times with new values on a
// connection whose authorizer counts SQLite's compilations, and wants none
// after the first: SQLite compiles a prepared statement again on every bind
// when its plan depends on a bound value (a `col = ?` that a partial index's
// WHERE needs), which cost every record a full parse and plan of its reads.
func TestConsumerStatementsAreNotCompiledAgain(t *testing.T) {
	storetest.SQLiteOnly(t, "SQLite compiles a prepared statement again when a bound value decides its plan; PostgreSQL has no such step")
	ctx := context.Background()
	db := storetest.New(t)
	svc, err := New(ctx, Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	conn, compiled := storetest.CompileCounter(t, db)
	if len(svc.stmts) == 0 {
		t.Fatal("the service prepared no statements")
	}
	for query := range svc.stmts {
		short := strings.Join(strings.Fields(query), " ")
		short = short[:min(len(short), 60)]
		t.Run(fmt.Sprintf("%q… is compiled once", short), func(t *testing.T) {
			st, err := conn.PrepareContext(ctx, query)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			run := func(v int) {
				args := make([]any, strings.Count(query, "?"))
				for i := range args {
					args[i] = v // a text column of a strict table takes it as "v"
				}
				// The values mean nothing and some writes fail their
				// constraints: what is counted is compilation, which SQLite
				// does (again) before the statement runs.
				rows, err := st.QueryContext(ctx, args...)
				if err == nil {
					for rows.Next() {
					}
					_ = rows.Close()
				}
			}
			run(1)
			before := compiled.Load()
			run(2)
			run(3)
			if n := compiled.Load() - before; n != 0 {
				t.Errorf("compiled again on new values (%d authorizer calls): %s", n, query)
			}
		})
	}
}
