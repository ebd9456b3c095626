package onboarding

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"switchyard/bot/contract"
	"switchyard/history"
	"switchyard/mask"
	"switchyard/store"
)

// The console's search ("what happened to X") asks the bot what its tables
// know about a term: for a Telegram id (or a magnet uid its funnel names),
// the funnel's changes, the updates the user sent, the outbox events handled
// for them and their DMs; for an event id, its handling; for a trace id, the
// updates and deliveries that recorded it. Texts stay out: they carry names.

const (
	historyFunnelByUIDSQL = `select telegram_id from bot_funnel where uid = ? limit 2`
	historyChangesSQL     = `select id, cause, change, old_value, new_value, at from bot_funnel_history
		where telegram_id = ? order by id desc limit ?`
	historyUpdatesSQL = `select bot_id, update_id, chat_id, kind, status, attempts, received_at, done_at, traceparent
		from bot_updates where chat_id = ? order by received_at desc limit ?`
	historyUpdatesTraceSQL = `select bot_id, update_id, chat_id, kind, status, attempts, received_at, done_at, traceparent
		from bot_updates where traceparent <> '' and traceparent >= ? and traceparent < ? limit ?`
	historyHandledSQL = `select outbox_event_id, event_type, outcome, processed_at from bot_processed_events
		where user_key in (?, ?, ?, ?) or outbox_event_id = ? order by id desc limit ?`
	historyDeliveriesTraceSQL = `select dm_key, method, chat_id, text, outcome, attempts, delivered_at, traceparent
		from bot_deliveries where traceparent <> '' and traceparent >= ? and traceparent < ? limit ?`
	// historyDeliveriesCauseSQL reads the deliveries an event caused: their
	// keys "event:<id>:…" are one range of the primary key (bytewise on both
	// backends: PostgreSQL's text columns collate "C").
	historyDeliveriesCauseSQL = `select dm_key, method, chat_id, text, outcome, attempts, delivered_at, traceparent
		from bot_deliveries where dm_key >= ? and dm_key < ? limit ?`
)

// History returns what the bot knows about term, at most limit rows per
// query.
func (o *Bot) History(ctx context.Context, term string, limit int) (history.Found, error) {
	var found history.Found
	if history.IsTraceID(term) {
		return found, o.traceHistory(ctx, &found, term, limit)
	}
	n, ok := history.Number(term)
	if !ok {
		return found, nil
	}
	tgs := []contract.TelegramID{contract.TelegramID(term)}
	rows, err := o.db.Read.QueryContext(ctx, historyFunnelByUIDSQL, n)
	if err != nil {
		return found, fmt.Errorf("bot history of %s: %w", term, err)
	}
	defer rows.Close()
	for rows.Next() {
		var tg string
		if err := rows.Scan(&tg); err != nil {
			return found, fmt.Errorf("bot history of %s: %w", term, err)
		}
		if tg != term {
			tgs = append(tgs, contract.TelegramID(tg))
		}
	}
	if err := rows.Err(); err != nil {
		return found, fmt.Errorf("bot history of %s: %w", term, err)
	}
	// The handled events are keyed by the user the event named: by
	// Telegram id or by uid, the term's or its funnel's.
	keys := []string{userKey("tg", n), userKey("uid", n), "", ""}
	for i, tg := range tgs {
		if i > 0 {
			t, _ := strconv.ParseInt(string(tg), 10, 64)
			keys[2] = userKey("tg", t)
		}
		f, err := loadFunnel(ctx, o.db.Read, tg, "")
		switch {
		case errors.Is(err, ErrFunnelNotFound):
		case err != nil:
			return found, fmt.Errorf("bot history of %s: %w", term, err)
		case f.UID != nil && i == 0:
			keys[3] = userKey("uid", int64(*f.UID))
		}
		if err := o.userHistory(ctx, &found, tg, limit); err != nil {
			return found, fmt.Errorf("bot history of %s: %w", term, err)
		}
	}
	if err := o.handledHistory(ctx, &found, keys, n, limit); err != nil {
		return found, fmt.Errorf("bot history of %s: %w", term, err)
	}
	// The term as an event id: the DMs it caused (the user's own, found
	// above, are left out).
	if err := o.deliveryHistory(ctx, &found, historyDeliveriesCauseSQL, "event:"+term+":", "event:"+term+";", limit, tgs); err != nil {
		return found, fmt.Errorf("bot history of %s: %w", term, err)
	}
	return found, nil
}

