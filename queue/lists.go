package queue

import (
	"context"
	"fmt"
	"strings"

	"switchyard/store"
)

// The operator's lists — a queue's or a group's dead letters, a queue's
// live messages — are read one window at a time by keyset: the rows before
// or after a cursor, the (time, id) of a row at a window's edge, along an
// index that holds both (migration 00023). A window is one range of that
// index, so it costs the same at any depth, and rows arriving meanwhile do
// not shift it. Counting a list reads the same index (and, with a search
// term, the rows of the queue or group).

// ErrBadCursor means a list's cursor was not one the list gave out.
const ErrBadCursor = Error("queue: bad list cursor")

// SearchBytes is how much of each payload a search term is looked for in:
// the first 4 KiB.
const SearchBytes = 4096

// maxSearch bounds a search term.
const maxSearch = 200

// MaxIDs caps the dead letters one Redrive or PurgeDead by IDs acts on.
const MaxIDs = 1000

// cursorSep separates a cursor's time from its id; neither holds it.
const cursorSep = "~"

// Sentinels standing for "before every row" and "after every row": stored
// times are digits, so every one sorts above "" and below "~".
const (
	cursorTop    = "~"
	cursorBottom = ""
)

// CursorOldest is an After cursor below every row: the window after it is
// a list's oldest rows (its last window, newest first).
const CursorOldest = "0" + cursorSep + "0"

func makeCursor(at, id string) string { return at + cursorSep + id }

// parseCursor splits a cursor into the time and id of its row.
func parseCursor(c string) (at, id string, err error) {
	at, id, ok := strings.Cut(c, cursorSep)
	if !ok || at == "" || id == "" || len(c) > 200 || !isTimeText(at) {
		return "", "", fmt.Errorf("%w: %q", ErrBadCursor, c)
	}
	return at, id, nil
}

// isTimeText reports whether s looks like a stored time: digits and the
// punctuation of RFC 3339, nothing a query could misread.
func isTimeText(s string) bool {
	for _, r := range s {
		if !strings.ContainsRune("0123456789-:.TZ", r) {
			return false
		}
	}
	return true
}

// listBounds is the range of a list window: rows (time, id) below the upper
// bound when descending, above the lower one when ascending.
type listBounds struct {
	desc   bool
	at, id string
}

// boundsOf reads a window's cursors: before (descending from a row),
// after (ascending from a row), or neither (from the newest row when
// newestFirst, else from the oldest).
func boundsOf(before, after string, newestFirst bool) (listBounds, error) {
	switch {
	case before != "":
		at, id, err := parseCursor(before)
		return listBounds{desc: true, at: at, id: id}, err
	case after != "":
		at, id, err := parseCursor(after)
		return listBounds{at: at, id: id}, err
	case newestFirst:
		return listBounds{desc: true, at: cursorTop}, nil
	default:
		return listBounds{at: cursorBottom}, nil
	}
}

// searchTerm trims and bounds a search term.
func searchTerm(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxSearch {
		s = s[:maxSearch]
	}
	return s
}

// contains is the dialect's test that the first SearchBytes of a payload
// column hold a bound byte string: SQLite's instr, PostgreSQL's position,
// both on bytes (a blob, a bytea), case-sensitive.
func contains(db *store.DB, column string) string {
	if db.Postgres() {
		return fmt.Sprintf("position(? in substr(%s, 1, %d)) > 0", column, SearchBytes)
	}
	return fmt.Sprintf("instr(substr(%s, 1, %d), ?) > 0", column, SearchBytes)
}

// The dead-letter list: one text per direction (the keyset range must be a
// plain condition, not one a parameter can switch off, for the index to
// bound it) and dialect of the payload search.
const (
	deadColumns = `id, queue, grp, partition_id, log_offset, key, order_key, seq, priority, body, attempts, last_error,
		created_at, first_failed_at, dead_at, traceparent`
	deadWhere = `queue = ? and grp = ? and (? = '' or id = ?) and (? = '' or order_key = ?)
		and (? = '' or id = ? or order_key = ? or key = ? or %s)`
	listDeadDescQuery = `select ` + deadColumns + ` from queue_dead
	where ` + deadWhere + ` and (dead_at, id) < (?, ?)
	order by dead_at desc, id desc
	limit ?`
	listDeadAscQuery = `select ` + deadColumns + ` from queue_dead
	where ` + deadWhere + ` and (dead_at, id) > (?, ?)
	order by dead_at, id
	limit ?`
	countDeadQuery = `select count(*), coalesce(sum(case when (dead_at, id) > (?, ?) then 1 else 0 end), 0)
	from queue_dead where ` + deadWhere
	// countAllDeadQuery is countDeadQuery without filters: it reads the
	// list index alone, not the rows.
	countAllDeadQuery = `select count(*), coalesce(sum(case when (dead_at, id) > (?, ?) then 1 else 0 end), 0)
	from queue_dead where queue = ? and grp = ?`
	purgeDeadQuery = `delete from queue_dead where ` + deadWhere
	deadByIDQuery  = `select ` + deadColumns + ` from queue_dead where id = ? and queue = ? and grp = ?`
)

// deadQuery is one of the dead-letter texts above for db's dialect.
func deadQuery(db *store.DB, text string) string {
	return fmt.Sprintf(text, contains(db, "body"))
}

