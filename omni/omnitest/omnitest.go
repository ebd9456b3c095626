// Package omnitest writes the chat platform's rows directly, for the tests
// and benchmarks of other packages that need many of them at chosen times
// (the console's throughput charts): what the chat role would have written,
// without running it. The rows are real rows of the real schema; the SQL
// stays in the package tree that owns the tables.
package omnitest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"switchyard/omni"
	"switchyard/store"
)

// Message is a message to seed: its direction and when it was stored.
type Message struct {
	Direction omni.Direction
	At        time.Time
}

// Thread writes a new contact with one open Telegram bot thread and, in the
// order given, its text messages (inbound ones received, outbound ones
// sent), and returns the thread's id.
func Thread(tb testing.TB, db *store.DB, msgs ...Message) omni.ThreadID {
	tb.Helper()
	ctx := context.Background()
	now := store.TS(db.Now())
	var thread omni.ThreadID
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		user := uuid.NewString()
		// returning, not LastInsertId: PostgreSQL's driver has no last insert id.
		var contact int64
		if err := tx.QueryRowContext(ctx, `insert into omni_contacts (provider, provider_user_id, created_at, updated_at)
			values ('telegram', ?, ?, ?) returning id`, user, now, now).Scan(&contact); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `insert into omni_threads (contact_id, channel, bot_id, chat_id, state, created_at, updated_at)
			values (?, ?, '1', ?, ?, ?, ?) returning id`, contact, string(omni.ChannelTelegramBot), user, string(omni.ThreadOpen), now, now).Scan(&thread); err != nil {
			return err
		}
		st, err := tx.PrepareContext(ctx, `insert into omni_messages (thread_id, seq, direction, origin, kind, text, status, created_at, updated_at)
			values (?, ?, ?, ?, ?, 'hi', ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for i, m := range msgs {
			status := omni.StatusReceived
			if m.Direction == omni.DirectionOutbound {
				status = omni.StatusSent
			}
			at := store.TS(m.At)
			if _, err := st.ExecContext(ctx, int64(thread), i+1, string(m.Direction), string(omni.OriginProvider), string(omni.KindText),
				string(status), at, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("seed a thread of %d messages: %v", len(msgs), err)
	}
	return thread
}
