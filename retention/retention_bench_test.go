package retention_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"switchyard/omni"
	"switchyard/retention"
	"switchyard/store"
	"switchyard/store/storetest"
)

// BenchmarkPass prunes 20,000 expired ledger rows (of 40,000) in batches of
// DefaultBatchSize at synchronous=FULL, and reports the longest batch: how
// long the prune held the writer at most.
func BenchmarkPass(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
		chat := omni.NewAdmin(omni.AdminOpts{DB: db})
		for i := range 40 {
			at := store.TS(db.Now().Add(-10 * 24 * time.Hour))
			if i >= 20 {
				at = store.TS(db.Now())
			}
			if err := db.Tx(context.Background(), func(tx *sql.Tx) error {
				for j := range 1000 {
					if _, err := tx.Exec(`insert into omni_inbound_events (idempotency_key, event_type, outcome, occurred_at, received_at, applied_at)
						values (?, 'message', 'applied', ?, ?, ?)`, fmt.Sprintf("telegram:update:%d:%d", i, j), at, at, at); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
		r := retention.New(retention.Opts{DB: db, Rules: []retention.Rule{{Name: "webhook-ledger", Keep: 7 * 24 * time.Hour,
			Parts: []retention.Part{{Table: "omni_inbound_events", Prune: chat.PruneInboundLedger}}}}})
		b.StartTimer()
		res, err := r.Pass(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if res[0].Rows != 20000 {
			b.Fatalf("pruned %d rows, want 20000", res[0].Rows)
		}
		b.ReportMetric(float64(res[0].LongestBatch.Microseconds())/1000, "longest-batch-ms")
		b.ReportMetric(float64(res[0].Took.Microseconds())/float64(res[0].Batches)/1000, "mean-batch-ms")
		b.ReportMetric(float64(res[1].Rows), "pages-returned")
		b.StartTimer()
	}
}
