package omni

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"switchyard/store"
)

// The operators' aggregate reads: the console's headline numbers, the inbox
// digest of each thread, one thread, and the messages per minute. They run
// on the read pool and decide nothing.

// Counts are the chat platform's headline numbers.
type Counts struct {
	// OpenThreads counts the open threads; Unread their unread messages.
	OpenThreads, Unread int64
	// Failed counts the messages whose delivery failed for good.
	Failed int64
}

// The headline numbers read indexes only: the threads of a state from
// omni_threads_state_last_message_idx, the unread messages from the
// partial omni_threads_unread_idx (the threads that have some), the failed
// messages from omni_messages_failed_idx.
const (
	openThreadsQuery    = `select count(*) from omni_threads where state = ?`
	unreadQuery         = `select coalesce(sum(unread), 0) from omni_threads where state = ? and unread > 0`
	failedMessagesQuery = `select count(*) from omni_messages where status = ?`
)

// Counts returns the headline numbers.
func (a *Admin) Counts(ctx context.Context) (Counts, error) {
	var c Counts
	if err := a.db.Read.QueryRowContext(ctx, openThreadsQuery, string(ThreadOpen)).Scan(&c.OpenThreads); err != nil {
		return c, fmt.Errorf("count threads: %w", err)
	}
	if err := a.db.Read.QueryRowContext(ctx, unreadQuery, string(ThreadOpen)).Scan(&c.Unread); err != nil {
		return c, fmt.Errorf("count unread messages: %w", err)
	}
	if err := a.db.Read.QueryRowContext(ctx, failedMessagesQuery, string(StatusFailed)).Scan(&c.Failed); err != nil {
		return c, fmt.Errorf("count failed messages: %w", err)
	}
	return c, nil
}

const getThreadQuery = `select ` + threadColumns + threadFrom + ` where t.id = ?`

// Thread returns one thread with its contact, or ErrThreadNotFound.
func (a *Admin) Thread(ctx context.Context, id ThreadID) (Thread, error) {
	t, err := scanThread(a.db.Read.QueryRowContext(ctx, getThreadQuery, int64(id)))
	if errors.Is(err, sql.ErrNoRows) {
		return Thread{}, ErrThreadNotFound
	}
	if err != nil {
		return Thread{}, fmt.Errorf("read thread %d: %w", id, err)
	}
	return t, nil
}

// ThreadDigest is what an inbox shows of a thread beyond Thread: its last
// message and how many of its deliveries failed.
type ThreadDigest struct {
	LastText      string
	LastDirection Direction
	LastKind      MessageKind
	LastStatus    Status
	Failed        int64
}

// ThreadDigests returns the digest of each of the threads that has
// messages; a thread without any has none in the map.
func (a *Admin) ThreadDigests(ctx context.Context, ids []ThreadID) (map[ThreadID]ThreadDigest, error) {
	out := make(map[ThreadID]ThreadDigest, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids)+1)
	for i, id := range ids {
		args[i] = int64(id)
	}
	in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	rows, err := a.db.Read.QueryContext(ctx, `
		select thread_id, direction, kind, text, status from omni_messages
		where id in (select max(id) from omni_messages where thread_id in (`+in+`) group by thread_id)`, args[:len(ids)]...)
	if err != nil {
		return nil, fmt.Errorf("last messages: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id ThreadID
			d  ThreadDigest
		)
		if err := rows.Scan(&id, &d.LastDirection, &d.LastKind, &d.LastText, &d.LastStatus); err != nil {
			return nil, fmt.Errorf("last messages: %w", err)
		}
		out[id] = d
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("last messages: %w", err)
	}
	args[len(ids)] = string(StatusFailed)
	frows, err := a.db.Read.QueryContext(ctx, `
		select thread_id, count(*) from omni_messages
		where thread_id in (`+in+`) and status = ? group by thread_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("failed deliveries: %w", err)
	}
	defer frows.Close()
	for frows.Next() {
		var (
			id ThreadID
			n  int64
		)
		if err := frows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("failed deliveries: %w", err)
		}
		d := out[id]
		d.Failed = n
		out[id] = d
	}
	return out, frows.Err()
}

// The messages per minute, by when they were stored: omni_messages.id grows
// with created_at (SQLite's one writer stamps each row with the store's clock
// as it inserts it), so a count searches the ids instead of scanning. On
// PostgreSQL, transactions writing at once may take their ids in another
// order than their stamps, a few milliseconds apart: a minute's count may
// then be off by the rows written in those milliseconds around its bounds.
var (
	inboundMessages = store.Stamped{Table: "omni_messages", Column: "created_at",
		Where: "direction = ?", Args: []any{string(DirectionInbound)}, ByID: true}
	outboundMessages = store.Stamped{Table: "omni_messages", Column: "created_at",
		Where: "direction = ?", Args: []any{string(DirectionOutbound)}, ByID: true}
)

// InboundBetween counts the inbound messages stored in [from, to); a zero to
// has no end.
func (a *Admin) InboundBetween(ctx context.Context, from, to time.Time) (int64, error) {
	return inboundMessages.CountBetween(ctx, a.db, from, to)
}

// OutboundBetween counts the outbound messages (replies, acknowledgements and
// the owner's own) stored in [from, to); a zero to has no end.
func (a *Admin) OutboundBetween(ctx context.Context, from, to time.Time) (int64, error) {
	return outboundMessages.CountBetween(ctx, a.db, from, to)
}