// deadArgs are the arguments of deadWhere.
func deadArgs(f DeadFilter) []any {
	q := searchTerm(f.Search)
	return []any{f.Queue, f.Group, f.ID, f.ID, f.OrderKey, f.OrderKey, q, q, q, q, []byte(q)}
}

// DeadCount counts the dead letters of a filter.
type DeadCount struct {
	// Total is how many match the filter (its cursors aside).
	Total int64
	// Newer is how many of them are newer than the cursor CountDead was
	// given: the rows before it in the newest-first list.
	Newer int64
}

// CountDead counts the dead letters f selects, ignoring its cursors and
// limit, and how many of them are newer than the cursor at ("" for none):
// a newest-first window starting at row at sits at position Newer+1.
func (a *Admin) CountDead(ctx context.Context, f DeadFilter, at string) (DeadCount, error) {
	atTime, atID := cursorTop, ""
	if at != "" {
		var err error
		if atTime, atID, err = parseCursor(at); err != nil {
			return DeadCount{}, err
		}
	}
	var c DeadCount
	query, args := deadQuery(a.db, countDeadQuery), append([]any{atTime, atID}, deadArgs(f)...)
	if f.ID == "" && f.OrderKey == "" && searchTerm(f.Search) == "" {
		query, args = countAllDeadQuery, []any{atTime, atID, f.Queue, f.Group}
	}
	if err := readRow(ctx, a.db, query, args...).Scan(&c.Total, &c.Newer); err != nil {
		return DeadCount{}, fmt.Errorf("queue: count dead letters of %s: %w", f.Queue, err)
	}
	return c, nil
}

// The live-message list, newest first, for one goqite queue name (a queue
// and its held twin are listed apart, each by its index range, and merged).
const (
	liveColumns = `g.id, g.body, g.received, g.created, g.timeout, g.priority,
		coalesce(r.attempt, 0), coalesce(r.last_error, ''), coalesce(o.order_key, '')`
	liveFrom = ` from goqite g
	left join queue_retries r on r.message_id = g.id
	left join queue_order o on o.message_id = g.id`
	liveState = ` (? or (g.timeout <> ? and g.timeout <= ?)) and (? or (g.timeout <> ? and g.timeout > ? and (g.received = 0 or r.attempt = g.received)))
		and (? or g.timeout = ?) and (? or (g.timeout <> ? and g.timeout > ? and g.received > 0 and (r.attempt is null or r.attempt <> g.received)))
		and (? = '' or o.order_key = ?)
		and (? = '' or g.id = ? or o.order_key = ? or %s)`
	listLiveDescQuery = `select ` + liveColumns + liveFrom + `
	where g.queue = ? and (g.created, g.id) < (?, ?) and` + liveState + `
	order by g.created desc, g.id desc
	limit ?`
	listLiveAscQuery = `select ` + liveColumns + liveFrom + `
	where g.queue = ? and (g.created, g.id) > (?, ?) and` + liveState + `
	order by g.created, g.id
	limit ?`
	countLiveQuery = `select count(*), coalesce(sum(case when (g.created, g.id) > (?, ?) then 1 else 0 end), 0)` + liveFrom + `
	where g.queue in (?, ?) and` + liveState
)

// liveStateArgs are the arguments of liveState.
func liveStateArgs(f MessageFilter, now string) []any {
	all := f.State == ""
	q := searchTerm(f.Search)
	return []any{
		all || f.State != StateReady, parkedTimeout, now,
		all || f.State != StateDelayed, parkedTimeout, now,
		all || f.State != StateHeld, parkedTimeout,
		all || f.State != StateInFlight, parkedTimeout, now,
		f.OrderKey, f.OrderKey,
		q, q, q, []byte(q),
	}
}

// MessageCount counts the live messages of a filter.
type MessageCount struct {
	// Total is how many match the filter (its cursors aside).
	Total int64
	// Newer is how many of them were sent after the cursor CountMessages
	// was given.
	Newer int64
}

// CountMessages counts the live messages f selects, ignoring its cursors
// and limit, and how many of them are newer than the cursor at ("" for
// none).
func (a *Admin) CountMessages(ctx context.Context, f MessageFilter, at string) (MessageCount, error) {
	if err := checkState(f.State); err != nil {
		return MessageCount{}, err
	}
	atTime, atID := cursorTop, ""
	if at != "" {
		var err error
		if atTime, atID, err = parseCursor(at); err != nil {
			return MessageCount{}, err
		}
	}
	var c MessageCount
	args := append([]any{atTime, atID, f.Queue, heldQueue(f.Queue)}, liveStateArgs(f, gqTime(a.db.Now()))...)
	if err := readRow(ctx, a.db, fmt.Sprintf(countLiveQuery, contains(a.db, "g.body")), args...).Scan(&c.Total, &c.Newer); err != nil {
		return MessageCount{}, fmt.Errorf("queue: count messages of %s: %w", f.Queue, err)
	}
	return c, nil
}

func checkState(s MessageState) error {
	switch s {
	case "", StateReady, StateDelayed, StateHeld, StateInFlight:
		return nil
	}
	return fmt.Errorf("queue: unknown message state %q", s)
}

// maxListLimit caps a list's Limit: a window of up to 1000 rows, and one
// more to learn whether a further window follows.
const maxListLimit = 1001
