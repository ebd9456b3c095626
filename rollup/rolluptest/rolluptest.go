// Package rolluptest writes rollups for tests and benchmarks of their
// readers: what a week of rolling up leaves, without the week.
package rolluptest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"switchyard/rollup"
	"switchyard/store"
)

// Minutes writes sr's count of each minute in values (keyed by any time in
// the minute), as RollUp would have: the latest minute given marks how far
// sr is rolled up.
func Minutes(tb testing.TB, db *store.DB, sr rollup.Series, values map[time.Time]int64) {
	tb.Helper()
	ctx := context.Background()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `insert into rollup_minutes (series, minute, value) values (?, ?, ?)
			on conflict (series, minute) do update set value = excluded.value`)
		if err != nil {
			return err
		}
		defer st.Close()
		for t, n := range values {
			if _, err := st.ExecContext(ctx, string(sr), t.Unix()/60, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("write %d rollups of %s: %v", len(values), sr, err)
	}
}
