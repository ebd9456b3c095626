package omni

import (
	"database/sql"
	"net/http/httptest"
	"runtime"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the baseline's driver

	"switchyard/store/storetest"
)

// BenchmarkPGWebhookIngest is BenchmarkWebhookIngest on PostgreSQL, with a
// PostgreSQL baseline in the same run: b.N updates posted over 64
// connections, first to a minimal handler that commits each request in its
// own transaction through a pool as large as the store's write pool, then to
// omni_inbound. It needs SWITCHYARD_TEST_DB (BenchmarkWebhookIngest's
// omni-inbound case also runs on PostgreSQL then, but its baseline stays a
// SQLite file).
//
//	SWITCHYARD_TEST_DB='postgres://…' go test -run '^$' -bench PGWebhookIngest -benchtime 20000x -count 3 ./omni/
func BenchmarkPGWebhookIngest(b *testing.B) {
	if !storetest.Postgres() {
		b.Skip("BenchmarkPGWebhookIngest needs a PostgreSQL server: set " + storetest.EnvTestDB + " to its postgres:// URL")
	}
	var baseline ingestResult

	b.Run("baseline=commit-per-request", func(b *testing.B) {
		db, err := sql.Open("pgx", storetest.Source(b))
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		conns := max(8, 4*runtime.NumCPU()) // store.Options.WriteConns' default
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
		if _, err := db.Exec(`create table updates (id bigint generated always as identity primary key, key text not null unique, body bytea not null)`); err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(commitPerRequest(db, `insert into updates (key, body) values ($1, $2)`))
		defer srv.Close()
		b.ResetTimer()
		baseline = postConcurrently(b, srv.URL, testSecret, b.N, webhookConns)
		report(b, baseline)
	})

	b.Run("omni-inbound", func(b *testing.B) { benchOmniInbound(b, baseline) })
}
