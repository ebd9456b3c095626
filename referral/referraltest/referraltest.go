// Package referraltest writes the referral context's rows directly, for the
// tests and benchmarks of other packages that need many of them at chosen
// times (the console's throughput charts): what the consumer would have
// written, without running it. The rows are real rows of the real schema;
// the SQL stays in the package tree that owns the tables.
package referraltest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"switchyard/referral"
	"switchyard/store"
)

// Marks writes, in the order given, one processed-message mark per time in
// at, each with outcome: what consuming len(at) identity events at those
// times leaves in referral_processed_messages.
func Marks(tb testing.TB, db *store.DB, outcome referral.Outcome, at ...time.Time) {
	tb.Helper()
	ctx := context.Background()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `insert into referral_processed_messages (mark, user_id, outcome, processed_at) values (?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, t := range at {
			if _, err := st.ExecContext(ctx, "pin.identity.user-upserted:"+uuid.NewString(), uuid.NewString(), string(outcome), store.TS(t)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("seed %d referral marks: %v", len(at), err)
	}
}
