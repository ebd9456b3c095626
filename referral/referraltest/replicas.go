package referraltest

import (
	"testing"
	"time"

	"switchyard/referral"
	"switchyard/store"
)

// Replica writes an Active Client's replica, as the consumer would have
// from its first identity event, changed at at.
func Replica(tb testing.TB, db *store.DB, id referral.UserID, first, last, phone string, at time.Time) {
	tb.Helper()
	if _, err := db.Write.Exec(`insert into referral_users (id, type, status, first_name, last_name, phone_number, is_name_filled,
		replica_version, updated_at) values (?, 'Client', 'Active', ?, ?, ?, 1, 1, ?)`, string(id), first, last, phone, store.TS(at)); err != nil {
		tb.Fatalf("seed replica %s: %v", id, err)
	}
}
