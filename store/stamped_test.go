package store_test

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

// The id search must count exactly what a scan of the timestamps counts,
// with gaps in the ids and several rows in one instant; so must a count by
// the column, and a condition narrows both alike.
func TestCountByIDMatchesAScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	if _, err := db.Write.Exec(`create table stamped_rows (id integer primary key, kind text not null, at text not null)`); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		at, id := start, int64(0)
		for range 600 {
			id += 1 + rng.Int64N(3) // gaps, as deleted or rolled-back rows leave
			if rng.IntN(4) > 0 {
				at = at.Add(time.Duration(rng.IntN(20)) * time.Second)
			}
			kind := []string{"a", "b"}[rng.IntN(2)]
			if _, err := tx.Exec(`insert into stamped_rows (id, kind, at) values (?, ?, ?)`, id, kind, store.TS(at)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	scan := func(kind string, from, to time.Time) int64 {
		var n int64
		q := `select count(*) from stamped_rows where at >= ? and (? = '' or kind = ?)`
		args := []any{store.TS(from), kind, kind}
		if !to.IsZero() {
			q, args = q+` and at < ?`, append(args, store.TS(to))
		}
		if err := db.Read.QueryRow(q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name string
		s    store.Stamped
		kind string
	}{
		{"by id", store.Stamped{Table: "stamped_rows", Column: "at", ByID: true}, ""},
		{"by id with a condition", store.Stamped{Table: "stamped_rows", Column: "at", Where: "kind = ?", Args: []any{"b"}, ByID: true}, "b"},
		{"by the column with a condition", store.Stamped{Table: "stamped_rows", Column: "at", Where: "kind = ?", Args: []any{"a"}}, "a"},
	} {
		t.Run("counting "+tc.name+" matches a scan", func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(3, 4))
			for range 200 {
				from := start.Add(time.Duration(rng.IntN(4000)-200) * time.Second)
				to := from.Add(time.Duration(rng.IntN(600)) * time.Second)
				if rng.IntN(5) == 0 {
					to = time.Time{}
				}
				got, err := tc.s.CountBetween(ctx, db, from, to)
				if err != nil {
					t.Fatal(err)
				}
				if want := scan(tc.kind, from, to); got != want {
					t.Fatalf("[%v, %v): counted %d, %d by scan", from, to, got, want)
				}
			}
		})
	}
	t.Run("an empty table counts zero", func(t *testing.T) {
		t.Parallel()
		empty := storetest.New(t)
		if _, err := empty.Write.Exec(`create table stamped_rows (id integer primary key, kind text not null, at text not null)`); err != nil {
			t.Fatal(err)
		}
		s := store.Stamped{Table: "stamped_rows", Column: "at", ByID: true}
		if n, err := s.CountBetween(ctx, empty, start, time.Time{}); err != nil || n != 0 {
			t.Fatalf("n %d err %v", n, err)
		}
	})
	t.Run("a table that does not exist is an error that names it", func(t *testing.T) {
		t.Parallel()
		s := store.Stamped{Table: "no_such_table", Column: "at"}
		if _, err := s.CountBetween(ctx, db, start, time.Time{}); err == nil {
			t.Fatal("no error")
		} else if want := "no_such_table"; !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	})
}
