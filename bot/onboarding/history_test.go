package onboarding

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"switchyard/history"
	"switchyard/store"
	"switchyard/store/storetest"
)

func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newOnbEnv(t)
	b := e.newBot(e.db)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	tp := "00-" + traceID + "-00f067aa0ba902b7-01"
	now := store.TS(e.db.Now())
	err := e.db.Tx(ctx, func(tx *sql.Tx) error {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`insert into bot_funnel (telegram_id, uid, stage, created_at, updated_at) values ('7001', 42, 3, ?, ?)`, []any{now, now}},
			{`insert into bot_funnel_history (telegram_id, cause, change, old_value, new_value, at) values
				('7001', 'update:9:1', 'stage', null, 'started', ?), ('7001', 'event:5', 'stage', 'started', 'wallet_connected', ?),
				('7002', 'update:9:2', 'stage', null, 'started', ?)`, []any{now, now, now}},
			{`insert into bot_updates (bot_id, update_id, chat_id, kind, payload, status, next_attempt_at, received_at, traceparent)
				values (9, 1, '7001', 'message', '{"text":"/start Ann"}', 'done', ?, ?, ?), (9, 2, '7002', 'message', '{}', 'done', ?, ?, '')`,
				[]any{now, now, tp, now, now}},
			{`insert into bot_processed_events (outbox_event_id, event_type, user_key, outcome, emitted_at, processed_at)
				values (5, 'wallet_connected', 'tg:7001', 'handled', ?, ?),
				(6, 'registered', 'uid:42', 'handled', ?, ?),
				(7, 'registered', 'uid:43', 'handled', ?, ?)`, []any{now, now, now, now, now, now}},
			{`insert into bot_deliveries (dm_key, method, chat_id, text, outcome, attempts, delivered_at, traceparent)
				values ('event:5:prompt', 'sendMessage', '7001', 'Hello Ann', 'sent', 0, ?, ?),
				('event:6:dm:fallback', 'sendMessage', '7001', 'Hello Ann', 'notified', 2, ?, '')`, []any{now, tp, now}},
		} {
			if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := b.recordDMs(ctx, tx, "event:8", []outgoingMessage{{Key: "dm", Method: methodSendMessage, ChatID: "7001", Params: outParams{Text: "Hi Ann"}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	kinds := func(term string) []string {
		t.Helper()
		f, err := b.History(ctx, term, 50)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range f.Items {
			if strings.Contains(it.Summary, "Ann") || it.Flow != history.FlowBot || it.At.IsZero() {
				t.Errorf("item %+v", it)
			}
			s := it.Kind + " " + it.IDs[0].Value
			if it.TraceID != "" {
				s += " traced " + it.TraceID
			}
			out = append(out, s)
		}
		slices.Sort(out)
		return out
	}

	t.Run("a Telegram id finds its funnel, updates, handled events and DMs, with their traces", func(t *testing.T) {
		want := []string{
			"DM queued event:8:dm", "DM sent event:5:prompt traced " + traceID, "fallback event:6:dm:fallback",
			"funnel stage 7001", "funnel stage 7001", "inbound update 1 traced " + traceID,
			"outbox event handled 5", "outbox event handled 6",
		}
		if got := kinds("7001"); !slices.Equal(got, want) {
			t.Fatalf("items\n%q\nwant\n%q", got, want)
		}
	})

	t.Run("a magnet uid finds its funnel's user", func(t *testing.T) {
		if got := kinds("42"); len(got) != 8 {
			t.Fatalf("items %q", got)
		}
	})

	t.Run("an event id finds its handling and the DMs it caused", func(t *testing.T) {
		if got := kinds("7"); !slices.Equal(got, []string{"outbox event handled 7"}) {
			t.Fatalf("items %q", got)
		}
		want := []string{"DM sent event:5:prompt traced " + traceID, "outbox event handled 5"}
		if got := kinds("5"); !slices.Equal(got, want) {
			t.Fatalf("items %q, want %q", got, want)
		}
	})

	t.Run("a trace id finds the update and the delivery that recorded it", func(t *testing.T) {
		want := []string{"DM sent event:5:prompt traced " + traceID, "inbound update 1 traced " + traceID}
		if got := kinds(traceID); !slices.Equal(got, want) {
			t.Fatalf("items %q, want %q", got, want)
		}
	})

	t.Run("an unknown, a malformed or an empty term finds nothing", func(t *testing.T) {
		for _, term := range []string{"", "999999", strings.ToUpper(traceID), "telegram:1:2"} {
			if got := kinds(term); len(got) != 0 {
				t.Errorf("%q: %q", term, got)
			}
		}
	})

	t.Run("the reads search indexes", func(t *testing.T) {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{historyFunnelByUIDSQL, []any{1}},
			{historyChangesSQL, []any{"1", 10}},
			{historyUpdatesSQL, []any{"1", 10}},
			{historyUpdatesTraceSQL, []any{"00-a-", "00-a.", 10}},
			{historyHandledSQL, []any{"a", "b", "c", "d", 1, 10}},
			{historyDeliveriesTraceSQL, []any{"00-a-", "00-a.", 10}},
			{historyDeliveriesCauseSQL, []any{"event:1:", "event:1;", 10}},
		} {
			if plan := storetest.SQLitePlan(t, e.db, q.sql, q.args...); strings.Contains(plan, "SCAN ") {
				t.Errorf("%s: plan %s", q.sql, plan)
			}
		}
	})
}
