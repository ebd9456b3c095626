package omni

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"switchyard/history"
	"switchyard/mask"
	"switchyard/store"
)

// The console's search ("what happened to X") asks the chat platform what
// its tables know about a term: for a Telegram user id, the inbound updates,
// messages and deliveries of the user's threads; for a message id, that
// message and its delivery; for an idempotency key (telegram:{botId}:
// {update_id}), that update. Message texts stay out: they carry names and
// numbers.

const (
	historyThreadsSQL = `select t.id from omni_contacts c join omni_threads t on t.contact_id = c.id
		where c.provider_user_id = ? order by t.id desc limit ?`
	historyMessagesSQL = `select ` + messageColumns + `, traceparent from omni_messages
		where thread_id = ? order by seq desc limit ?`
	historyMessageSQL     = `select ` + messageColumns + `, traceparent from omni_messages where id = ?`
	historyInboundColumns = `idempotency_key, event_type, coalesce(thread_id, 0), outcome, coalesce(reason, ''), received_at,
		traceparent`
	historyInboundSQL = `select ` + historyInboundColumns + ` from omni_inbound_events
		where thread_id = ? order by applied_at desc limit ?`
	historyInboundKeySQL = `select ` + historyInboundColumns + ` from omni_inbound_events where idempotency_key = ?`
)

// History returns what the chat platform knows about term, at most limit
// rows per query.
func (a *Admin) History(ctx context.Context, term string, limit int) (history.Found, error) {
	var found history.Found
	if term == "" {
		return found, nil
	}
	rows, err := a.db.Read.QueryContext(ctx, historyInboundKeySQL, term)
	if err != nil {
		return found, fmt.Errorf("chat history of %s: %w", term, err)
	}
	items, err := scanInboundItems(rows)
	if err != nil {
		return found, fmt.Errorf("chat history of %s: %w", term, err)
	}
	found.Add(limit, len(items), items...)
	n, ok := history.Number(term)
	if !ok {
		return found, nil
	}
	var traceparent string
	m, err := scanMessage(tracedRow{a.db.Read.QueryRowContext(ctx, historyMessageSQL, n), &traceparent})
	switch {
	case err == nil:
		items := messageItems(m, traceparent)
		found.Add(limit, len(items), items...)
	case !errors.Is(err, sql.ErrNoRows):
		return found, fmt.Errorf("chat history of %s: %w", term, err)
	}
	threads, err := a.historyThreads(ctx, term, limit)
	if err != nil {
		return found, fmt.Errorf("chat history of %s: %w", term, err)
	}
	found.Add(limit, len(threads))
	for _, th := range threads {
		if err := a.threadHistory(ctx, &found, th, limit); err != nil {
			return found, fmt.Errorf("chat history of %s: thread %d: %w", term, th, err)
		}
	}
	return found, nil
}

// historyThreads are the threads of the contacts whose provider user id is
// id, newest first.
func (a *Admin) historyThreads(ctx context.Context, id string, limit int) ([]ThreadID, error) {
	rows, err := a.db.Read.QueryContext(ctx, historyThreadsSQL, id, limit)
	if err != nil {
		return nil, fmt.Errorf("threads: %w", err)
	}
	defer rows.Close()
	var out []ThreadID
	for rows.Next() {
		var th ThreadID
		if err := rows.Scan(&th); err != nil {
			return nil, fmt.Errorf("threads: %w", err)
		}
		out = append(out, th)
	}
	return out, rows.Err()
}

