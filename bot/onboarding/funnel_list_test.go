package onboarding

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

// The funnel's users in windows, changed last first, at depth and by
// stage, counted and found by Telegram id or uid.
func TestFunnelWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newOnbEnv(t)
	b := e.newBot(e.db)
	base := e.db.Now()
	err := e.db.Tx(ctx, func(tx *sql.Tx) error {
		for i := range 130 {
			at := store.TS(base.Add(time.Duration(i/2) * time.Second)) // two users share each time
			if _, err := tx.Exec(`insert into bot_funnel (telegram_id, uid, stage, created_at, updated_at) values (?, ?, ?, ?, ?)`,
				fmt.Sprint(8000+i), 100+i, 1+i%3, at, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tgs := func(list []Funnel) []string {
		out := make([]string, len(list))
		for i, f := range list {
			out[i] = string(f.TelegramID)
		}
		return out
	}

	t.Run("older windows walk every user changed last first, and a newer one comes back", func(t *testing.T) {
		var walked []Funnel
		f := FunnelFilter{Limit: 50}
		for {
			page, err := b.ListFunnels(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			walked = append(walked, page...)
			f.Before = page[len(page)-1].Key()
		}
		if len(walked) != 130 || walked[0].TelegramID != "8129" || walked[129].TelegramID != "8000" {
			t.Fatalf("walked %d users, %s first and %s last", len(walked), walked[0].TelegramID, walked[len(walked)-1].TelegramID)
		}
		page, err := b.ListFunnels(ctx, FunnelFilter{After: walked[100].Key(), Limit: 50})
		want := tgs(walked[50:100])
		slices.Reverse(want)
		if err != nil || !slices.Equal(tgs(page), want) {
			t.Fatalf("newer than the 101st: %v, %v", tgs(page), err)
		}
		if n, err := b.CountFunnels(ctx, FunnelFilter{After: walked[100].Key()}); err != nil || n != 100 {
			t.Fatalf("before the 101st: %d, %v", n, err)
		}
	})
	t.Run("a stage's users are counted and found by Telegram id or uid", func(t *testing.T) {
		if n, err := b.CountFunnels(ctx, FunnelFilter{Stage: 2}); err != nil || n != 43 {
			t.Fatalf("stage 2: %d, %v", n, err)
		}
		for term, want := range map[string][]string{"8007": {"8007"}, "107": {"8007"}, "abc": {}} {
			page, err := b.ListFunnels(ctx, FunnelFilter{Search: term})
			if err != nil || !slices.Equal(tgs(page), want) {
				t.Fatalf("search %q: %v, %v", term, tgs(page), err)
			}
		}
	})
	t.Run("each window walks an index in the list's order", func(t *testing.T) {
		if e.db.Postgres() {
			t.Skip("SQLite's plans")
		}
		for _, f := range []FunnelFilter{{}, {Stage: 3}, {Before: "2026-01-01T00:00:00.000000Z_5"}, {Stage: 3, After: "2026-01-01T00:00:00.000000Z_5"}} {
			q, args, err := f.listSQL()
			if err != nil {
				t.Fatal(err)
			}
			plan := storetest.SQLitePlan(t, e.db, q, args...)
			if strings.Contains(plan, "TEMP B-TREE") || !strings.Contains(plan, "bot_funnel_") {
				t.Errorf("%+v sorts or scans:\n%s", f, plan)
			}
			t.Logf("%+v:\n%s", f, plan)
		}
	})
}
