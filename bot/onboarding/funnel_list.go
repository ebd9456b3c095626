package onboarding

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"switchyard/bot/contract"
	"switchyard/store"
)

// The console's list of funnel users in windows: changed last first by the
// key (updated_at, telegram_id), so a window costs the same at any depth
// (migration 00025 indexes the key, and under the stage).

// Key is the funnel's place in the list's order.
func (f Funnel) Key() string {
	return f.UpdatedAt.UTC().Format(store.TimeLayout) + "_" + string(f.TelegramID)
}

// maxSearchLen bounds a search term.
const maxSearchLen = 200

// where is f's condition: its stage, its search and its window.
func (f FunnelFilter) where() (string, []any, string, error) {
	where, args := `1 = 1`, []any(nil)
	if f.Stage > 0 {
		where, args = where+` and stage = ?`, append(args, int(f.Stage))
	}
	if f.LeftLeader {
		where += ` and left_leader_at is not null`
	}
	term := strings.TrimSpace(f.Search)
	if len(term) > maxSearchLen {
		return "", nil, "", contract.Invalidf("a search term is at most %d bytes", maxSearchLen)
	}
	if n, err := strconv.ParseInt(term, 10, 64); err == nil {
		where, args = where+` and (telegram_id = ? or uid = ?)`, append(args, term, n)
	} else if term != "" {
		where += ` and 1 = 0` // a user is found by a number only
	}
	order := ` order by updated_at desc, telegram_id desc`
	for _, b := range []struct{ key, cond string }{{f.Before, ` and (updated_at, telegram_id) < (?, ?)`}, {f.After, ` and (updated_at, telegram_id) > (?, ?)`}} {
		if b.key == "" {
			continue
		}
		atText, tg, found := strings.Cut(b.key, "_")
		at, err := time.Parse(store.TimeLayout, atText)
		if !found || err != nil || tg == "" {
			return "", nil, "", contract.Invalidf("a funnel key is <time>_<telegram id>, not %q", b.key)
		}
		where, args = where+b.cond, append(args, store.TS(at), tg)
	}
	if f.After != "" && f.Before == "" {
		order = ` order by updated_at, telegram_id`
	}
	return where, args, order, nil
}

func (f FunnelFilter) listSQL() (string, []any, error) {
	where, args, order, err := f.where()
	if err != nil {
		return "", nil, err
	}
	return `select ` + funnelColumns + ` from bot_funnel where ` + where + order + ` limit ?`,
		append(args, contract.ClampPendingLimit(f.Limit)), nil
}

// CountFunnels counts the funnels of f (its window bounds included), from
// the stage's index: every search is by a key (a Telegram id or a uid), so
// none reads the whole table.
func (o *Bot) CountFunnels(ctx context.Context, f FunnelFilter) (int64, error) {
	where, args, _, err := f.where()
	if err != nil {
		return 0, err
	}
	var n int64
	if err := o.db.Read.QueryRowContext(ctx, `select count(*) from bot_funnel where `+where, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count funnels: %w", err)
	}
	return n, nil
}
