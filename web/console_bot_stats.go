package web

import (
	"context"
	"fmt"
	"time"

	"switchyard/store"
)

// The bot's numbers the console still reads from the bot's tables itself,
// until bot.Outbox and bot.Onboarding offer them: the outbox's unfinished
// events by state, the events handled per minute and the funnel by stage.
// They move to bot/ with the bot's split; nothing else in web reads a table.

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

// handledEvents are the outbox's events by when they were acknowledged
// (processed_at is indexed and does not grow with the id).
var handledEvents = store.Stamped{Table: "bot_event_outbox", Column: "processed_at"}

// outboxHandledBetween is the outbox's events handled in [from, to).
func (s *Server) outboxHandledBetween(ctx context.Context, from, to time.Time) (int64, error) {
	return handledEvents.CountBetween(ctx, s.opts.DB, from, to)
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
