package web

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"switchyard/referral"
	"switchyard/store"
)

// The console's own numbers: read-only aggregates over the domain tables on
// the read pool, which the domain packages do not expose (counts by state,
// per-minute throughput derived from the tables' timestamps, the funnel by
// stage, the last message of each thread). They only count and never decide
// anything; the domain's rules stay in the domain packages. Timestamps are
// store.TimeLayout text, so the first 16 characters are the minute and text
// order is time order.

// outboxCounts are the bot outbox's unfinished events by state.
type outboxCounts struct {
	Pending, Retrying, Dead int64
}

const outboxCountsSQL = `
	select
		coalesce(sum(case when dead_lettered_at is null and attempts = 0 then 1 else 0 end), 0),
		coalesce(sum(case when dead_lettered_at is null and attempts > 0 then 1 else 0 end), 0),
		coalesce(sum(case when dead_lettered_at is not null then 1 else 0 end), 0)
	from bot_event_outbox where processed_at is null`

func (s *Server) outboxCounts(ctx context.Context) (outboxCounts, error) {
	var c outboxCounts
	err := s.opts.DB.Read.QueryRowContext(ctx, outboxCountsSQL).Scan(&c.Pending, &c.Retrying, &c.Dead)
	if err != nil {
		return c, fmt.Errorf("count outbox events: %w", err)
	}
	return c, nil
}

// throughput is a table whose rows the console counts per minute by a
// timestamp column. When the column has no index but grows with the rowid
// (rows stamped with the store's clock as they are inserted by the one
// writer), byID finds minute boundaries by binary search over the ids, so a
// count reads only the rows of its minutes, never the whole table.
type throughput struct {
	table, column string
	where         string // an extra condition; constant, never input
	byID          bool
}

// The console's throughput series.
var (
	outboxHandled    = throughput{table: "bot_event_outbox", column: "processed_at"}
	identityConsumed = throughput{table: "referral_processed_messages", column: "processed_at", byID: true}
	// A bond commits with its message's mark, whose outcome is R1.
	bondsCreated = throughput{table: "referral_processed_messages", column: "processed_at",
		where: "outcome = '" + string(referral.OutcomeR1) + "'", byID: true}
	chatInbound  = throughput{table: "omni_messages", column: "created_at", where: "direction = 'inbound'", byID: true}
	chatOutbound = throughput{table: "omni_messages", column: "created_at", where: "direction = 'outbound'", byID: true}
)

// finalAfter is how long after a minute ends its count is taken as final
// (a transaction stamped inside the minute may commit a little later).
const finalAfter = 5 * time.Second

// minuteCache keeps the counts of finished minutes, so a poll counts only
// the current minute's rows.
type minuteCache struct {
	mu     sync.Mutex
	counts map[throughput]map[string]int64
}

func (c *minuteCache) get(tp throughput, minute string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.counts[tp][minute]
	return n, ok
}

func (c *minuteCache) put(tp throughput, minute string, n int64, oldest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[throughput]map[string]int64)
	}
	m := c.counts[tp]
	if m == nil {
		m = make(map[string]int64)
		c.counts[tp] = m
	}
	m[minute] = n
	for k := range m {
		if k < oldest {
			delete(m, k)
		}
	}
}

// perMinute counts tp's rows in each of the chart's minutes up to now's.
func (s *Server) perMinute(ctx context.Context, tp throughput, now time.Time) (map[string]int64, error) {
	start := chartStart(now)
	out := make(map[string]int64, chartMinutes)
	for i := range chartMinutes {
		from := start.Add(time.Duration(i) * time.Minute)
		key := minuteKey(from)
		if n, ok := s.minutes.get(tp, key); ok {
			out[key] = n
			continue
		}
		n, err := s.countBetween(ctx, tp, from, from.Add(time.Minute))
		if err != nil {
			return nil, err
		}
		out[key] = n
		if now.Sub(from) >= time.Minute+finalAfter {
			s.minutes.put(tp, key, n, minuteKey(start))
		}
	}
	return out, nil
}

// since counts tp's rows stamped at or after t.
func (s *Server) since(ctx context.Context, tp throughput, t time.Time) (int64, error) {
	return s.countBetween(ctx, tp, t, time.Time{})
}

func stamp(t time.Time) string { return t.UTC().Format(store.TimeLayout) }

// countBetween counts tp's rows stamped in [from, to); a zero to has no end.
func (s *Server) countBetween(ctx context.Context, tp throughput, from, to time.Time) (int64, error) {
	var (
		q    string
		args []any
	)
	if tp.byID {
		lo, err := s.firstIDAt(ctx, tp, from)
		if err != nil {
			return 0, err
		}
		q, args = `select count(*) from `+tp.table+` where id >= ?`, []any{lo}
		if !to.IsZero() {
			hi, err := s.firstIDAt(ctx, tp, to)
			if err != nil {
				return 0, err
			}
			if hi <= lo {
				return 0, nil
			}
			q, args = q+` and id < ?`, append(args, hi)
		}
	} else {
		q, args = `select count(*) from `+tp.table+` where `+tp.column+` >= ?`, []any{stamp(from)}
		if !to.IsZero() {
			q, args = q+` and `+tp.column+` < ?`, append(args, stamp(to))
		}
	}
	if tp.where != "" {
		q += ` and ` + tp.where
	}
	var n int64
	if err := s.opts.DB.Read.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s.%s: %w", tp.table, tp.column, err)
	}
	return n, nil
}