// threadHistory adds a thread's inbound updates, messages and deliveries.
func (a *Admin) threadHistory(ctx context.Context, found *history.Found, th ThreadID, limit int) error {
	rows, err := a.db.Read.QueryContext(ctx, historyInboundSQL, int64(th), limit)
	if err != nil {
		return fmt.Errorf("inbound updates: %w", err)
	}
	items, err := scanInboundItems(rows)
	if err != nil {
		return fmt.Errorf("inbound updates: %w", err)
	}
	found.Add(limit, len(items), items...)
	mrows, err := a.db.Read.QueryContext(ctx, historyMessagesSQL, int64(th), limit)
	if err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	defer mrows.Close()
	n := 0
	items = items[:0]
	for mrows.Next() {
		var traceparent string
		m, err := scanMessage(tracedRow{mrows, &traceparent})
		if err != nil {
			return fmt.Errorf("messages: %w", err)
		}
		n++
		items = append(items, messageItems(m, traceparent)...)
	}
	if err := mrows.Err(); err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	found.Add(limit, n, items...)
	return nil
}

// tracedRow scans a row of messageColumns followed by the row's traceparent.
type tracedRow struct {
	row         scanner
	traceparent *string
}

func (r tracedRow) Scan(dest ...any) error { return r.row.Scan(append(dest, r.traceparent)...) }

func threadLink(th ThreadID) string { return "/admin/chat/threads/" + strconv.FormatInt(int64(th), 10) }

func scanInboundItems(rows *sql.Rows) ([]history.Item, error) {
	defer rows.Close()
	var items []history.Item
	for rows.Next() {
		var (
			key, typ, outcome, reason, traceparent string
			th                                     int64
			received                               store.Timestamp
		)
		if err := rows.Scan(&key, &typ, &th, &outcome, &reason, &received, &traceparent); err != nil {
			return nil, err
		}
		summary := typ + ", " + outcome
		if reason != "" {
			summary += " (" + reason + ")"
		}
		ids := []history.ID{{Name: "idempotency key", Value: key}}
		link := ""
		if th != 0 {
			ids = append(ids, history.ID{Name: "thread", Value: strconv.FormatInt(th, 10)})
			link = threadLink(ThreadID(th))
		}
		items = append(items, history.Item{At: received.Time, Flow: history.FlowChat, Kind: "inbound update",
			Summary: summary, IDs: ids, Link: link, TraceID: history.TraceID(traceparent)})
	}
	return items, rows.Err()
}

// messageItems are a message's steps: the message, and for an outbound
// one where its delivery stands; both in the trace of the span that wrote
// the message, which its deliveries join.
func messageItems(m OmniMessage, traceparent string) []history.Item {
	trace := history.TraceID(traceparent)
	ids := []history.ID{{Name: "message", Value: strconv.FormatInt(int64(m.ID), 10)},
		{Name: "thread", Value: strconv.FormatInt(int64(m.ThreadID), 10)}}
	if m.ProviderMessageID != nil {
		ids = append(ids, history.ID{Name: "Telegram message", Value: *m.ProviderMessageID})
	}
	link := threadLink(m.ThreadID)
	items := []history.Item{{At: m.CreatedAt, Flow: history.FlowChat, Kind: "thread message",
		Summary: fmt.Sprintf("%s %s message #%d from the %s", m.Direction, m.Kind, m.Seq, m.Origin), IDs: ids, Link: link,
		TraceID: trace}}
	if m.Direction != DirectionOutbound {
		return items
	}
	d := history.Item{At: m.CreatedAt, Flow: history.FlowChat, Kind: "delivery attempt", IDs: ids, Link: link, TraceID: trace}
	reason := ""
	if m.FailureReason != "" {
		reason = ": " + mask.Phones(m.FailureReason)
	}
	switch m.Status {
	case StatusSent:
		d.Summary = fmt.Sprintf("sent to Telegram (%d failed attempts before)", m.Attempts)
		if m.SentAt != nil {
			d.At = *m.SentAt
		}
	case StatusFailed:
		d.Summary = fmt.Sprintf("failed for good after %d attempts%s", m.Attempts, reason)
	case StatusRetrying:
		d.Summary = fmt.Sprintf("retrying after %d attempts%s", m.Attempts, reason)
	default:
		d.Summary = string(m.Status) + ", not delivered yet"
	}
	return append(items, d)
}
