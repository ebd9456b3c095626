package queue_test

import (
	"database/sql"
	"fmt"
	"strconv"
	"testing"

	"switchyard/queue"
	"switchyard/store/storetest"
)

// BenchmarkDeadLetterWindow reads a window of 51 dead letters and counts the
// list, as the console's queue page does, at the head and 90,000 deep in
// 100,000 dead letters:
//
//	go test ./queue -run '^$' -bench DeadLetterWindow -benchtime 200x
func BenchmarkDeadLetterWindow(b *testing.B) {
	db := storetest.New(b)
	admin := queue.NewAdmin(queue.AdminOpts{DB: db})
	seedDead(b, db, "q", "", 100000)
	ctx := b.Context()
	var deep string
	f := queue.DeadFilter{Queue: "q", NewestFirst: true, Limit: 1000}
	for range 90 {
		page, err := admin.ListDead(ctx, f)
		if err != nil {
			b.Fatal(err)
		}
		f.Before = page[len(page)-1].Cursor
		deep = f.Before
	}
	for _, bc := range []struct{ name, before, search string }{
		{"head", "", ""}, {"deep", deep, ""}, {"search", "", "number 4242"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				f := queue.DeadFilter{Queue: "q", Search: bc.search, Before: bc.before, NewestFirst: true, Limit: 51}
				page, err := admin.ListDead(ctx, f)
				if err != nil || len(page) == 0 {
					b.Fatal(err)
				}
				if _, err := admin.CountDead(ctx, f, page[0].Cursor); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"-window-only", func(b *testing.B) {
			for b.Loop() {
				if _, err := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", Search: bc.search, Before: bc.before, NewestFirst: true, Limit: 51}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLiveWindow is a queue's newest window of live messages with its
// count, at a backlog of 1,000 and of 20,000 messages. No index serves the
// live list's (created, id) order — one would cost every send and delete
// an index write — so a window sorts the queue's backlog: its cost grows
// with the backlog, and these two sizes say how fast.
//
//	go test -run '^$' -bench BenchmarkLiveWindow ./queue/
func BenchmarkLiveWindow(b *testing.B) {
	for _, n := range []int{1_000, 20_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			db := storetest.New(b)
			admin := queue.NewAdmin(queue.AdminOpts{DB: db})
			q := queue.New(queue.NewOpts{DB: db, Name: "backlog"})
			ctx := b.Context()
			err := db.Tx(ctx, func(tx *sql.Tx) error {
				for i := range n {
					if _, err := q.SendTx(ctx, tx, queue.Message{Body: fmt.Appendf(nil, `{"n":%d}`, i)}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				f := queue.MessageFilter{Queue: "backlog", NewestFirst: true, Limit: 51}
				page, err := admin.ListMessages(ctx, f)
				if err != nil || len(page) != 51 {
					b.Fatalf("%d messages, %v", len(page), err)
				}
				if _, err := admin.CountMessages(ctx, f, page[0].Cursor); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
