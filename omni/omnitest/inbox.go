package omnitest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"switchyard/omni"
	"switchyard/store"
)

// InboxThread is a thread to seed in an inbox: its contact (a Telegram user
// id and a name), the time of its messages, and their texts in order
// (received messages).
type InboxThread struct {
	UserID string
	Name   string
	At     time.Time
	Texts  []string
}

// Inbox writes the threads, each open with its contact and its messages,
// last_message_at set to its At, and returns their ids in order.
func Inbox(tb testing.TB, db *store.DB, threads []InboxThread) []omni.ThreadID {
	tb.Helper()
	ctx := context.Background()
	var ids []omni.ThreadID
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		ids = ids[:0]
		for _, th := range threads {
			at := store.TS(th.At)
			var contact int64
			var thread omni.ThreadID
			if err := tx.QueryRowContext(ctx, `insert into omni_contacts (provider, provider_user_id, name, created_at, updated_at)
				values ('telegram', ?, ?, ?, ?) returning id`, th.UserID, th.Name, at, at).Scan(&contact); err != nil {
				return err
			}
			if err := tx.QueryRowContext(ctx, `insert into omni_threads (contact_id, channel, bot_id, chat_id, state, last_message_at, created_at, updated_at)
				values (?, ?, '1', ?, ?, ?, ?, ?) returning id`, contact, string(omni.ChannelTelegramBot), th.UserID, string(omni.ThreadOpen),
				at, at, at).Scan(&thread); err != nil {
				return err
			}
			for i, text := range th.Texts {
				if _, err := tx.ExecContext(ctx, `insert into omni_messages (thread_id, seq, direction, origin, kind, text, status, created_at, updated_at)
					values (?, ?, ?, ?, ?, ?, ?, ?, ?)`, int64(thread), i+1, string(omni.DirectionInbound), string(omni.OriginProvider),
					string(omni.KindText), text, string(omni.StatusReceived), at, at); err != nil {
					return err
				}
			}
			ids = append(ids, thread)
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("seed %d threads: %v", len(threads), err)
	}
	return ids
}
