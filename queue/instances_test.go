package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// The tests of this file run a consumer group in several instances: each
// instance has a database handle of its own on one database (on SQLite, one
// file), so it shares nothing in memory with the others — no wake-ups, no
// statements — as if it were another process.

// instance is one member of a consumer group in a process of its own.
type instance struct {
	db     *store.DB
	sub    *queue.Subscription
	cancel context.CancelFunc
}

// openHandle opens another handle on db's database, closed when t ends.
func openHandle(t *testing.T, db *store.DB) *store.DB {
	t.Helper()
	h, err := store.Open(context.Background(), store.Options{Path: db.Path()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// startInstance opens a handle on db's database and subscribes group g of
// topic t (6 partitions) on it.
func startInstance(t *testing.T, db *store.DB, ttl time.Duration, handler queue.RecordHandlerFunc) *instance {
	t.Helper()
	h := openHandle(t, db)
	topic := newTopic(t, h, "t", 6)
	ctx, cancel := context.WithCancel(context.Background())
	sub, err := topic.Subscribe(ctx, queue.SubscribeOpts{Group: "g", Handler: handler, LeaseTTL: ttl, PollInterval: 50 * time.Millisecond})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	in := &instance{db: h, sub: sub, cancel: cancel}
	t.Cleanup(func() {
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		defer stop()
		_ = sub.Stop(ctx)
		cancel()
	})
	return in
}

// kill ends the instance as kill -9 would: its handle closes under it, so
// that it releases nothing, and its subscriber is told to stop.
func (in *instance) kill(t *testing.T) {
	t.Helper()
	if err := in.db.Close(); err != nil {
		t.Logf("closing the killed instance's handle: %v", err)
	}
	in.cancel()
}

// ownership reads, through the admin stats, the group's members and how
// many partitions each owner holds ("" counts the free ones).
func ownership(t *testing.T, db *store.DB) (members []string, held map[string]int) {
	t.Helper()
	stats, err := queue.NewAdmin(queue.AdminOpts{DB: db}).Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	held = map[string]int{}
	for _, ts := range stats.Topics {
		for _, g := range ts.Groups {
			if ts.Name != "t" || g.Group != "g" {
				continue
			}
			for _, p := range g.Partitions {
				held[p.Owner]++
				if (p.Owner == "") != p.LeaseExpiresAt.IsZero() {
					t.Errorf("partition %d: owner %q with lease expiry %s", p.Partition, p.Owner, p.LeaseExpiresAt)
				}
			}
			return g.Members, held
		}
	}
	return nil, held
}

// balancedAmong reports whether the group's members are exactly those of
// ins and they hold every partition, each its share of six.
func balancedAmong(t *testing.T, db *store.DB, ins ...*instance) bool {
	t.Helper()
	members, held := ownership(t, db)
	var want []string
	for _, in := range ins {
		want = append(want, in.sub.Owner())
	}
	sort.Strings(want)
	if !slices.Equal(members, want) || held[""] != 0 {
		return false
	}
	total := 0
	for _, in := range ins {
		n := held[in.sub.Owner()]
		if n != 6/len(ins) && n != (6+len(ins)-1)/len(ins) {
			return false
		}
		total += n
	}
	return total == 6
}

func describeOwnership(t *testing.T, db *store.DB) func() string {
	return func() string {
		members, held := ownership(t, db)
		return fmt.Sprintf("members %v, partitions held %v", members, held)
	}
}

// threeBalanced starts three instances of a group on a new database's
// 6-partition topic "t" and waits until they own two partitions each.
func threeBalanced(t *testing.T, ttl time.Duration, handler queue.RecordHandlerFunc) (db *store.DB, a, b, c *instance) {
	t.Helper()
	db = storetest.New(t)
	newTopic(t, db, "t", 6)
	a, b, c = startInstance(t, db, ttl, handler), startInstance(t, db, ttl, handler), startInstance(t, db, ttl, handler)
	testwait.Until(t, 10*time.Second, "two partitions for each instance", func() bool { return balancedAmong(t, db, a, b, c) },
		describeOwnership(t, db))
	return db, a, b, c
}

func TestGroupInstances(t *testing.T) {
	t.Parallel()
	noop := func(ctx context.Context, tx *sql.Tx, r queue.Record) error { return nil }

	t.Run("six partitions over three instances are shared two each", func(t *testing.T) {
		t.Parallel()
		threeBalanced(t, 30*time.Second, noop) // fails unless they settle on two each
	})

	t.Run("a partition a dead member's share keeps free is taken by a live one within a third of the lease", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 2)
		// A member that joined and died before it took its share: its
		// member lease lives for minutes, and with it its share of one.
		const ghost = "sub/ghost"
		if ok, err := db.AcquireLease(t.Context(), "queue.member/t/g/"+ghost, ghost, 5*time.Minute); err != nil || !ok {
			t.Fatalf("take the ghost's member lease: %v, %v", ok, err)
		}
		live := &instance{sub: subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: noop, LeaseTTL: 3 * time.Second})}
		testwait.Until(t, 10*time.Second, "the live member owns both partitions", func() bool {
			_, held := ownership(t, db)
			return held[live.sub.Owner()] == 2
		}, describeOwnership(t, db))
	})

	t.Run("an instance that stops hands its partitions to the others at once, long before its lease would expire", func(t *testing.T) {
		t.Parallel()
		const ttl = 30 * time.Second
		db, a, b, c := threeBalanced(t, ttl, noop)
		stopped := time.Now()
		if err := a.sub.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "three partitions for each survivor", func() bool { return balancedAmong(t, db, b, c) },
			describeOwnership(t, db))
		took := time.Since(stopped)
		t.Logf("the survivors took over %s after the stop (lease %s)", took.Round(time.Millisecond), ttl)
		if took > 5*time.Second {
			t.Errorf("the survivors took the stopped instance's partitions after %s, want at once (well under the %s lease)", took, ttl)
		}
	})

	t.Run("subscribers in one process balance and hand over through the group's wake-up, without waiting for a poll or a renewal", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "t", 6)
		// Polls and renewals are far apart: only the wake-ups can move the
		// partitions within the test's deadlines.
		opts := queue.SubscribeOpts{Group: "g", Handler: noop, LeaseTTL: time.Minute, PollInterval: time.Hour}
		a := &instance{sub: subscribe(t, topic, opts)}
		testwait.Until(t, 5*time.Second, "the first subscriber owns every partition", func() bool { return balancedAmong(t, db, a) },
			describeOwnership(t, db))
		b := &instance{sub: subscribe(t, topic, opts)}
		testwait.Until(t, 5*time.Second, "three partitions each", func() bool { return balancedAmong(t, db, a, b) },
			describeOwnership(t, db))
		if err := a.sub.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the second owns every partition", func() bool { return balancedAmong(t, db, b) },
			describeOwnership(t, db))
	})

	t.Run("an instance that dies loses its partitions to the survivors within the lease", func(t *testing.T) {
		t.Parallel()
		const ttl = 3 * time.Second
		db, a, b, c := threeBalanced(t, ttl, noop)
		killed := time.Now()
		a.kill(t)
		testwait.Until(t, ttl+2*time.Second, "three partitions for each survivor", func() bool { return balancedAmong(t, db, b, c) },
			describeOwnership(t, db))
		t.Logf("the survivors took over %s after the kill (lease %s)", time.Since(killed).Round(time.Millisecond), ttl)
	})

	t.Run("no record takes effect twice while instances join, stop and die under continuous publishing", func(t *testing.T) {
		t.Parallel()
		const ttl = 3 * time.Second
		db := storetest.New(t)
		createEffects(t, db)
		topic := newTopic(t, db, "t", 6)
		handler := func(ctx context.Context, tx *sql.Tx, r queue.Record) error { return record(ctx, tx, "g", r) }

		// The publisher writes from a handle of its own, a few records at a
		// time, until told to stop.
		var (
			mu        sync.Mutex
			published int
		)
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("k%d", i%12)
				if _, err := topic.Publish(context.Background(), key, fmt.Appendf(nil, "%s %d", key, i)); err != nil {
					t.Errorf("publish %d: %v", i, err)
					return
				}
				mu.Lock()
				published++
				mu.Unlock()
				if i%8 == 7 {
					time.Sleep(time.Millisecond) // a steady stream, not a flood
				}
			}
		}()
		handled := func() int { return count(t, db, `select count(*) from effects`) }
		progress := func(what string) {
			t.Helper()
			from := handled()
			testwait.Until(t, 10*time.Second, what, func() bool { return handled() > from+50 })
		}

		a := startInstance(t, db, ttl, handler)
		b := startInstance(t, db, ttl, handler)
		c := startInstance(t, db, ttl, handler)
		testwait.Until(t, 10*time.Second, "three instances balanced", func() bool { return balancedAmong(t, db, a, b, c) },
			describeOwnership(t, db))
		progress("records handled by three instances")

		d := startInstance(t, db, ttl, handler)
		testwait.Until(t, 10*time.Second, "a fourth instance gets its share", func() bool { return balancedAmong(t, db, a, b, c, d) },
			describeOwnership(t, db))
		progress("records handled by four instances")

		if err := a.sub.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "the stopped instance's partitions taken", func() bool { return balancedAmong(t, db, b, c, d) },
			describeOwnership(t, db))
		progress("records handled after a stop")

		b.kill(t)
		testwait.Until(t, ttl+5*time.Second, "the killed instance's partitions taken", func() bool { return balancedAmong(t, db, c, d) },
			describeOwnership(t, db))
		progress("records handled after a kill")

		e := startInstance(t, db, ttl, handler)
		testwait.Until(t, 10*time.Second, "a new instance gets its share", func() bool { return balancedAmong(t, db, c, d, e) },
			describeOwnership(t, db))

		close(stop)
		<-done
		mu.Lock()
		total := published
		mu.Unlock()
		testwait.Until(t, 20*time.Second, "every published record handled", func() bool { return handled() >= total },
			func() string { return fmt.Sprintf("%d of %d handled", handled(), total) })
		if n, distinct := handled(), count(t, db, `select count(*) from (select distinct seq from effects) as handled`); n != total || distinct != total {
			t.Errorf("%d effects of %d distinct records, want each of the %d published records applied exactly once", n, distinct, total)
		}
		for k := range 12 {
			key := fmt.Sprintf("k%d", k)
			seqs := effectSeqs(t, db, "g", key)
			if !slices.IsSorted(seqs) {
				t.Errorf("key %s applied out of order: %v", key, seqs)
			}
		}
		t.Logf("%d records published and applied once each", total)
	})
}