// firstIDAt is the smallest id from which tp's rows are stamped at or after
// t (one past the last id when none is): a binary search over the ids, one
// indexed lookup per step.
func (s *Server) firstIDAt(ctx context.Context, tp throughput, t time.Time) (int64, error) {
	// Two queries: SQLite answers min(id) or max(id) alone from the b-tree's
	// edge, but both in one select scan the table.
	var lo, hi sql.NullInt64
	if err := s.opts.DB.Read.QueryRowContext(ctx, `select min(id) from `+tp.table).Scan(&lo); err != nil {
		return 0, fmt.Errorf("id range of %s: %w", tp.table, err)
	}
	if err := s.opts.DB.Read.QueryRowContext(ctx, `select max(id) from `+tp.table).Scan(&hi); err != nil {
		return 0, fmt.Errorf("id range of %s: %w", tp.table, err)
	}
	if !lo.Valid {
		return 1, nil
	}
	want := stamp(t)
	l, h := lo.Int64, hi.Int64+1
	for l < h {
		mid := l + (h-l)/2
		var (
			id int64
			at string
		)
		err := s.opts.DB.Read.QueryRowContext(ctx,
			`select id, `+tp.column+` from `+tp.table+` where id >= ? order by id limit 1`, mid).Scan(&id, &at)
		if errors.Is(err, sql.ErrNoRows) {
			h = mid
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("search %s: %w", tp.table, err)
		}
		if at >= want {
			h = mid // no row between mid and id: the first one at or after t is at most mid
		} else {
			l = id + 1
		}
	}
	return l, nil
}

func (s *Server) scalar(ctx context.Context, q string, args ...any) (int64, error) {
	var n int64
	if err := s.opts.DB.Read.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("console count: %w", err)
	}
	return n, nil
}

// chatCounts are the chat platform's headline numbers.
type chatCounts struct {
	Open, Unread, Failed int64
}

func (s *Server) chatCounts(ctx context.Context) (chatCounts, error) {
	var c chatCounts
	err := s.opts.DB.Read.QueryRowContext(ctx,
		`select count(*), coalesce(sum(unread), 0) from omni_threads where state = 'open'`).Scan(&c.Open, &c.Unread)
	if err != nil {
		return c, fmt.Errorf("count threads: %w", err)
	}
	c.Failed, err = s.scalar(ctx, `select count(*) from omni_messages where status = 'failed'`)
	return c, err
}

// funnelStages counts the onboarding funnel's users by stage.
func (s *Server) funnelStages(ctx context.Context) (map[int]int64, error) {
	rows, err := s.opts.DB.Read.QueryContext(ctx, `select stage, count(*) from bot_funnel group by stage`)
	if err != nil {
		return nil, fmt.Errorf("funnel by stage: %w", err)
	}
	defer rows.Close()
	out := make(map[int]int64)
	for rows.Next() {
		var (
			stage int
			n     int64
		)
		if err := rows.Scan(&stage, &n); err != nil {
			return nil, err
		}
		out[stage] = n
	}
	return out, rows.Err()
}

// threadDigest is what the inbox shows of a thread beyond omni.Thread: its
// last message and how many of its deliveries failed.
type threadDigest struct {
	LastText      string
	LastDirection string
	LastKind      string
	LastStatus    string
	Failed        int64
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func (s *Server) threadDigests(ctx context.Context, ids []int64) (map[int64]threadDigest, error) {
	out := make(map[int64]threadDigest, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	in := placeholders(len(ids))
	rows, err := s.opts.DB.Read.QueryContext(ctx, `
		select thread_id, direction, kind, text, status from omni_messages
		where id in (select max(id) from omni_messages where thread_id in (`+in+`) group by thread_id)`, args...)
	if err != nil {
		return nil, fmt.Errorf("last messages: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id int64
			d  threadDigest
		)
		if err := rows.Scan(&id, &d.LastDirection, &d.LastKind, &d.LastText, &d.LastStatus); err != nil {
			return nil, err
		}
		out[id] = d
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	frows, err := s.opts.DB.Read.QueryContext(ctx, `
		select thread_id, count(*) from omni_messages
		where status = 'failed' and thread_id in (`+in+`) group by thread_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("failed deliveries: %w", err)
	}
	defer frows.Close()
	for frows.Next() {
		var id, n int64
		if err := frows.Scan(&id, &n); err != nil {
			return nil, err
		}
		d := out[id]
		d.Failed = n
		out[id] = d
	}
	return out, frows.Err()
}

// recentReplicaIDs lists the ids of the replicas changed last.
func (s *Server) recentReplicaIDs(ctx context.Context, limit int) ([]string, error) {
	rows, err := s.opts.DB.Read.QueryContext(ctx,
		`select id from referral_users order by updated_at desc, id limit ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("recent replicas: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
