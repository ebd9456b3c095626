package referral

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

// The console's lists of links and replicas in windows at depth, counted
// and searched, and links deleted in bulk.
func TestListWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	svc, err := New(ctx, Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	owners := []UserID{newUser(), newUser()}
	var links []Link
	for i := range 130 {
		l, err := svc.CreateLink(ctx, NewLink{URL: fmt.Sprintf("promo-%03d", i), OwnerUserID: owners[i%2], TenantID: tenantOf(owners[0]), Channel: "web"})
		if err != nil {
			t.Fatal(err)
		}
		links = append(links, l)
		if i%3 == 0 {
			clock.Advance(time.Second) // three links share a time: the id orders them
		}
	}
	newestFirst := slices.Clone(links)
	slices.SortStableFunc(newestFirst, func(a, b Link) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(string(b.ID), string(a.ID))
	})
	linkIDs := func(list []Link) []LinkID {
		out := make([]LinkID, len(list))
		for i, l := range list {
			out[i] = l.ID
		}
		return out
	}

	t.Run("link windows walk every link newest first, and a newer one comes back", func(t *testing.T) {
		var walked []Link
		f := LinkFilter{Limit: 50}
		for {
			page, err := svc.ListLinks(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			walked = append(walked, page...)
			f.Before = page[len(page)-1].Key()
		}
		if !slices.Equal(linkIDs(walked), linkIDs(newestFirst)) {
			t.Fatalf("walked %d links out of order", len(walked))
		}
		page, err := svc.ListLinks(ctx, LinkFilter{After: newestFirst[100].Key(), Limit: 50})
		want := linkIDs(newestFirst[50:100])
		slices.Reverse(want)
		if err != nil || !slices.Equal(linkIDs(page), want) {
			t.Fatalf("newer than the 101st: %v, %v", linkIDs(page), err)
		}
		if n, err := svc.CountLinks(ctx, LinkFilter{After: newestFirst[100].Key()}, 0); err != nil || n != 100 {
			t.Fatalf("before the 101st: %d, %v", n, err)
		}
		if _, err := svc.ListLinks(ctx, LinkFilter{Before: "nonsense"}); err == nil {
			t.Fatal("a key that is no key was taken")
		}
	})
	t.Run("a search finds links by slug or owner, and counts them", func(t *testing.T) {
		for _, c := range []struct {
			term string
			want int64
		}{{"promo-07", 10}, {"PROMO-129", 1}, {string(owners[1]), 65}, {"promo_", 0}} {
			f := LinkFilter{Search: c.term}
			if n, err := svc.CountLinks(ctx, f, 10_000); err != nil || n != c.want {
				t.Fatalf("search %q counted %d, %v; want %d", c.term, n, err, c.want)
			}
			if page, err := svc.ListLinks(ctx, f); err != nil || int64(len(page)) != c.want {
				t.Fatalf("search %q listed %d, %v", c.term, len(page), err)
			}
		}
	})
	t.Run("links are deleted by id or all matching, once", func(t *testing.T) {
		n, err := svc.DeleteLinks(ctx, LinkFilter{}, []LinkID{links[0].ID, links[1].ID, "no-such-link"})
		if err != nil || n != 2 {
			t.Fatalf("deleted %d, %v; want 2", n, err)
		}
		if n, _ := svc.DeleteLinks(ctx, LinkFilter{}, []LinkID{links[0].ID}); n != 0 {
			t.Fatalf("deleted a deleted link again: %d", n)
		}
		n, err = svc.DeleteLinks(ctx, LinkFilter{Search: "promo-01", Before: "ignored"}, nil)
		if err != nil || n != 10 {
			t.Fatalf("deleted %d matching promo-01, %v; want 10", n, err)
		}
		if live, _ := svc.CountLinks(ctx, LinkFilter{}, 0); live != 118 {
			t.Fatalf("%d live links, want 118", live)
		}
		if all, _ := svc.CountLinks(ctx, LinkFilter{IncludeDeleted: true}, 0); all != 130 {
			t.Fatalf("%d links with the deleted, want 130", all)
		}
	})
	t.Run("replica windows walk every replica changed last first, searched by id, name or phone digits", func(t *testing.T) {
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			for i := range 75 {
				at := store.TS(db.Now().Add(time.Duration(i/2) * time.Second))
				if _, err := tx.ExecContext(ctx, `insert into referral_users (id, type, status, first_name, last_name, phone_number,
					is_name_filled, replica_version, updated_at) values (?, 'Client', 'Active', ?, 'Demo', ?, 1, 1, ?)`,
					fmt.Sprintf("00000000-0000-4000-8000-%012d", i), fmt.Sprint("Person", i), fmt.Sprintf("+7999000%04d", i), at); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var walked []UserID
		f := ReplicaFilter{Limit: 20}
		for {
			page, err := svc.ListReplicas(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) == 0 {
				break
			}
			for i, r := range page {
				if i > 0 && (r.UpdatedAt.After(page[i-1].UpdatedAt)) {
					t.Fatalf("replica %s listed after a older one", r.ID)
				}
				walked = append(walked, r.ID)
			}
			f.Before = page[len(page)-1].Key()
		}
		if len(walked) != 75 || walked[0] != "00000000-0000-4000-8000-000000000074" {
			t.Fatalf("walked %d replicas from %s", len(walked), walked[0])
		}
		for _, c := range []struct {
			term string
			want int64
		}{{"00000000-0000-4000-8000-000000000007", 1}, {"person7", 6}, {"0042", 1}, {"+79990000042", 1}, {"Person7 Demo", 1}} {
			rf := ReplicaFilter{Search: c.term}
			if n, err := svc.CountReplicas(ctx, rf, 10_000); err != nil || n != c.want {
				t.Fatalf("search %q counted %d, %v; want %d", c.term, n, err, c.want)
			}
		}
		if (ReplicaFilter{Search: "00000000-0000-4000-8000-000000000007"}).SearchReadsRows() {
			t.Fatal("a user id search reads rows")
		}
	})
}

// Each window of links and replicas walks an index in the list's order
// (SQLite's plans; PostgreSQL's are in docs/console.md).
func TestListWindowPlans(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	if db.Postgres() {
		t.Skip("the plans read here are SQLite's")
	}
	key := windowKey(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), "00000000-0000-4000-8000-000000000001")
	var queries []string
	var argss [][]any
	for _, f := range []LinkFilter{{}, {Before: key}, {After: key}, {IncludeDeleted: true, Before: key}} {
		q, args, err := f.listSQL()
		if err != nil {
			t.Fatal(err)
		}
		queries, argss = append(queries, q), append(argss, args)
	}
	for _, f := range []ReplicaFilter{{}, {Before: key}, {After: key}} {
		q, args, err := f.listSQL()
		if err != nil {
			t.Fatal(err)
		}
		queries, argss = append(queries, q), append(argss, args)
	}
	for i, q := range queries {
		plan := storetest.SQLitePlan(t, db, q, argss[i]...)
		if strings.Contains(plan, "TEMP B-TREE") || !strings.Contains(plan, "INDEX") {
			t.Errorf("%s\nsorts or scans:\n%s", q, plan)
		}
		t.Logf("%s:\n%s", q[strings.Index(q, "from"):], plan)
	}
}
