package referral

import (
	"context"
	"testing"
	"time"
)

// The console's reads of the referral context: the replicas changed last,
// the bonds, and the identity events consumed and bonds created per minute.
func TestConsoleReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	start := h.db.Now()
	owner, referred, plain := newUser(), newUser(), newUser()
	h.publish(upsert(owner, 1).set("Type", "Agent").json())
	h.link("olga-2026", owner)
	h.publish(upsert(referred, 2).referrer("olga-2026").json(), upsert(plain, 3).json())
	h.waitIdle()

	t.Run("replicas list the one changed last first, as Replica reads each", func(t *testing.T) {
		list, err := h.svc.ListReplicas(ctx, ReplicaFilter{})
		if err != nil || len(list) != 3 {
			t.Fatalf("replicas %+v, %v", list, err)
		}
		for i, r := range list {
			one, err := h.svc.Replica(ctx, r.ID)
			if err != nil || one != r {
				t.Fatalf("listed %+v, read %+v (%v)", r, one, err)
			}
			if i > 0 && (r.UpdatedAt.After(list[i-1].UpdatedAt) || r.UpdatedAt.Equal(list[i-1].UpdatedAt) && r.ID > list[i-1].ID) {
				t.Fatalf("replica %d (%s, %v) listed after %s, %v", i, r.ID, r.UpdatedAt, list[i-1].ID, list[i-1].UpdatedAt)
			}
		}
		if short, err := h.svc.ListReplicas(ctx, ReplicaFilter{Limit: 2}); err != nil || len(short) != 2 || short[0] != list[0] {
			t.Fatalf("limit 2: %+v, %v", short, err)
		}
	})
	t.Run("bonds are counted", func(t *testing.T) {
		if n, err := h.svc.CountBonds(ctx); err != nil || n != 1 {
			t.Fatalf("bonds %d, %v", n, err)
		}
	})
	t.Run("consumed events and created bonds are counted by when they were consumed", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			count    func(ctx context.Context, from, to time.Time) (int64, error)
			from, to time.Time
			want     int64
		}{
			{"consumed since the start", h.svc.ConsumedBetween, start, time.Time{}, 3},
			{"bonds since the start", h.svc.BondsBetween, start, time.Time{}, 1},
			{"consumed before the start", h.svc.ConsumedBetween, start.Add(-time.Hour), start, 0},
			{"consumed in the next hour", h.svc.ConsumedBetween, start, h.db.Now().Add(time.Hour), 3},
		} {
			if n, err := tc.count(ctx, tc.from, tc.to); err != nil || n != tc.want {
				t.Errorf("%s: %d (%v), want %d", tc.name, n, err, tc.want)
			}
		}
	})
}

// TestLinkLookups: the G1 alert's counts. A lookup is an upsert with a
// well-formed referrer slug of a user not bound before; G1 is one that found
// no live link. Nothing before the lookup is counted.
func TestLinkLookups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, harnessOpts{})
	start := h.db.Now()
	owner, referred := newUser(), newUser()
	h.publish(upsert(owner, 1).set("Type", "Agent").json())
	h.link("olga-2026", owner)
	h.publish(upsert(referred, 1).referrer("olga-2026").json())
	h.waitIdle()
	brokenFrom := h.db.Now()
	h.publish(
		upsert(newUser(), 1).referrer("no-such-link").json(), // G1: a broken cookie
		upsert(newUser(), 1).json(),                          // replica-only
		upsert(newUser(), 1).referrer("!!").json(),           // invalid-slug
		upsert(referred, 2).referrer("olga-2026").json(),     // first-seen-skip
	)
	h.waitIdle()

	for _, tc := range []struct {
		name     string
		from, to time.Time
		want     LinkLookups
	}{
		{"since the start: the bond and the broken cookie", start, time.Time{}, LinkLookups{Looked: 2, Missing: 1}},
		{"before the broken cookie: the bond", start, brokenFrom, LinkLookups{Looked: 1}},
		{"from the broken cookie on: it alone", brokenFrom, time.Time{}, LinkLookups{Looked: 1, Missing: 1}},
		{"before the start: none", start.Add(-time.Hour), start, LinkLookups{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := h.svc.LinkLookupsBetween(ctx, tc.from, tc.to); err != nil || got != tc.want {
				t.Errorf("%+v (%v), want %+v", got, err, tc.want)
			}
		})
	}
}