// userKey is the key bot_processed_events keeps an event's user by
// (contract.Event.UserKey): "tg:<id>" or "uid:<n>".
func userKey(kind string, n int64) string {
	if kind == "uid" {
		uid := contract.UID(n)
		return contract.UserKey(&uid, nil)
	}
	tg := contract.TelegramID(strconv.FormatInt(n, 10))
	return contract.UserKey(nil, &tg)
}

func userLink(tg contract.TelegramID) string { return "/admin/bot/users/" + string(tg) }

// userHistory adds one Telegram user's funnel changes, updates and DMs.
func (o *Bot) userHistory(ctx context.Context, found *history.Found, tg contract.TelegramID, limit int) error {
	rows, err := o.db.Read.QueryContext(ctx, historyChangesSQL, string(tg), limit)
	if err != nil {
		return fmt.Errorf("funnel history: %w", err)
	}
	var changes []history.Item
	for rows.Next() {
		var (
			id             int64
			cause, change  string
			oldVal, newVal sql.NullString
			at             store.Timestamp
		)
		if err := rows.Scan(&id, &cause, &change, &oldVal, &newVal, &at); err != nil {
			_ = rows.Close()
			return fmt.Errorf("funnel history: %w", err)
		}
		kind, summary := "funnel change", change
		if change == "stage" {
			kind = "funnel stage"
		}
		if newVal.Valid {
			summary += ": " + valueOr(oldVal, "none") + " → " + newVal.String
		}
		changes = append(changes, history.Item{At: at.Time, Flow: history.FlowBot, Kind: kind,
			Summary: summary + " (" + cause + ")", Link: userLink(tg),
			IDs: []history.ID{{Name: "telegram id", Value: string(tg)}, {Name: "cause", Value: cause}}})
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("funnel history: %w", err)
	}
	found.Add(limit, len(changes), changes...)

	rows, err = o.db.Read.QueryContext(ctx, historyUpdatesSQL, string(tg), limit)
	if err != nil {
		return fmt.Errorf("updates: %w", err)
	}
	updates, err := scanUpdateItems(rows)
	if err != nil {
		return fmt.Errorf("updates: %w", err)
	}
	found.Add(limit, len(updates), updates...)

	dms, err := o.ListDMs(ctx, DMFilter{ChatID: tg, Limit: limit})
	if err != nil {
		return fmt.Errorf("DMs: %w", err)
	}
	var items []history.Item
	for _, d := range dms {
		items = append(items, dmItem(d))
	}
	found.Add(limit, len(items), items...)
	return nil
}

func valueOr(v sql.NullString, or string) string {
	if v.Valid {
		return v.String
	}
	return or
}

type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close() error
}

func closeRows(r rows) error {
	err := r.Err()
	if cerr := r.Close(); err == nil {
		err = cerr
	}
	return err
}

func scanUpdateItems(r rows) ([]history.Item, error) {
	var items []history.Item
	for r.Next() {
		var (
			botID, updateID    int64
			chat, kind, status string
			attempts           int
			received, done     store.Timestamp
			traceparent        string
		)
		if err := r.Scan(&botID, &updateID, &chat, &kind, &status, &attempts, &received, &done, &traceparent); err != nil {
			_ = r.Close()
			return nil, err
		}
		ids := []history.ID{{Name: "update", Value: strconv.FormatInt(updateID, 10)},
			{Name: "bot", Value: strconv.FormatInt(botID, 10)}, {Name: "telegram id", Value: chat}}
		trace := history.TraceID(traceparent)
		items = append(items, history.Item{At: received.Time, Flow: history.FlowBot, Kind: "inbound update",
			Summary: fmt.Sprintf("%s to the onboarding bot, %s", kind, status), IDs: ids,
			Link: userLink(contract.TelegramID(chat)), TraceID: trace})
	}
	return items, closeRows(r)
}

