package web

import (
	"context"
	"fmt"
	"strings"
	"time"

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

// perMinute counts the rows of a table whose timestamp column is at or after
// since, by minute. table and column are constants of this file, never input.
func (s *Server) perMinute(ctx context.Context, table, column string, since time.Time, where string) (map[string]int64, error) {
	q := `select substr(` + column + `, 1, 16), count(*) from ` + table + ` where ` + column + ` >= ?`
	if where != "" {
		q += ` and ` + where
	}
	q += ` group by substr(` + column + `, 1, 16)`
	rows, err := s.opts.DB.Read.QueryContext(ctx, q, store.TS(since))
	if err != nil {
		return nil, fmt.Errorf("per-minute %s.%s: %w", table, column, err)
	}
	defer rows.Close()
	out := make(map[string]int64)
	for rows.Next() {
		var (
			minute string
			n      int64
		)
		if err := rows.Scan(&minute, &n); err != nil {
			return nil, err
		}
		out[minute] = n
	}
	return out, rows.Err()
}

// since counts the rows of a table whose timestamp column is at or after t.
func (s *Server) since(ctx context.Context, table, column string, t time.Time, where string) (int64, error) {
	q := `select count(*) from ` + table + ` where ` + column + ` >= ?`
	if where != "" {
		q += ` and ` + where
	}
	var n int64
	if err := s.opts.DB.Read.QueryRowContext(ctx, q, store.TS(t)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count %s since: %w", table, err)
	}
	return n, nil
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
