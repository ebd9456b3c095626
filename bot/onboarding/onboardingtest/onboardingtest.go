// Package onboardingtest writes the onboarding bot's rows directly, for the
// tests and benchmarks of other packages that need many of them (the
// console's funnel list): what the bot would have written, without running
// it. The rows are real rows of the real schema; the SQL stays in the
// package tree that owns the tables.
package onboardingtest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"switchyard/bot/contract"
	"switchyard/bot/onboarding"
	"switchyard/store"
)

// Funnel is a funnel user to seed.
type Funnel struct {
	TelegramID contract.TelegramID
	UID        contract.UID // zero for none
	Stage      onboarding.Stage
	At         time.Time // created and last changed
}

// Funnels writes the users' funnel rows.
func Funnels(tb testing.TB, db *store.DB, users []Funnel) {
	tb.Helper()
	ctx := context.Background()
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for _, u := range users {
			var uid any
			if u.UID != 0 {
				uid = int64(u.UID)
			}
			at := store.TS(u.At)
			if _, err := tx.ExecContext(ctx, `insert into bot_funnel (telegram_id, uid, stage, created_at, updated_at) values (?, ?, ?, ?, ?)`,
				string(u.TelegramID), uid, int(u.Stage), at, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("seed %d funnel users: %v", len(users), err)
	}
}
