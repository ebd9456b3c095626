package storetest

import (
	"sync"
	"testing"

	"switchyard/store"
)

// RefuseConnections makes db's PostgreSQL database refuse new connections
// from now on (ALLOW_CONNECTIONS false, set from the server's maintenance
// database), as a server being restarted or at its connection limit would;
// the connections already open stay. The returned function lets new ones in
// again; it also runs when tb ends. PostgreSQL only.
func RefuseConnections(tb testing.TB, db *store.DB) (allow func()) {
	tb.Helper()
	if !db.Postgres() {
		tb.Fatal("storetest.RefuseConnections: a PostgreSQL database only")
	}
	admin, _ := maintenance(tb)
	var name string
	if err := db.Read.QueryRow(`select current_database()`).Scan(&name); err != nil {
		tb.Fatal(err)
	}
	if _, err := admin.Exec(`alter database ` + name + ` allow_connections false`); err != nil {
		tb.Fatal(err)
	}
	allow = sync.OnceFunc(func() {
		if _, err := admin.Exec(`alter database ` + name + ` allow_connections true`); err != nil {
			tb.Error(err)
		}
	})
	tb.Cleanup(allow)
	return allow
}
