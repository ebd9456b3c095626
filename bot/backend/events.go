package backend

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"switchyard/bot/contract"
)

// The operator's list of outbox events: windows of the events of a filter
// in id order (keyset: before or after an id, so a window costs the same at
// any depth), their count, the search, and the bulk redrive of dead letters.
//
// Each filter walks an index in id order (migrations 00004, 00012, 00025):
// the whole list and a processed one the primary key, a type or a user
// their (column, id) indexes, a dead-lettered and an unfinished one the
// partial indexes of 00025. A search by payload text reads the rows (there
// is no text index), newest first until the window is full.

var stateWhere = map[EventState]string{
	stateUnfiltered: `1 = 1`,
	StatePending:    `processed_at is null and dead_lettered_at is null and attempts = 0`,
	StateRetrying:   `processed_at is null and dead_lettered_at is null and attempts > 0`,
	StateProcessed:  `processed_at is not null`,
	StateDead:       `processed_at is null and dead_lettered_at is not null`,
}

// The filters' conditions beyond the state. Each is constant text; the
// values are bound.
const (
	typeWhere       = ` and event_type = ?`
	uidWhere        = ` and magnet_uid = ?`
	telegramIDWhere = ` and telegram_id = ?`
	eitherUserWhere = ` and (magnet_uid = ? or telegram_id = ?)`
	idSearchWhere   = ` and (id = ? or magnet_uid = ? or telegram_id = ?)`
	textSearchWhere = ` and lower(payload) like ? escape '\'`
	beforeWhere     = ` and id < ?`
	afterWhere      = ` and id > ?`
)

// maxSearchLen bounds a search term.
const maxSearchLen = 200

// searchID is the number a search term is, when it is one: an event id, a
// uid or a Telegram id.
func searchID(term string) (int64, bool) {
	n, err := strconv.ParseInt(term, 10, 64)
	return n, err == nil && n > 0 && !strings.HasPrefix(term, "+")
}

// SearchReadsRows reports whether f's search is by payload text, which
// reads the rows themselves: a count of it is a scan, to be bounded
// (CountEvents' upTo).
func (f EventFilter) SearchReadsRows() bool {
	term := strings.TrimSpace(f.Search)
	_, isID := searchID(term)
	return term != "" && !isID
}

// likePattern is a LIKE pattern that finds term anywhere, its own % and _
// taken literally.
func likePattern(term string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(strings.ToLower(term)) + "%"
}

// where is the condition of f, with its bound values. A search term that is
// a number finds the event of that id and the events of that uid or
// Telegram id; any other term is looked for in the payload,
// case-insensitively.
func (f EventFilter) where() (string, []any, error) {
	where, ok := stateWhere[f.State]
	if !ok {
		return "", nil, contract.Invalidf("state must be pending, retrying, processed or dead, not %q", f.State)
	}
	where, args, err := f.matching(where)
	if err != nil {
		return "", nil, err
	}
	if f.BeforeID > 0 {
		where, args = where+beforeWhere, append(args, int64(f.BeforeID))
	}
	if f.AfterID > 0 {
		where, args = where+afterWhere, append(args, int64(f.AfterID))
	}
	return where, args, nil
}

// listSQL is ListEvents' query of f and its bound values.
func (f EventFilter) listSQL() (string, []any, error) {
	where, args, err := f.where()
	if err != nil {
		return "", nil, err
	}
	order := ` order by id desc limit ?`
	if f.AfterID > 0 {
		order = ` order by id limit ?`
	}
	return `select ` + recordColumns + ` from bot_event_outbox where ` + where + order,
		append(args, contract.ClampPendingLimit(f.Limit)), nil
}

// countSQL is CountEvents' query of f and its bound values.
func (f EventFilter) countSQL(upTo int64) (string, []any, error) {
	where, args, err := f.where()
	if err != nil {
		return "", nil, err
	}
	switch {
	case upTo > 0:
		return `select count(*) from (select 1 from bot_event_outbox where ` + where + ` limit ?) as matching`,
			append(args, upTo+1), nil
	case f == EventFilter{State: StateProcessed, Limit: f.Limit}:
		// Every event less the unfinished ones: two index-only counts, where
		// "processed_at is not null" is a range of the (processed_at, id)
		// index as long as the table.
		return `select (select count(*) from bot_event_outbox) - (select count(*) from bot_event_outbox where processed_at is null)`, nil, nil
	}
	return `select count(*) from bot_event_outbox where ` + where, args, nil
}

// matching adds f's type, user and search conditions to where.
func (f EventFilter) matching(where string) (string, []any, error) {
	var args []any
	if f.Type != "" {
		if !f.Type.Valid() {
			return "", nil, contract.Invalidf("type must be one of %v, not %q", contract.EventTypes, f.Type)
		}
		where, args = where+typeWhere, append(args, string(f.Type))
	}
	switch {
	case f.MagnetUID != 0 && f.TelegramID != "":
		where, args = where+eitherUserWhere, append(args, int64(f.MagnetUID), string(f.TelegramID))
	case f.MagnetUID != 0:
		where, args = where+uidWhere, append(args, int64(f.MagnetUID))
	case f.TelegramID != "":
		where, args = where+telegramIDWhere, append(args, string(f.TelegramID))
	}
	term := strings.TrimSpace(f.Search)
	if len(term) > maxSearchLen {
		return "", nil, contract.Invalidf("a search term is at most %d bytes", maxSearchLen)
	}
	if n, ok := searchID(term); ok {
		where, args = where+idSearchWhere, append(args, n, n, term)
	} else if term != "" {
		where, args = where+textSearchWhere, append(args, likePattern(term))
	}
	return where, args, nil
}

// CountEvents counts the events of f (its window bounds included, so the
// events newer than a window's first one are its position). With upTo above
// zero it stops counting past upTo and returns upTo+1 ("more than upTo"),
// which keeps a count of a text search, or of a deep position, from reading
// the whole table; with zero it counts them all — from an index alone, for
// every filter but a text search.
func (o *Outbox) CountEvents(ctx context.Context, f EventFilter, upTo int64) (int64, error) {
	q, args, err := f.countSQL(upTo)
	if err != nil {
		return 0, err
	}
	var n int64
	err = o.db.Read.QueryRowContext(ctx, q, args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count events: %w", err)
	}
	return n, nil
}

// RedriveDead puts dead-lettered events back in the pending list at once,
// attempts reset, like Redrive: those of ids, or, when ids is nil, every
// dead-lettered event matching f (its state and window ignored). It returns
// how many it redrove; ids that are no dead letter (processed meanwhile,
// redriven already, unknown) are passed over. One transaction.
func (o *Outbox) RedriveDead(ctx context.Context, f EventFilter, ids []contract.EventID) (int64, error) {
	if ids != nil && len(ids) == 0 {
		return 0, nil
	}
	if len(ids) > contract.BOT_OUTBOX_MAX_PENDING_LIMIT {
		return 0, contract.Invalidf("at most %d events at once", contract.BOT_OUTBOX_MAX_PENDING_LIMIT)
	}
	where, args, err := f.matching(stateWhere[StateDead])
	if err != nil {
		return 0, err
	}
	if ids != nil {
		where += ` and id in (?` + strings.Repeat(`, ?`, len(ids)-1) + `)`
		for _, id := range ids {
			args = append(args, int64(id))
		}
	}
	var n int64
	err = o.Tx(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx,
			`update bot_event_outbox set attempts = 0, next_retry_at = null, dead_lettered_at = null where `+where, args...)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("redrive dead events: %w", err)
	}
	return n, nil
}
