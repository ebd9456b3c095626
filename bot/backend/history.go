package backend

import (
	"context"
	"fmt"
	"strconv"

	"switchyard/history"
	"switchyard/mask"
	"switchyard/store"
)

// The console's search ("what happened to X") asks the backend what its
// tables know about a term: the outbox events naming a Telegram id or a
// magnet uid (through the account that binds them), an event by its id, the
// events a trace emitted, and the fallback notifications of those accounts.

// historyUsersSQL finds the accounts a number names, as a uid or as a bound
// Telegram id (both columns are keys).
const historyUsersSQL = `select uid, coalesce(telegram_id, '') from users where uid = ? or telegram_id = ? limit 2`

// historyEventsSQL reads the events of some users, or one event by its id.
// Each condition has its index (migration 00012, the primary key); the
// lists are filled up to two entries each, unused ones bound to values no
// row has.
const historyEventsSQL = `select ` + recordColumns + ` from bot_event_outbox
	where telegram_id in (?, ?) or magnet_uid in (?, ?) or id = ?
	order by id desc limit ?`

// historyTraceSQL reads the events whose emit was in one trace: the
// traceparents "00-<trace id>-…" form one range of the partial index of
// migration 00017.
const historyTraceSQL = `select ` + recordColumns + ` from bot_event_outbox
	where traceparent <> '' and traceparent >= ? and traceparent < ?
	order by id desc limit ?`

const historyNotificationsSQL = `select id, uid, kind, created_at from web_notifications
	where uid = ? order by id desc limit ?`

// History returns what the outbox knows about term, each row's events at
// most limit rows per query: every event's emit, its ack or its dead letter,
// and the fallback notifications written for the accounts it names.
func (o *Outbox) History(ctx context.Context, term string, limit int) (history.Found, error) {
	var found history.Found
	if history.IsTraceID(term) {
		rows, err := o.db.Read.QueryContext(ctx, historyTraceSQL, "00-"+term+"-", "00-"+term+".", limit)
		if err != nil {
			return found, fmt.Errorf("outbox history of trace %s: %w", term, err)
		}
		recs, err := scanRecords(rows)
		if err != nil {
			return found, fmt.Errorf("outbox history of trace %s: %w", term, err)
		}
		found.Add(limit, len(recs), eventItems(recs)...)
		return found, nil
	}
	n, ok := history.Number(term)
	if !ok {
		return found, nil
	}
	uids, tgs := []int64{n, 0}, []string{term, ""}
	rows, err := o.db.Read.QueryContext(ctx, historyUsersSQL, n, term)
	if err != nil {
		return found, fmt.Errorf("outbox history of %s: accounts: %w", term, err)
	}
	defer rows.Close()
	var accounts []int64
	for rows.Next() {
		var (
			uid int64
			tg  string
		)
		if err := rows.Scan(&uid, &tg); err != nil {
			return found, fmt.Errorf("outbox history of %s: accounts: %w", term, err)
		}
		accounts = append(accounts, uid)
		if uid != n {
			uids[1] = uid
		}
		if tg != "" && tg != term {
			tgs[1] = tg
		}
	}
	if err := rows.Err(); err != nil {
		return found, fmt.Errorf("outbox history of %s: accounts: %w", term, err)
	}
	ev, err := o.db.Read.QueryContext(ctx, historyEventsSQL, tgs[0], tgs[1], uids[0], uids[1], n, limit)
	if err != nil {
		return found, fmt.Errorf("outbox history of %s: %w", term, err)
	}
	recs, err := scanRecords(ev)
	if err != nil {
		return found, fmt.Errorf("outbox history of %s: %w", term, err)
	}
	found.Add(limit, len(recs), eventItems(recs)...)
	for _, uid := range accounts {
		items, err := o.notificationItems(ctx, uid, limit)
		if err != nil {
			return found, fmt.Errorf("outbox history of %s: %w", term, err)
		}
		found.Add(limit, len(items), items...)
	}
	return found, nil
}

type rowsScanner interface {
	scanner
	Next() bool
	Err() error
	Close() error
}

func scanRecords(rows rowsScanner) ([]EventRecord, error) {
	defer rows.Close()
	var out []EventRecord
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// eventItems are the steps of each event: its emit, then its ack, its dead
// letter or its last failed attempt.
func eventItems(recs []EventRecord) []history.Item {
	var items []history.Item
	for _, r := range recs {
		id := strconv.FormatInt(int64(r.ID), 10)
		ids := []history.ID{{Name: "event", Value: id}}
		target := ""
		if r.TelegramID != nil {
			ids = append(ids, history.ID{Name: "telegram id", Value: string(*r.TelegramID)})
			target = " for Telegram id " + string(*r.TelegramID)
		}
		if r.MagnetUID != nil {
			uid := strconv.FormatInt(int64(*r.MagnetUID), 10)
			ids = append(ids, history.ID{Name: "magnet uid", Value: uid})
			target += " for uid " + uid
		}
		item := func(kind, summary string, at store.Timestamp) history.Item {
			return history.Item{At: at.Time, Flow: history.FlowBot, Kind: kind, Summary: summary, IDs: ids,
				Link: "/admin/bot/events/" + id, TraceID: history.TraceID(r.Traceparent)}
		}
		items = append(items, item("outbox event emitted", string(r.EventType)+target, store.Timestamp{Time: r.CreatedAt}))
		lastErr := ""
		if r.LastError != nil {
			lastErr = ": " + mask.Phones(*r.LastError)
		}
		switch {
		case r.ProcessedAt != nil:
			items = append(items, item("acked", fmt.Sprintf("%s processed by the bot (%d failed attempts before)", r.EventType, r.Attempts), store.Timestamp{Time: *r.ProcessedAt}))
		case r.DeadLetteredAt != nil:
			items = append(items, item("dead-lettered", fmt.Sprintf("%s after %d attempts%s", r.EventType, r.Attempts, lastErr), store.Timestamp{Time: *r.DeadLetteredAt}))
		case r.LastAttemptAt != nil:
			items = append(items, item("attempt failed", fmt.Sprintf("%s, attempt %d%s", r.EventType, r.Attempts, lastErr), store.Timestamp{Time: *r.LastAttemptAt}))
		}
	}
	return items
}

// notificationItems are the fallback notifications written to an account's
// web cabinet (the bot's /bot/notification), without their text.
func (o *Outbox) notificationItems(ctx context.Context, uid int64, limit int) ([]history.Item, error) {
	rows, err := o.db.Read.QueryContext(ctx, historyNotificationsSQL, uid, limit)
	if err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	defer rows.Close()
	var items []history.Item
	for rows.Next() {
		var (
			id, owner int64
			kind      string
			at        store.Timestamp
		)
		if err := rows.Scan(&id, &owner, &kind, &at); err != nil {
			return nil, fmt.Errorf("notifications: %w", err)
		}
		u := strconv.FormatInt(owner, 10)
		items = append(items, history.Item{At: at.Time, Flow: history.FlowBot, Kind: "fallback notification",
			Summary: kind + " notification in the web cabinet of uid " + u,
			IDs:     []history.ID{{Name: "notification", Value: strconv.FormatInt(id, 10)}, {Name: "magnet uid", Value: u}}})
	}
	return items, rows.Err()
}
