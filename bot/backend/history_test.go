package backend

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"switchyard/bot/contract"
	"switchyard/history"
	"switchyard/store/storetest"
)

func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newBackendEnv(t)
	o := e.b.Outbox()
	u, err := e.b.CreateUser(ctx, NewUser{Link: "hist-ann", Name: "Ann Secret", TelegramID: "7001"})
	if err != nil {
		t.Fatal(err)
	}
	wallet, err := o.Emit(ctx, NewEvent{Type: contract.EventWalletConnected, Target: Target{TelegramID: "7001"}, Payload: json.RawMessage(`{"addr":"EQ1"}`)})
	if err != nil {
		t.Fatal(err)
	}
	registered, err := o.Emit(ctx, NewEvent{Type: contract.EventRegistered, Target: Target{MagnetUID: u.UID}, Payload: json.RawMessage(`{"leaderUid":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := o.Emit(ctx, NewEvent{Type: contract.EventWalletConnected, Target: Target{TelegramID: "7002"}, Payload: json.RawMessage(`{"addr":"EQ2"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Ack(ctx, contract.AckRequest{ProcessedIDs: []contract.EventID{wallet}, RetryIDs: []contract.EventID{registered}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.b.AddNotification(ctx, contract.NewNotification{UID: u.UID, Kind: "new_partner", Text: "Ann Secret's partner", DedupKey: "k1"}); err != nil {
		t.Fatal(err)
	}
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	if err := e.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `update bot_event_outbox set traceparent = ? where id = ?`,
			"00-"+traceID+"-00f067aa0ba902b7-01", int64(other))
		return err
	}); err != nil {
		t.Fatal(err)
	}

	kinds := func(f history.Found) []string {
		var out []string
		for _, it := range f.Items {
			out = append(out, it.Kind+" "+it.IDs[0].Value)
		}
		slices.Sort(out)
		return out
	}
	ev := func(id contract.EventID) string { return strconv.FormatInt(int64(id), 10) }

	t.Run("a Telegram id finds the events naming it and its account's, with acks, failures and fallbacks", func(t *testing.T) {
		f, err := o.History(ctx, "7001", 50)
		if err != nil {
			t.Fatal(err)
		}
		got := kinds(f)
		want := []string{"acked " + ev(wallet), "attempt failed " + ev(registered), "fallback notification " + got[2][len("fallback notification "):],
			"outbox event emitted " + ev(registered), "outbox event emitted " + ev(wallet)}
		slices.Sort(want)
		if !slices.Equal(got, want) || f.Cut {
			t.Fatalf("items %q (cut %v), want %q", got, f.Cut, want)
		}
		for _, it := range f.Items {
			if strings.Contains(it.Summary, "Ann") || it.Flow != history.FlowBot || it.At.IsZero() {
				t.Errorf("item %+v", it)
			}
			if strings.HasPrefix(it.Kind, "outbox") && it.Link != "/admin/bot/events/"+it.IDs[0].Value {
				t.Errorf("item %+v links to %q", it, it.Link)
			}
		}
	})

	t.Run("a magnet uid finds the same account's events", func(t *testing.T) {
		f, err := o.History(ctx, strconv.FormatInt(int64(u.UID), 10), 50)
		if err != nil {
			t.Fatal(err)
		}
		if got := kinds(f); len(got) != 5 {
			t.Fatalf("items %q", got)
		}
	})

	t.Run("an event id finds that event", func(t *testing.T) {
		f, err := o.History(ctx, ev(other), 50)
		if err != nil {
			t.Fatal(err)
		}
		if got := kinds(f); !slices.Contains(got, "outbox event emitted "+ev(other)) {
			t.Fatalf("items %q", got)
		}
	})

	t.Run("a trace id finds the events its emit wrote, with the trace", func(t *testing.T) {
		f, err := o.History(ctx, traceID, 50)
		if err != nil {
			t.Fatal(err)
		}
		if got := kinds(f); !slices.Equal(got, []string{"outbox event emitted " + ev(other)}) || f.Items[0].TraceID != traceID {
			t.Fatalf("items %q, %+v", got, f.Items)
		}
	})

	t.Run("an unknown, a malformed or an empty term finds nothing", func(t *testing.T) {
		for _, term := range []string{"", "999999", "4bf92f3577b34da6a3ce929d0e0e473", "hello", "-5"} {
			if f, err := o.History(ctx, term, 50); err != nil || len(f.Items) != 0 {
				t.Errorf("%q: %+v, %v", term, f, err)
			}
		}
	})

	t.Run("a limit cuts the answer and says so", func(t *testing.T) {
		f, err := o.History(ctx, "7001", 1)
		if err != nil || !f.Cut {
			t.Fatalf("%+v, %v", f, err)
		}
	})

	t.Run("the reads search indexes", func(t *testing.T) {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{historyEventsSQL, []any{"1", "2", 1, 2, 3, 10}},
			{historyTraceSQL, []any{"00-a-", "00-a.", 10}},
			{historyUsersSQL, []any{1, "1"}},
			{historyNotificationsSQL, []any{1, 10}},
		} {
			if plan := storetest.SQLitePlan(t, e.db, q.sql, q.args...); strings.Contains(plan, "SCAN ") {
				t.Errorf("%s: plan %s", q.sql, plan)
			}
		}
	})
}
