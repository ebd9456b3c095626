package queue

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/history"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	admin := NewAdmin(AdminOpts{DB: db})
	waiting := New(NewOpts{DB: db, Name: "hist.waiting"})
	failing := New(NewOpts{DB: db, Name: "hist.failing"})
	handled := New(NewOpts{DB: db, Name: "hist.handled"})
	send := func(q *Queue, key string) ID {
		t.Helper()
		res, err := q.Send(ctx, Message{Body: []byte(`{"phone":"+79991234567"}`), Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	live := send(waiting, "telegram:7:1")
	dead := send(failing, "event:5:dm")
	gone := send(handled, "event:6:dm")
	w1 := failing.Start(ctx, WorkerOpts{Handler: func(context.Context, Message) error {
		return Permanent(errors.New("Forbidden: bot was blocked by +79991234567"))
	}})
	w2 := handled.Start(ctx, WorkerOpts{Handler: func(context.Context, Message) error { return nil }})
	testwait.Until(t, 30*time.Second, "one message dead, one handled", func() bool {
		d, err := admin.ListDead(ctx, DeadFilter{Queue: "hist.failing"})
		if err != nil || len(d) != 1 {
			return false
		}
		f, err := admin.History(ctx, string(gone), 10)
		return err == nil && len(f.Items) == 0
	})
	for _, w := range []*Worker{w1, w2} {
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	kinds := func(term string) []string {
		t.Helper()
		f, err := admin.History(ctx, term, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range f.Items {
			if strings.Contains(it.Summary, "1234567") || it.Flow != history.FlowQueues || it.At.IsZero() ||
				!strings.HasPrefix(it.Link, "/admin/queues/hist.") {
				t.Errorf("item %+v", it)
			}
			out = append(out, it.Kind+" "+it.IDs[0].Value)
		}
		return out
	}

	t.Run("an idempotency key finds the message it sent and where it stands", func(t *testing.T) {
		for _, tt := range []struct {
			key  string
			want []string
		}{
			{"telegram:7:1", []string{"message sent " + string(live), "queued message " + string(live)}},
			{"event:5:dm", []string{"message sent " + string(dead), "dead letter " + string(dead)}},
			{"event:6:dm", []string{"message sent " + string(gone), "message gone " + string(gone)}},
		} {
			if got := kinds(tt.key); !slices.Equal(got, tt.want) {
				t.Errorf("%s: %q, want %q", tt.key, got, tt.want)
			}
		}
	})

	t.Run("a message carries the trace its row recorded", func(t *testing.T) {
		const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `update goqite set traceparent = ? where id = ?`, "00-"+traceID+"-00f067aa0ba902b7-01", string(live))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		f, err := admin.History(ctx, string(live), 10)
		if err != nil || len(f.Items) != 1 || f.Items[0].TraceID != traceID {
			t.Fatalf("%+v, %v", f, err)
		}
	})

	t.Run("a message id finds the message, waiting or dead", func(t *testing.T) {
		if got := kinds(string(live)); !slices.Equal(got, []string{"queued message " + string(live)}) {
			t.Errorf("live: %q", got)
		}
		if got := kinds(string(dead)); !slices.Equal(got, []string{"dead letter " + string(dead)}) {
			t.Errorf("dead: %q", got)
		}
	})

	t.Run("an unknown or an empty term finds nothing", func(t *testing.T) {
		for _, term := range []string{"", "nothing", string(gone)} {
			if got := kinds(term); len(got) != 0 {
				t.Errorf("%q: %q", term, got)
			}
		}
	})

	t.Run("the reads search indexes", func(t *testing.T) {
		for _, q := range []string{historyKeysSQL, historyLiveSQL, historyDeadSQL} {
			args := []any{"k", 10}
			if q != historyKeysSQL {
				args = args[:1]
			}
			// The key's read walks the queue names (a CTE of a row a queue)
			// and seeks each: "SCAN queues" is that walk, not a table's scan.
			plan := storetest.SQLitePlan(t, db, q, args...)
			if strings.Contains(strings.ReplaceAll(plan, "SCAN queues", ""), "SCAN ") {
				t.Errorf("%s: plan %s", q, plan)
			}
		}
	})
}
