package referral

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"switchyard/store"
)

// The console's lists of links and replicas in windows: newest first by a
// key of (time, id), so a window costs the same at any depth (migration
// 00025 indexes each key), counted, searched; and links deleted in bulk.

// ErrInvalidFilter is a list filter no list can have.
const ErrInvalidFilter = Error("invalid list filter")

// maxSearchLen bounds a search term.
const maxSearchLen = 200

// Key is the link's place in the list's order: its creation and its id.
func (l Link) Key() string { return windowKey(l.CreatedAt, string(l.ID)) }

// Key is the replica's place in the list's order: its last change and its
// id.
func (r Replica) Key() string { return windowKey(r.UpdatedAt, string(r.ID)) }

func windowKey(at time.Time, id string) string {
	return at.UTC().Format(store.TimeLayout) + "_" + id
}

// parseKey reads a Key.
func parseKey(k string) (store.Timestamp, string, error) {
	atText, id, found := strings.Cut(k, "_")
	at, err := time.Parse(store.TimeLayout, atText)
	if !found || err != nil || id == "" || len(id) > 64 {
		return store.Timestamp{}, "", fmt.Errorf("%w: a window key is <time>_<id>, not %q", ErrInvalidFilter, k)
	}
	return store.TS(at), id, nil
}

// likePattern is a LIKE pattern that finds term anywhere, its own % and _
// taken literally.
func likePattern(term string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(strings.ToLower(term)) + "%"
}

// keyset adds a window's bounds on (col, id) to where, and says the order
// of the rows: newest first, or nearest After first.
func keyset(where string, args []any, col, before, after string) (string, []any, string, error) {
	order := ` order by ` + col + ` desc, id desc`
	if before != "" {
		at, id, err := parseKey(before)
		if err != nil {
			return "", nil, "", err
		}
		where, args = where+` and (`+col+`, id) < (?, ?)`, append(args, at, id)
	}
	if after != "" {
		at, id, err := parseKey(after)
		if err != nil {
			return "", nil, "", err
		}
		where, args = where+` and (`+col+`, id) > (?, ?)`, append(args, at, id)
		if before == "" {
			order = ` order by ` + col + `, id`
		}
	}
	return where, args, order, nil
}

func searchTerm(s string) (string, error) {
	term := strings.TrimSpace(s)
	if len(term) > maxSearchLen {
		return "", fmt.Errorf("%w: a search term is at most %d bytes", ErrInvalidFilter, maxSearchLen)
	}
	return term, nil
}

// SearchReadsRows reports whether a count of f reads the rows themselves (a
// search by slug), and should be bounded.
func (f LinkFilter) SearchReadsRows() bool { return strings.TrimSpace(f.Search) != "" }

// matching is the condition of f's filters and search, without its window.
// A term is looked for in the slug (case-insensitively) and taken as an
// owner's user id.
func (f LinkFilter) matching() (string, []any, error) {
	where, args := `1 = 1`, []any(nil)
	if !f.IncludeDeleted {
		where += ` and deleted_at is null`
	}
	if f.OwnerUserID != "" {
		where, args = where+` and owner_user_id = ?`, append(args, string(f.OwnerUserID))
	}
	term, err := searchTerm(f.Search)
	if err != nil {
		return "", nil, err
	}
	if term != "" {
		where, args = where+` and (lower(url) like ? escape '\' or owner_user_id = ?)`, append(args, likePattern(term), strings.ToLower(term))
	}
	return where, args, nil
}

func (f LinkFilter) listSQL() (string, []any, error) {
	where, args, err := f.matching()
	if err != nil {
		return "", nil, err
	}
	where, args, order, err := keyset(where, args, "created_at", f.Before, f.After)
	if err != nil {
		return "", nil, err
	}
	return `select ` + linkColumns + ` from referral_links where ` + where + order + ` limit ?`, append(args, limit(f.Limit)), nil
}

// CountLinks counts the links of f (its window bounds included); with upTo
// above zero it stops past upTo and returns upTo+1.
func (s *Service) CountLinks(ctx context.Context, f LinkFilter, upTo int64) (int64, error) {
	where, args, err := f.matching()
	if err != nil {
		return 0, err
	}
	if where, args, _, err = keyset(where, args, "created_at", f.Before, f.After); err != nil {
		return 0, err
	}
	return countRows(ctx, s.db.Read, "referral_links", where, args, upTo)
}

