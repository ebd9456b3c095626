package omni

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the baseline's driver

	"switchyard/store"
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
		var seq atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			tx, err := db.BeginTx(r.Context(), nil)
			if err == nil {
				_, err = tx.Exec(`insert into updates (key, body) values ($1, $2)`, fmt.Sprint(seq.Add(1)), body)
				if err == nil {
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		}))
		defer srv.Close()
		b.ResetTimer()
		baseline = postConcurrently(b, srv.URL, testSecret, b.N, webhookConns)
		report(b, baseline)
	})

	b.Run("omni-inbound", func(b *testing.B) {
		db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
		in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
		base := serve(b, in.Routes)
		b.ResetTimer()
		r := postConcurrently(b, base+WebhookPath, testSecret, b.N, webhookConns)
		report(b, r)
		if baseline.rate > 0 {
			b.ReportMetric(r.rate/baseline.rate, "x-baseline")
		}
		b.StopTimer()
		if n := len(flowBodies(b, db)); n < min(b.N, 1000) {
			b.Fatalf("only %d envelopes on %s after %d accepted updates", n, QueueReceiverFlow, b.N)
		}
	})
}
