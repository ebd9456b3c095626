package storetest

import (
	"context"
	"testing"

	"switchyard/store"
)

// SchemaBehind makes db's schema look one migration behind this binary: the
// newest migration is unrecorded (its tables stay), as on a database that a
// newer binary opens before `switchyard migrate` ran. Readiness then fails
// with a pending migration. The returned function records it again; the
// test's cleanup does too.
func SchemaBehind(tb testing.TB, db *store.DB) (restore func()) {
	tb.Helper()
	st, err := db.MigrationStatus(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Write.Exec(`delete from goose_db_version where version_id = $1`, st.Latest); err != nil {
		tb.Fatal(err)
	}
	done := false
	restore = func() {
		tb.Helper()
		if done {
			return
		}
		done = true
		if _, err := db.Write.Exec(`insert into goose_db_version (version_id, is_applied) values ($1, true)`, st.Latest); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(restore)
	return restore
}
