package queue

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

// BenchmarkReceivePauseCheck times the receive statement alone, with the
// pause check (what workers run) and without it (the statement before
// issue 20), side by side in one run: a transaction that takes 4 ready
// messages of 10,000 (a worker's default concurrency) and rolls back, so
// every iteration finds the same rows. The difference is what the check
// costs a receive.
//
//	go test -run '^$' -bench ReceivePauseCheck -count 6 ./queue/
func BenchmarkReceivePauseCheck(b *testing.B) {
	db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
	ctx := context.Background()
	q := New(NewOpts{DB: db, Name: "bench"})
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		for i := range 10_000 {
			if _, err := q.SendTx(ctx, tx, Message{Body: fmt.Appendf(nil, "%d", i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	with := receiveSQL(db, 4)
	without := strings.Replace(with, "and not exists (select 1 from queue_pauses where queue = ? and grp = '')", "and ? <> ''", 1)
	if without == with {
		b.Fatal("the receive has no pause check to take out")
	}
	var stmts [2]*sql.Stmt // without, with
	for i, query := range []string{without, with} {
		if stmts[i], err = db.Write.PrepareContext(ctx, query); err != nil {
			b.Fatal(err)
		}
		defer stmts[i].Close()
	}
	receive := func(st *sql.Stmt) time.Duration {
		start := time.Now()
		tx, err := db.Write.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		now := db.Now()
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, gqTime(now.Add(time.Minute)), "bench", gqTime(now), 10, "bench")
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Close(); err != nil || n != 4 {
			b.Fatalf("received %d: %v", n, err)
		}
		if err := tx.Rollback(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// Each iteration runs both, in alternating order, so that the load of
	// the machine weighs on both alike.
	var spent [2]time.Duration
	i := 0
	for b.Loop() {
		first := i % 2
		spent[first] += receive(stmts[first])
		spent[1-first] += receive(stmts[1-first])
		i++
	}
	b.ReportMetric(float64(spent[0].Nanoseconds())/float64(i), "ns/receive-without")
	b.ReportMetric(float64(spent[1].Nanoseconds())/float64(i), "ns/receive-with")
	b.ReportMetric(float64(spent[1])/float64(spent[0]), "with/without")
}
