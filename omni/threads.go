package omni

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"switchyard/store"
)

// The inbox's list of threads in windows: latest activity first, by the
// key (last_message_at, id), so a window costs the same at any depth
// (migration 00025 indexes the key under the state). A thread is listed
// once it has a message, which it has from its creation.

// Key is the thread's place in the inbox's order: its last activity and
// its id, as ThreadFilter.Before and After take it.
func (t Thread) Key() string {
	if t.LastMessageAt == nil {
		return ""
	}
	return t.LastMessageAt.UTC().Format(store.TimeLayout) + "_" + strconv.FormatInt(int64(t.ID), 10)
}

// threadKey reads a Key: ok is false for anything else.
func threadKey(k string) (at store.Timestamp, id int64, ok bool) {
	atText, idText, found := strings.Cut(k, "_")
	t, err := time.Parse(store.TimeLayout, atText)
	if !found || err != nil {
		return store.Timestamp{}, 0, false
	}
	id, err = strconv.ParseInt(idText, 10, 64)
	return store.TS(t), id, err == nil && id > 0
}

// The conditions of a thread filter. Each is constant text; the values are
// bound.
const (
	threadListed      = `t.last_message_at is not null`
	threadStateWhere  = ` and t.state = ?`
	threadBeforeWhere = ` and (t.last_message_at, t.id) < (?, ?)`
	threadAfterWhere  = ` and (t.last_message_at, t.id) > (?, ?)`
	// A number is a Telegram user id (the contact's), or a thread's id: the
	// contacts' index (00017) and the threads' (contact_id, …) key find them.
	threadIDSearch = ` and (t.contact_id in (select id from omni_contacts where provider_user_id = ?) or t.id = ?)`
	// Text is looked for in the contact's name and username and in the
	// thread's messages: a search that reads rows (there is no text index),
	// thread by thread from the latest until the window is full.
	threadTextSearch = ` and (lower(c.name) like ? escape '\' or lower(c.username) like ? escape '\'
		or exists (select 1 from omni_messages m where m.thread_id = t.id and lower(m.text) like ? escape '\'))`
)

// ErrInvalidFilter is a list filter no list can have.
const ErrInvalidFilter = Error("omni: invalid list filter")

// maxSearchLen bounds a search term.
const maxSearchLen = 200

// threadLimit is the limit ListThreads applies.
func threadLimit(n int) int {
	if n <= 0 {
		return 100
	}
	return min(n, 500)
}

// SearchReadsRows reports whether f's search is by text, which reads the
// contacts and messages themselves: a count of it is bounded.
func (f ThreadFilter) SearchReadsRows() bool {
	term := strings.TrimSpace(f.Search)
	_, err := strconv.ParseInt(term, 10, 64)
	return term != "" && err != nil
}

// likePattern is a LIKE pattern that finds term anywhere, its own % and _
// taken literally.
func likePattern(term string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(strings.ToLower(term)) + "%"
}

// where is f's condition with its bound values; join says whether it
// reads the contact.
func (f ThreadFilter) where() (where string, args []any, join bool, err error) {
	where = threadListed
	switch f.State {
	case "":
	case ThreadOpen, ThreadClosed:
		where, args = where+threadStateWhere, append(args, string(f.State))
	default:
		return "", nil, false, fmt.Errorf("%w: state must be open or closed", ErrInvalidFilter)
	}
	term := strings.TrimSpace(f.Search)
	if len(term) > maxSearchLen {
		return "", nil, false, fmt.Errorf("%w: a search term is at most %d bytes", ErrInvalidFilter, maxSearchLen)
	}
	if n, err := strconv.ParseInt(term, 10, 64); err == nil {
		where, args = where+threadIDSearch, append(args, term, n)
	} else if term != "" {
		p := likePattern(strings.TrimPrefix(term, "@"))
		where, args, join = where+threadTextSearch, append(args, p, p, p), true
	}
	for _, b := range []struct{ key, cond string }{{f.Before, threadBeforeWhere}, {f.After, threadAfterWhere}} {
		if b.key == "" {
			continue
		}
		at, id, ok := threadKey(b.key)
		if !ok {
			return "", nil, false, fmt.Errorf("%w: a thread key is <last message time>_<id>, not %q", ErrInvalidFilter, b.key)
		}
		where, args = where+b.cond, append(args, at, id)
	}
	return where, args, join, nil
}

// listSQL is ListThreads' query of f.
func (f ThreadFilter) listSQL() (string, []any, error) {
	where, args, _, err := f.where()
	if err != nil {
		return "", nil, err
	}
	order := ` order by t.last_message_at desc, t.id desc limit ?`
	if f.After != "" && f.Before == "" {
		order = ` order by t.last_message_at, t.id limit ?`
	}
	return `select ` + threadColumns + threadFrom + ` where ` + where + order, append(args, threadLimit(f.Limit)), nil
}

// countSQL is CountThreads' query of f: bounded by upTo when above zero.
func (f ThreadFilter) countSQL(upTo int64) (string, []any, error) {
	where, args, join, err := f.where()
	if err != nil {
		return "", nil, err
	}
	from := ` from omni_threads t`
	if join {
		from = threadFrom
	}
	if upTo > 0 {
		return `select count(*) from (select 1` + from + ` where ` + where + ` limit ?) as matching`, append(args, upTo+1), nil
	}
	return `select count(*)` + from + ` where ` + where, args, nil
}

// CountThreads counts the threads of f (its window bounds included, so the
// threads before a window's first one are its position). With upTo above
// zero it stops past upTo and returns upTo+1 ("more than upTo"); with zero
// it counts them all — from the state's index alone, unless f searches.
func (a *Admin) CountThreads(ctx context.Context, f ThreadFilter, upTo int64) (int64, error) {
	q, args, err := f.countSQL(upTo)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := a.db.Read.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count threads: %w", err)
	}
	return n, nil
}
