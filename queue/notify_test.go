package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// The tests of this file are about two instances on one PostgreSQL
// database: two *store.DB handles, whose in-process signals are apart as two
// processes' are. The consumers of the second poll once a minute, so each
// wake-up the test waits for within seconds can only be a broadcast.

const slowPoll = time.Minute

// listening waits until db's listening connection has been established
// (times times): broadcasts made before it are not heard.
func listening(t testing.TB, db *store.DB, times int64) {
	t.Helper()
	testwait.Until(t, 10*time.Second, "the listening connection up", func() bool { return db.BroadcastStats().Listens >= times },
		func() string { return fmt.Sprintf("%+v", db.BroadcastStats()) })
}

func TestWakeOtherInstances(t *testing.T) {
	t.Parallel()
	const pgOnly = "other instances are woken by LISTEN/NOTIFY; on SQLite they poll"

	t.Run("a worker of another instance receives a message sent here within seconds, not at its next poll", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, pgOnly)
		a := storetest.New(t)
		b := openHandle(t, a)
		qa, qb := queue.New(queue.NewOpts{DB: a, Name: "q"}), queue.New(queue.NewOpts{DB: b, Name: "q"})
		got := make(chan string, 10)
		start(t, qb, queue.WorkerOpts{PollInterval: slowPoll, Handler: func(ctx context.Context, m queue.Message) error {
			got <- string(m.Body)
			return nil
		}})
		listening(t, b, 1)
		for i := range 3 {
			body := fmt.Sprintf("m%d", i)
			if _, err := qa.Send(t.Context(), queue.Message{Body: []byte(body)}); err != nil {
				t.Fatal(err)
			}
			select {
			case m := <-got:
				if m != body {
					t.Fatalf("got %q, want %q", m, body)
				}
			case <-time.After(5 * time.Second * testwait.Slack):
				t.Fatalf("%s sent on one instance was not received on the other within %s (it polls every %s)", body, 5*time.Second*testwait.Slack, slowPoll)
			}
		}
	})

	t.Run("a subscriber of another instance handles a record published here within seconds", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, pgOnly)
		a := storetest.New(t)
		b := openHandle(t, a)
		ta, tb := newTopic(t, a, "t", 6), newTopic(t, b, "t", 6)
		var handled atomic.Int64
		subscribe(t, tb, queue.SubscribeOpts{Group: "g", PollInterval: slowPoll, Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			b.AfterCommit(tx, func() { handled.Add(1) })
			return nil
		}})
		listening(t, b, 1)
		testwait.Until(t, 10*time.Second, "the subscriber owns the partitions", func() bool {
			return count(t, a, `select count(*) from store_leases where name like 'queue.group/t/g/%'`) == 6
		})
		for i := range 6 {
			if _, err := ta.Publish(t.Context(), fmt.Sprintf("k%d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
			testwait.Until(t, 5*time.Second, fmt.Sprintf("record %d handled on the other instance", i), func() bool { return handled.Load() == int64(i+1) },
				func() string { return fmt.Sprintf("%d handled", handled.Load()) })
		}
	})

	t.Run("a message sent while the listening connection is down is received once it is back", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, pgOnly)
		a := storetest.New(t)
		b := openHandle(t, a)
		qa, qb := queue.New(queue.NewOpts{DB: a, Name: "q"}), queue.New(queue.NewOpts{DB: b, Name: "q"})
		var handled atomic.Int64
		start(t, qb, queue.WorkerOpts{PollInterval: slowPoll, Handler: func(ctx context.Context, m queue.Message) error {
			handled.Add(1)
			return nil
		}})
		listening(t, b, 1)
		// The first send opens a's sending connection and proves the path.
		if _, err := qa.Send(t.Context(), queue.Message{Body: []byte("before")}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the first message received", func() bool { return handled.Load() == 1 })

		// The database refuses new connections while the listeners are
		// ended, so the send's notification is sent while nobody on b
		// listens, and is lost to b.
		allow := storetest.RefuseConnections(t, a)
		if _, err := a.Write.Exec(`select pg_terminate_backend(pid) from pg_stat_activity
			where datname = current_database() and application_name like '%(listen)'`); err != nil {
			t.Fatal(err)
		}
		sent := a.BroadcastStats().Sent
		if _, err := qa.Send(t.Context(), queue.Message{Body: []byte("while down")}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the notification of the send sent", func() bool { return a.BroadcastStats().Sent > sent })
		if b.BroadcastStats().Listens != 1 {
			t.Fatalf("b listens again already: %+v", b.BroadcastStats())
		}
		allow()
		listening(t, b, 2)
		testwait.Until(t, 5*time.Second, "the message sent while b did not listen received", func() bool { return handled.Load() == 2 },
			func() string { return fmt.Sprintf("%d handled", handled.Load()) })
	})

	t.Run("members in two instances balance and hand over through the group's broadcast, without a poll or a renewal", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, pgOnly)
		a := storetest.New(t)
		b := openHandle(t, a)
		ta, tb := newTopic(t, a, "t", 6), newTopic(t, b, "t", 6)
		listening(t, a, 1)
		listening(t, b, 1)
		// Polls and renewals are far apart: only the wake-ups can move the
		// partitions within the test's deadlines.
		noop := func(ctx context.Context, tx *sql.Tx, r queue.Record) error { return nil }
		opts := queue.SubscribeOpts{Group: "g", Handler: noop, LeaseTTL: time.Minute, PollInterval: time.Hour}
		ia := &instance{db: a, sub: subscribe(t, ta, opts)}
		testwait.Until(t, 5*time.Second, "the first instance owns every partition", func() bool { return balancedAmong(t, a, ia) },
			describeOwnership(t, a))
		ib := &instance{db: b, sub: subscribe(t, tb, opts)}
		testwait.Until(t, 5*time.Second, "three partitions each", func() bool { return balancedAmong(t, a, ia, ib) },
			describeOwnership(t, a))
		stopped := time.Now()
		if err := ia.sub.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the second instance owns every partition", func() bool { return balancedAmong(t, a, ib) },
			describeOwnership(t, a))
		t.Logf("the other instance took over %s after the stop (lease %s)", time.Since(stopped).Round(time.Millisecond), opts.LeaseTTL)
	})

	t.Run("a burst of 10,000 sends wakes the other instance with far fewer notifications", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, pgOnly)
		const sends, senders = 10_000, 16
		a := storetest.New(t)
		b := openHandle(t, a)
		qa, qb := queue.New(queue.NewOpts{DB: a, Name: "q"}), queue.New(queue.NewOpts{DB: b, Name: "q"})
		var handled atomic.Int64
		start(t, qb, queue.WorkerOpts{Concurrency: 64, PollInterval: slowPoll, Handler: func(ctx context.Context, m queue.Message) error {
			handled.Add(1)
			return nil
		}})
		listening(t, b, 1)
		begin := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, senders)
		for s := range senders {
			wg.Go(func() {
				for i := s; i < sends; i += senders {
					if _, err := qa.Send(t.Context(), queue.Message{Body: []byte("m")}); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(begin)
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		testwait.Until(t, 30*time.Second, "every message handled on the other instance", func() bool { return handled.Load() == sends },
			func() string { return fmt.Sprintf("%d of %d handled", handled.Load(), sends) })
		st := a.BroadcastStats()
		t.Logf("%d sends in %s: %d notifications in %d statements", sends, elapsed, st.Sent, st.Statements)
		maxSent := int64(elapsed/store.DefaultBroadcastInterval) + 2
		if st.Sent > maxSent || st.Sent > sends/10 {
			t.Errorf("%d sends in %s made %d notifications, want at most one per %s (%d) and far fewer than the sends",
				sends, elapsed, st.Sent, store.DefaultBroadcastInterval, maxSent)
		}
	})

	t.Run("a dead letter redriven here wakes the other instance's workers", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, pgOnly)
		a := storetest.New(t)
		b := openHandle(t, a)
		qa, qb := queue.New(queue.NewOpts{DB: a, Name: "q"}), queue.New(queue.NewOpts{DB: b, Name: "q"})
		var fail atomic.Bool
		fail.Store(true)
		var handled atomic.Int64
		// Sent before the worker starts, whose first look finds it.
		if _, err := qa.Send(t.Context(), queue.Message{Body: []byte("m")}); err != nil {
			t.Fatal(err)
		}
		start(t, qb, queue.WorkerOpts{PollInterval: slowPoll, Handler: func(ctx context.Context, m queue.Message) error {
			if fail.Load() {
				return queue.Permanent(fmt.Errorf("not yet"))
			}
			handled.Add(1)
			return nil
		}})
		listening(t, b, 1)
		admin := queue.NewAdmin(queue.AdminOpts{DB: a})
		testwait.Until(t, 5*time.Second, "the message dead-lettered", func() bool {
			return count(t, a, `select count(*) from queue_dead where queue = 'q'`) == 1
		})
		fail.Store(false)
		if _, err := admin.Redrive(t.Context(), queue.DeadFilter{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the redriven message handled on the other instance", func() bool { return handled.Load() == 1 })
	})
}
