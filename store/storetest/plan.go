package storetest

import (
	"strings"
	"testing"

	"switchyard/store"
)

// SQLitePlan is SQLite's query plan of query with args, its steps joined
// with "; " ("SEARCH bot_funnel USING INDEX …"), for a test that a read
// finds its rows by an index instead of scanning a table. On PostgreSQL,
// whose planner chooses by the table's statistics, it returns "".
func SQLitePlan(tb testing.TB, db *store.DB, query string, args ...any) string {
	tb.Helper()
	if db.Postgres() {
		return ""
	}
	rows, err := db.Read.Query(`explain query plan `+query, args...)
	if err != nil {
		tb.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			tb.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return strings.Join(plan, "; ")
}
