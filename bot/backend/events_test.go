package backend

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/bot/contract"
	"switchyard/store"
	"switchyard/store/storetest"
)

// killEvent fails the event until it is dead-lettered, the clock moved past
// each backoff.
func killEvent(t *testing.T, o *Outbox, clock *store.ManualClock, id contract.EventID) {
	t.Helper()
	ctx := context.Background()
	for range contract.BOT_OUTBOX_MAX_ATTEMPTS {
		if _, err := o.Ack(ctx, contract.AckRequest{RetryIDs: []contract.EventID{id}}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(24 * time.Hour)
	}
	if e, err := o.GetEvent(ctx, id); err != nil || e.State != StateDead {
		t.Fatalf("event %d: %+v, %v; want dead", id, e, err)
	}
}

// emitRegistered emits n registered events (the type that is dead-lettered
// when its attempts run out).
func emitRegistered(t *testing.T, o *Outbox, n int, target Target) []contract.EventID {
	t.Helper()
	var ids []contract.EventID
	for range n {
		id, err := o.Emit(context.Background(), NewEvent{Type: contract.EventRegistered, Target: target, Payload: json.RawMessage(`{"leaderUid":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func recordIDs(list []EventRecord) []contract.EventID {
	ids := make([]contract.EventID, len(list))
	for i, e := range list {
		ids[i] = e.ID
	}
	return ids
}

// The console's event list in windows: older and newer by id, counted,
// searched, and its dead letters redriven in bulk.
func TestEventWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("windows walk the whole list at depth both ways and are counted", func(t *testing.T) {
		t.Parallel()
		o := NewOutbox(OutboxOpts{DB: storetest.New(t)})
		ids := emitMany(t, o, 230, Target{MagnetUID: 7})
		newestFirst := slices.Clone(ids)
		slices.Reverse(newestFirst)

		var walked []contract.EventID
		f := EventFilter{Limit: 50}
		for {
			page, err := o.ListEvents(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			walked = append(walked, recordIDs(page)...)
			f.BeforeID = page[len(page)-1].ID
		}
		if !slices.Equal(walked, newestFirst) {
			t.Fatalf("walked %d events older and older, want all %d newest first", len(walked), len(ids))
		}
		// Back from the oldest window: newer windows come nearest the key
		// first.
		page, err := o.ListEvents(ctx, EventFilter{Limit: 50, AfterID: ids[29]})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(recordIDs(page), ids[30:80]) {
			t.Fatalf("newer than %d: %v", ids[29], recordIDs(page))
		}
		if n, err := o.CountEvents(ctx, EventFilter{}, 0); err != nil || n != 230 {
			t.Fatalf("count %d, %v; want 230", n, err)
		}
		// The position of a window: the events newer than its first one.
		if n, err := o.CountEvents(ctx, EventFilter{AfterID: newestFirst[100]}, 0); err != nil || n != 100 {
			t.Fatalf("newer than the 101st: %d, %v; want 100", n, err)
		}
		if n, err := o.CountEvents(ctx, EventFilter{}, 99); err != nil || n != 100 {
			t.Fatalf("count bounded at 99: %d, %v; want 100 (more than 99)", n, err)
		}
		if n, err := o.CountEvents(ctx, EventFilter{}, 1000); err != nil || n != 230 {
			t.Fatalf("count bounded at 1000: %d, %v; want 230", n, err)
		}
	})

	t.Run("each state is counted and windowed, processed ones too", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		o := NewOutbox(OutboxOpts{DB: db})
		ids := emitRegistered(t, o, 12, Target{MagnetUID: 3})
		if _, err := o.Ack(ctx, contract.AckRequest{ProcessedIDs: ids[:5], RetryIDs: ids[5:7]}); err != nil {
			t.Fatal(err)
		}
		killEvent(t, o, clock, ids[7])
		killEvent(t, o, clock, ids[8])
		want := map[EventState][]contract.EventID{
			StateProcessed: ids[:5], StateRetrying: ids[5:7], StateDead: ids[7:9], StatePending: ids[9:],
		}
		for st, w := range want {
			n, err := o.CountEvents(ctx, EventFilter{State: st}, 0)
			if err != nil || n != int64(len(w)) {
				t.Fatalf("%s: counted %d, %v; want %d", st, n, err, len(w))
			}
			page, err := o.ListEvents(ctx, EventFilter{State: st, Limit: 2})
			if err != nil {
				t.Fatal(err)
			}
			newest := slices.Clone(w)
			slices.Reverse(newest)
			if !slices.Equal(recordIDs(page), newest[:min(2, len(newest))]) {
				t.Fatalf("%s: first window %v, want the newest of %v", st, recordIDs(page), w)
			}
		}
	})

	t.Run("a search finds events by id, uid, Telegram id or payload text", func(t *testing.T) {
		t.Parallel()
		o := NewOutbox(OutboxOpts{DB: storetest.New(t)})
		emitMany(t, o, 5, Target{MagnetUID: 11})
		tg, err := o.Emit(ctx, NewEvent{Type: contract.EventRegistered, Target: Target{TelegramID: "777000111"},
			Payload: json.RawMessage(`{"leaderUid":1,"note":"Marmalade_50%"}`)})
		if err != nil {
			t.Fatal(err)
		}
		other, err := o.Emit(ctx, NewEvent{Type: contract.EventRegistered, Target: Target{MagnetUID: 12},
			Payload: json.RawMessage(`{"leaderUid":1,"note":"Marmalade 50 percent"}`)})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			term string
			want []contract.EventID
		}{
			{"777000111", []contract.EventID{tg}},
			{strconvID(other), []contract.EventID{other}},
			{"12", []contract.EventID{other}},
			{"marmalade", []contract.EventID{other, tg}},
			{"MARMALADE_50%", []contract.EventID{tg}}, // _ and % are taken literally
			{"no such text", nil},
		} {
			page, err := o.ListEvents(ctx, EventFilter{Search: c.term, Limit: 50})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(recordIDs(page), c.want) && !(len(page) == 0 && len(c.want) == 0) {
				t.Fatalf("search %q found %v, want %v", c.term, recordIDs(page), c.want)
			}
			f := EventFilter{Search: c.term}
			var upTo int64
			if f.SearchReadsRows() {
				upTo = 10_000
			}
			if n, err := o.CountEvents(ctx, f, upTo); err != nil || n != int64(len(c.want)) {
				t.Fatalf("search %q counted %d, %v; want %d", c.term, n, err, len(c.want))
			}
		}
		if (EventFilter{Search: "123"}).SearchReadsRows() || !(EventFilter{Search: "abc"}).SearchReadsRows() {
			t.Fatal("a number is looked up by id, text read from the rows")
		}
		if _, err := o.ListEvents(ctx, EventFilter{Search: strings.Repeat("x", 201)}); err == nil {
			t.Fatal("a search term of 201 bytes was taken")
		}
	})

	t.Run("dead letters are redriven by id or all those matching, and only dead letters", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		o := NewOutbox(OutboxOpts{DB: db})
		a := emitRegistered(t, o, 4, Target{MagnetUID: 21})
		b := emitRegistered(t, o, 2, Target{MagnetUID: 22})
		for _, id := range append(slices.Clone(a), b...) {
			killEvent(t, o, clock, id)
		}
		live := emitMany(t, o, 1, Target{MagnetUID: 21})

		n, err := o.RedriveDead(ctx, EventFilter{}, []contract.EventID{a[0], a[1], live[0], 999999})
		if err != nil || n != 2 {
			t.Fatalf("redrove %d, %v; want the 2 dead letters chosen", n, err)
		}
		for _, id := range a[:2] {
			if e, _ := o.GetEvent(ctx, id); e.State != StatePending || e.Attempts != 0 {
				t.Fatalf("event %d after redrive: %s, %d attempts", id, e.State, e.Attempts)
			}
		}
		n, err = o.RedriveDead(ctx, EventFilter{MagnetUID: 21, State: StateDead, BeforeID: 1}, nil)
		if err != nil || n != 2 {
			t.Fatalf("redrove %d, %v; want the 2 dead letters left of uid 21 (the window ignored)", n, err)
		}
		if left, _ := o.CountEvents(ctx, EventFilter{State: StateDead}, 0); left != 2 {
			t.Fatalf("%d dead letters left, want uid 22's 2", left)
		}
		if n, err := o.RedriveDead(ctx, EventFilter{}, []contract.EventID{}); err != nil || n != 0 {
			t.Fatalf("an empty choice redrove %d, %v", n, err)
		}
	})
}

func strconvID(id contract.EventID) string {
	b, _ := json.Marshal(int64(id))
	return string(b)
}

// Every window of the event list walks an index (or the table's own id
// order) in the list's order and stops at the limit: no sort of the matching
// rows, so a window costs the same at any depth. The one exception is a
// filter by "uid or Telegram id" (a bare number), which merges two indexes of
// one user's events and sorts those. No exact count scans the table: each
// reads an index, the live and dead ones the pending index, whose rows are
// the backlog. (A text search reads the rows, newest first — there is no text
// index — and is counted only up to a bound.)
func TestEventWindowPlans(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	if db.Postgres() {
		t.Skip("the plans read here are SQLite's (EXPLAIN QUERY PLAN); docs/console.md has PostgreSQL's")
	}
	filters := map[string]EventFilter{
		"all":       {},
		"pending":   {State: StatePending},
		"retrying":  {State: StateRetrying},
		"processed": {State: StateProcessed},
		"dead":      {State: StateDead},
		"type":      {Type: contract.EventRegistered},
		"uid":       {MagnetUID: 5},
		"tg":        {TelegramID: "123"},
		"either":    {MagnetUID: 5, TelegramID: "5"},
		"id search": {Search: "5"},
		"dead uid":  {State: StateDead, MagnetUID: 5},
	}
	for name, f := range filters {
		for _, w := range []EventFilter{{}, {BeforeID: 1000}, {AfterID: 1000}} {
			f := f
			f.BeforeID, f.AfterID, f.Limit = w.BeforeID, w.AfterID, 51
			q, args, err := f.listSQL()
			if err != nil {
				t.Fatal(err)
			}
			plan := storetest.SQLitePlan(t, db, q, args...)
			if strings.Contains(plan, "TEMP B-TREE") && name != "id search" && name != "either" {
				t.Errorf("%s window %+v sorts:\n%s", name, w, plan)
			}
			t.Logf("%s window before=%d after=%d:\n%s", name, w.BeforeID, w.AfterID, plan)
		}
		q, args, _ := f.countSQL(0)
		plan := storetest.SQLitePlan(t, db, q, args...)
		if strings.Contains(plan+"; ", "SCAN bot_event_outbox; ") {
			t.Errorf("%s count scans the table:\n%s", name, plan)
		}
		t.Logf("%s count:\n%s", name, plan)
	}
}
