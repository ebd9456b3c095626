package omni

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/store/storetest"
)

// The inbox in windows: threads latest activity first by (last message,
// id), counted and searched; a long thread's messages newest first.
func TestThreadWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	admin := NewAdmin(AdminOpts{DB: db})
	domain := newChatDomain(db, AutoAckRule{})
	apply := func(body []byte) ThreadID {
		t.Helper()
		env := envelopeOf(t, body, db.Now())
		var thread ThreadID
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			res, err := domain.applyTx(ctx, tx, env)
			thread = res.Thread
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return thread
	}
	// 130 threads, two at each moment (the id breaks the tie); the 7th
	// says the needle.
	var threads []ThreadID
	for i := range 130 {
		text := fmt.Sprint("hello ", i)
		if i == 7 {
			text = "a Needle_in the hay"
		}
		threads = append(threads, apply(update(i+1, "message", privateMessage(int64(5000+i), 1, text, t0+int64(i)))))
		if i%2 == 1 {
			clock.Advance(time.Second)
		}
	}
	if err := admin.CloseThread(ctx, threads[3]); err != nil {
		t.Fatal(err)
	}
	latestFirst := slices.Clone(threads)
	slices.Reverse(latestFirst)
	ids := func(list []Thread) []ThreadID {
		out := make([]ThreadID, len(list))
		for i, th := range list {
			out[i] = th.ID
		}
		return out
	}

	t.Run("older windows walk every thread latest first, and a newer one comes back", func(t *testing.T) {
		var walked []ThreadID
		f := ThreadFilter{Limit: 50}
		for {
			page, err := admin.ListThreads(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			walked = append(walked, ids(page)...)
			f.Before = page[len(page)-1].Key()
		}
		if !slices.Equal(walked, latestFirst) {
			t.Fatalf("walked %v\nwant %v", walked, latestFirst)
		}
		edge, err := admin.Thread(ctx, latestFirst[100])
		if err != nil {
			t.Fatal(err)
		}
		page, err := admin.ListThreads(ctx, ThreadFilter{After: edge.Key(), Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(latestFirst[50:100])
		slices.Reverse(want)
		if !slices.Equal(ids(page), want) {
			t.Fatalf("newer than the 101st: %v, want %v", ids(page), want)
		}
		if n, err := admin.CountThreads(ctx, ThreadFilter{After: edge.Key()}, 0); err != nil || n != 100 {
			t.Fatalf("threads before the 101st: %d, %v", n, err)
		}
		if _, err := admin.ListThreads(ctx, ThreadFilter{Before: "yesterday"}); err == nil {
			t.Fatal("a key that is no key was taken")
		}
	})
	t.Run("threads are counted by state, exactly or up to a bound", func(t *testing.T) {
		for _, c := range []struct {
			f    ThreadFilter
			upTo int64
			want int64
		}{
			{ThreadFilter{}, 0, 130},
			{ThreadFilter{State: ThreadOpen}, 0, 129},
			{ThreadFilter{State: ThreadClosed}, 0, 1},
			{ThreadFilter{}, 99, 100},
		} {
			if n, err := admin.CountThreads(ctx, c.f, c.upTo); err != nil || n != c.want {
				t.Fatalf("%+v up to %d: %d, %v; want %d", c.f, c.upTo, n, err, c.want)
			}
		}
		page, err := admin.ListThreads(ctx, ThreadFilter{State: ThreadClosed})
		if err != nil || !slices.Equal(ids(page), []ThreadID{threads[3]}) {
			t.Fatalf("closed: %v, %v", ids(page), err)
		}
	})
	t.Run("a search finds threads by Telegram id, thread id or message text", func(t *testing.T) {
		for _, c := range []struct {
			term string
			want []ThreadID
		}{
			{"5012", []ThreadID{threads[12]}},
			{"needle_in", []ThreadID{threads[7]}},
			{"%", nil},
			{fmt.Sprint(threads[20]), []ThreadID{threads[20]}},
		} {
			f := ThreadFilter{Search: c.term}
			page, err := admin.ListThreads(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(page), c.want) && len(page)+len(c.want) > 0 {
				t.Fatalf("search %q: %v, want %v", c.term, ids(page), c.want)
			}
			var upTo int64
			if f.SearchReadsRows() {
				upTo = 10_000
			}
			if n, err := admin.CountThreads(ctx, f, upTo); err != nil || n != int64(len(c.want)) {
				t.Fatalf("search %q counted %d, %v", c.term, n, err)
			}
		}
	})
	t.Run("a long thread lists newest first, older windows below a position", func(t *testing.T) {
		long := threads[0]
		for i := range 119 {
			apply(update(1000+i, "message", privateMessage(5000, i+2, fmt.Sprint("more ", i), t0+200+int64(i))))
		}
		if n, err := admin.CountMessages(ctx, long, MessageFilter{}); err != nil || n != 120 {
			t.Fatalf("counted %d, %v", n, err)
		}
		newest, err := admin.ListMessages(ctx, long, MessageFilter{Newest: true, Limit: 50})
		if err != nil || len(newest) != 50 || newest[0].Seq <= newest[49].Seq {
			t.Fatalf("newest: %d messages, %v", len(newest), err)
		}
		older, err := admin.ListMessages(ctx, long, MessageFilter{BeforeSeq: newest[49].Seq, Limit: 50})
		if err != nil || len(older) != 50 || older[0].Seq >= newest[49].Seq {
			t.Fatalf("older: %d messages, %v", len(older), err)
		}
		if n, _ := admin.CountMessages(ctx, long, MessageFilter{AfterSeq: older[0].Seq}); n != 50 {
			t.Fatalf("after the older window's first: %d, want 50", n)
		}
	})
}

// Each window of the inbox walks an index in the inbox's order, and each
// count of a state reads an index alone (SQLite's plans; PostgreSQL's are in
// docs/console.md).
func TestThreadWindowPlans(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	if db.Postgres() {
		t.Skip("the plans read here are SQLite's")
	}
	key := Thread{ID: 5, LastMessageAt: new(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}.Key()
	for _, f := range []ThreadFilter{{}, {State: ThreadOpen}, {Before: key}, {State: ThreadClosed, After: key}, {Search: "42"}} {
		f.Limit = 51
		q, args, err := f.listSQL()
		if err != nil {
			t.Fatal(err)
		}
		plan := storetest.SQLitePlan(t, db, q, args...)
		if strings.Contains(plan, "TEMP B-TREE") && f.Search == "" {
			t.Errorf("window %+v sorts:\n%s", f, plan)
		}
		t.Logf("window %+v:\n%s", f, plan)
		q, args, _ = f.countSQL(0)
		plan = storetest.SQLitePlan(t, db, q, args...)
		if f.Search == "" && !strings.Contains(plan, "COVERING INDEX") {
			t.Errorf("count %+v reads rows:\n%s", f, plan)
		}
		t.Logf("count %+v:\n%s", f, plan)
	}
}