// countRows counts the rows of table matching where, up to upTo+1 when it
// is above zero.
func countRows(ctx context.Context, db *sql.DB, table, where string, args []any, upTo int64) (int64, error) {
	q := `select count(*) from ` + table + ` where ` + where
	if upTo > 0 {
		q, args = `select count(*) from (select 1 from `+table+` where `+where+` limit ?) as matching`, append(args, upTo+1)
	}
	var n int64
	if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s: %w", table, err)
	}
	return n, nil
}

// DeleteLinks soft-deletes links, like DeleteLink: those of ids, or, when
// ids is nil, every live link matching f (its window ignored). It returns
// how many it deleted; links deleted already or unknown are passed over.
// One transaction.
func (s *Service) DeleteLinks(ctx context.Context, f LinkFilter, ids []LinkID) (int64, error) {
	if ids != nil && len(ids) == 0 {
		return 0, nil
	}
	if len(ids) > 1000 {
		return 0, fmt.Errorf("%w: at most 1000 links at once", ErrInvalidFilter)
	}
	f.IncludeDeleted = false
	where, args, err := f.matching()
	if err != nil {
		return 0, err
	}
	if ids != nil {
		where += ` and id in (?` + strings.Repeat(`, ?`, len(ids)-1) + `)`
		for _, id := range ids {
			args = append(args, string(id))
		}
	}
	var n int64
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		r, err := tx.ExecContext(ctx, `update referral_links set deleted_at = ? where `+where,
			append([]any{store.TS(s.db.Now())}, args...)...)
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete links: %w", err)
	}
	return n, nil
}

// SearchReadsRows reports whether a count of f reads the rows themselves (a
// search by name or phone), and should be bounded.
func (f ReplicaFilter) SearchReadsRows() bool {
	term := strings.TrimSpace(f.Search)
	return term != "" && !isUUID(term)
}

// isUUID reports whether s looks like a user id.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		default:
			return false
		}
	}
	return true
}

// matching is the condition of f's search: a user id finds its replica
// (the primary key); digits, the phone numbers that end with them (the
// list shows phones masked, with their last four digits); other text, the
// names that hold it.
func (f ReplicaFilter) matching() (string, []any, error) {
	term, err := searchTerm(f.Search)
	if err != nil {
		return "", nil, err
	}
	_, numErr := strconv.ParseUint(strings.TrimPrefix(term, "+"), 10, 64)
	switch {
	case term == "":
		return `1 = 1`, nil, nil
	case isUUID(term):
		return `id = ?`, []any{strings.ToLower(term)}, nil
	case numErr == nil:
		r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
		return `phone_number like ? escape '\'`, []any{"%" + r.Replace(strings.TrimPrefix(term, "+"))}, nil
	}
	p := likePattern(term)
	return `(lower(first_name) like ? escape '\' or lower(last_name) like ? escape '\' or lower(first_name || ' ' || last_name) like ? escape '\')`,
		[]any{p, p, p}, nil
}

func (f ReplicaFilter) listSQL() (string, []any, error) {
	where, args, err := f.matching()
	if err != nil {
		return "", nil, err
	}
	where, args, order, err := keyset(where, args, "updated_at", f.Before, f.After)
	if err != nil {
		return "", nil, err
	}
	return `select ` + replicaColumns + ` from referral_users where ` + where + order + ` limit ?`, append(args, limit(f.Limit)), nil
}

// CountReplicas counts the replicas of f (its window bounds included); with
// upTo above zero it stops past upTo and returns upTo+1.
func (s *Service) CountReplicas(ctx context.Context, f ReplicaFilter, upTo int64) (int64, error) {
	where, args, err := f.matching()
	if err != nil {
		return 0, err
	}
	if where, args, _, err = keyset(where, args, "updated_at", f.Before, f.After); err != nil {
		return 0, err
	}
	return countRows(ctx, s.db.Read, "referral_users", where, args, upTo)
}
