package referral

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"switchyard/history"
	"switchyard/store/storetest"
)

func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	owner, referred := newUser(), newUser()
	h.publish(upsert(owner, 1).set("Type", "Agent").json())
	l := h.link("hist-olga", owner)
	ev := upsert(referred, 1).referrer("hist-olga")
	ev.MessageID = uuid.NewString()
	h.publish(ev.json())
	h.waitIdle()

	kinds := func(term string) []string {
		t.Helper()
		f, err := h.svc.History(ctx, term, 50)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range f.Items {
			if strings.Contains(it.Summary, "Zinaida") || strings.Contains(it.Summary, "1234567") ||
				it.Flow != history.FlowReferral || it.At.IsZero() || it.Link == "" {
				t.Errorf("item %+v", it)
			}
			out = append(out, it.Kind)
		}
		slices.Sort(out)
		return out
	}

	t.Run("an identity user id finds the events consumed, the replica, the journal, the bond and the outgoing events", func(t *testing.T) {
		got := kinds(string(referred))
		want := []string{"bond created", "identity event consumed", "outgoing event", "registration journaled", "replica version"}
		for _, k := range want {
			if !slices.Contains(got, k) {
				t.Fatalf("items %q lack %q", got, k)
			}
		}
	})

	t.Run("the referrer's id finds the bond and the link", func(t *testing.T) {
		got := kinds(string(owner))
		for _, k := range []string{"bond created", "link created", "replica version", "identity event consumed"} {
			if !slices.Contains(got, k) {
				t.Fatalf("items %q lack %q", got, k)
			}
		}
	})

	t.Run("a message id finds its consumption", func(t *testing.T) {
		if got := kinds(ev.MessageID); !slices.Equal(got, []string{"identity event consumed"}) {
			t.Fatalf("items %q", got)
		}
	})

	t.Run("a link id finds the link", func(t *testing.T) {
		if got := kinds(string(l.ID)); !slices.Equal(got, []string{"link created"}) {
			t.Fatalf("items %q", got)
		}
	})

	t.Run("an unknown or an empty term finds nothing", func(t *testing.T) {
		for _, term := range []string{"", uuid.NewString(), "7001"} {
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
			{historyMarksSQL, []any{"a", "b", "c", 10}},
			{historyBondsSQL, []any{"a", "b", "c", 10}},
			{historyRegistrationsSQL, []any{"a", "b", 10}},
			{historyLinksSQL, []any{"a", "b", 10}},
		} {
			if plan := storetest.SQLitePlan(t, h.db, q.sql, q.args...); strings.Contains(plan, "SCAN ") {
				t.Errorf("%s: plan %s", q.sql, plan)
			}
		}
	})
}