// dmItem is a DM as the search shows it: its status and cause, not its text.
func dmItem(d DM) history.Item {
	kind := "DM " + string(d.Status)
	switch d.Status {
	case DMNotified:
		kind = "fallback"
	case DMPending, DMRetrying, DMSending:
		kind = "DM queued"
	}
	summary := fmt.Sprintf("%s to %s, %s (cause %s)", d.Method, d.ChatID, d.Status, d.Cause)
	if d.Status == DMNotified {
		summary = fmt.Sprintf("%s to %s failed; the web cabinet was notified instead (cause %s)", d.Method, d.ChatID, d.Cause)
	}
	if d.LastError != "" {
		summary += ": " + mask.Phones(d.LastError)
	}
	ids := []history.ID{{Name: "DM", Value: d.Key}, {Name: "telegram id", Value: string(d.ChatID)}}
	if d.MessageID != "" {
		ids = append(ids, history.ID{Name: "queue message", Value: d.MessageID})
	}
	return history.Item{At: d.At, Flow: history.FlowBot, Kind: kind, Summary: summary, IDs: ids,
		Link: userLink(d.ChatID), TraceID: history.TraceID(d.Traceparent)}
}

// handledHistory adds the outbox events the bot handled for the users
// (keys), or the event numbered id.
func (o *Bot) handledHistory(ctx context.Context, found *history.Found, keys []string, id int64, limit int) error {
	rows, err := o.db.Read.QueryContext(ctx, historyHandledSQL, keys[0], keys[1], keys[2], keys[3], id, limit)
	if err != nil {
		return fmt.Errorf("handled events: %w", err)
	}
	var items []history.Item
	for rows.Next() {
		var (
			ev           int64
			typ, outcome string
			processed    store.Timestamp
		)
		if err := rows.Scan(&ev, &typ, &outcome, &processed); err != nil {
			_ = rows.Close()
			return fmt.Errorf("handled events: %w", err)
		}
		e := strconv.FormatInt(ev, 10)
		items = append(items, history.Item{At: processed.Time, Flow: history.FlowBot, Kind: "outbox event handled",
			Summary: typ + ": " + outcome, IDs: []history.ID{{Name: "event", Value: e}}, Link: "/admin/bot/events/" + e})
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("handled events: %w", err)
	}
	found.Add(limit, len(items), items...)
	return nil
}

// traceHistory adds the updates and deliveries that recorded trace id.
func (o *Bot) traceHistory(ctx context.Context, found *history.Found, id string, limit int) error {
	from, to := "00-"+id+"-", "00-"+id+"."
	rows, err := o.db.Read.QueryContext(ctx, historyUpdatesTraceSQL, from, to, limit)
	if err != nil {
		return fmt.Errorf("bot history of trace %s: %w", id, err)
	}
	updates, err := scanUpdateItems(rows)
	if err != nil {
		return fmt.Errorf("bot history of trace %s: %w", id, err)
	}
	found.Add(limit, len(updates), updates...)
	return o.deliveryHistory(ctx, found, historyDeliveriesTraceSQL, from, to, limit, nil)
}

// deliveryHistory adds the deliveries query finds in [from, to), but those
// to the chats skip.
func (o *Bot) deliveryHistory(ctx context.Context, found *history.Found, query, from, to string, limit int, skip []contract.TelegramID) error {
	drows, err := o.db.Read.QueryContext(ctx, query, from, to, limit)
	if err != nil {
		return fmt.Errorf("deliveries: %w", err)
	}
	var items []history.Item
	n := 0
	for drows.Next() {
		var (
			d  DM
			at store.Timestamp
		)
		if err := drows.Scan(&d.Key, &d.Method, &d.ChatID, &d.Text, &d.Status, &d.Attempts, &at, &d.Traceparent); err != nil {
			_ = drows.Close()
			return fmt.Errorf("deliveries: %w", err)
		}
		n++
		if slices.Contains(skip, d.ChatID) {
			continue
		}
		d.Cause, d.At = cause(d.Key), at.Time
		items = append(items, dmItem(d))
	}
	if err := closeRows(drows); err != nil {
		return fmt.Errorf("deliveries: %w", err)
	}
	found.Add(limit, n, items...)
	return nil
}
