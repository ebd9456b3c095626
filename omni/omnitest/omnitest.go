// Package omnitest writes the chat platform's rows directly, for the tests
// and benchmarks of other packages that need many of them at chosen times
// (the console's throughput charts): what the chat role would have written,
// without running it. The rows are real rows of the real schema; the SQL
// stays in the package tree that owns the tables.
package omnitest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
		if len(msgs) == 0 {
			return nil
		}
		// A thread is listed from its first message on, as omni keeps it.
		last := slices.MaxFunc(msgs, func(a, b Message) int { return a.At.Compare(b.At) }).At
		_, err = tx.ExecContext(ctx, `update omni_threads set last_message_at = ? where id = ?`, store.TS(last), int64(thread))
		return err
	})
	if err != nil {
		tb.Fatalf("seed a thread of %d messages: %v", len(msgs), err)
	}
	return thread
}

// seedBatch is how many threads Threads writes per statement.
const seedBatch = 500

// Threads writes n open Telegram bot threads in one transaction, each with
// its own contact and two text messages (the customer's, then the reply),
// the newest at `newest` and each older one a second before; every tenth has
// an unread message. It is for benchmarks of the console at size: hundreds
// of thousands of threads in seconds, where Thread writes one at a time.
// prefix keeps the contacts of two calls apart.
func Threads(tb testing.TB, db *store.DB, prefix string, n int, newest time.Time) {
	tb.Helper()
	ctx := context.Background()
	now := store.TS(db.Now())
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for from := 0; from < n; from += seedBatch {
			k := min(seedBatch, n-from)
			users := make([]any, k)
			var values strings.Builder
			args := make([]any, 0, k*4)
			for i := range k {
				users[i] = prefix + strconv.Itoa(from+i)
				at := store.TS(newest.Add(-time.Duration(n-1-from-i) * time.Second))
				if i > 0 {
					values.WriteString(",")
				}
				values.WriteString("('telegram', ?, ?, ?, ?)")
				args = append(args, users[i], "Customer "+strconv.Itoa(from+i), at, now)
			}
			if _, err := tx.ExecContext(ctx, `insert into omni_contacts (provider, provider_user_id, name, created_at, updated_at)
				values `+values.String(), args...); err != nil {
				return fmt.Errorf("contacts: %w", err)
			}
			in := "?" + strings.Repeat(",?", k-1)
			// A thread's last message is its contact's creation, in this seed.
			if _, err := tx.ExecContext(ctx, `insert into omni_threads
				(contact_id, channel, bot_id, chat_id, state, unread, last_message_at, created_at, updated_at)
				select id, ?, '1', provider_user_id, ?, case when id % 10 = 0 then 1 else 0 end, created_at, created_at, created_at
				from omni_contacts where provider = 'telegram' and business_connection_id = '' and provider_user_id in (`+in+`)`,
				append([]any{string(omni.ChannelTelegramBot), string(omni.ThreadOpen)}, users...)...); err != nil {
				return fmt.Errorf("threads: %w", err)
			}
			for seq, m := range []struct {
				dir    omni.Direction
				status omni.Status
			}{{omni.DirectionInbound, omni.StatusReceived}, {omni.DirectionOutbound, omni.StatusSent}} {
				if _, err := tx.ExecContext(ctx, `insert into omni_messages
					(thread_id, seq, direction, origin, kind, text, status, created_at, updated_at)
					select t.id, ?, ?, ?, ?, 'Hello! Is the shop open today?', ?, t.last_message_at, t.last_message_at
					from omni_threads t join omni_contacts c on c.id = t.contact_id
					where c.provider = 'telegram' and c.business_connection_id = '' and c.provider_user_id in (`+in+`)`,
					append([]any{seq + 1, string(m.dir), string(omni.OriginProvider), string(omni.KindText), string(m.status)}, users...)...); err != nil {
					return fmt.Errorf("messages: %w", err)
				}
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("seed %d threads: %v", n, err)
	}
}
