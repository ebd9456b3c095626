package queue

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// sentCount reads switchyard_queue_messages_sent_total of the queue or
// topic name.
func sentCount(t *testing.T, name string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "switchyard_queue_messages_sent_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// closed reports whether a signal's wake-up channel has been closed.
// listening waits, on PostgreSQL, until db listens for other instances'
// wake-ups. Once the listener is up it wakes every signal (whatever was
// broadcast while nobody listened is lost), and a test of when a commit wakes
// the workers would take that wake-up for the commit's: CI saw "woken before
// the transaction committed" about once in 30 runs.
func listening(t *testing.T, db *store.DB) {
	t.Helper()
	if !db.Postgres() {
		return
	}
	testwait.Until(t, 10*time.Second, "the listener for other instances' wake-ups", func() bool {
		return db.BroadcastStats().Listens > 0
	})
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A send or publish inside a caller's transaction must wake this process's
// workers only once the transaction has committed: on PostgreSQL their
// receive runs in a transaction of its own, beside the caller's, and a
// wake-up before the commit finds nothing and then sleeps a poll interval.
// And what is counted must be what was committed.
func TestAfterCommit(t *testing.T) {
	t.Parallel()

	t.Run("a send in a transaction wakes the workers and counts once the transaction commits, never when it rolls back", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := New(NewOpts{DB: db, Name: "aftercommit.send"})
		listening(t, db)
		before := sentCount(t, q.name)

		wake := q.sig.wait()
		err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			if _, err := q.SendTx(t.Context(), tx, Message{Body: []byte("x")}); err != nil {
				return err
			}
			if closed(wake) {
				t.Error("the workers were woken before the send's transaction committed")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !closed(wake) {
			t.Error("the workers were not woken once the send's transaction committed")
		}
		if got := sentCount(t, q.name) - before; got != 1 {
			t.Errorf("the committed send counted %v times, want 1", got)
		}

		wake = q.sig.wait()
		rollback := errors.New("roll back")
		err = db.Tx(t.Context(), func(tx *sql.Tx) error {
			if _, err := q.SendTx(t.Context(), tx, Message{Body: []byte("y"), Key: "k"}); err != nil {
				return err
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatalf("Tx = %v, want the function's error", err)
		}
		if closed(wake) {
			t.Error("a rolled-back send woke the workers")
		}
		if got := sentCount(t, q.name) - before; got != 1 {
			t.Errorf("sends counted %v, want 1: the rolled-back one counts nothing", got)
		}
	})

	t.Run("a publish in a transaction wakes the subscribers and counts once the transaction commits, never when it rolls back", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic, err := NewTopic(t.Context(), TopicOpts{DB: db, Name: "aftercommit.publish", Partitions: 1})
		if err != nil {
			t.Fatal(err)
		}
		listening(t, db)
		before := sentCount(t, topic.name)

		wake := topic.sig.wait()
		err = db.Tx(t.Context(), func(tx *sql.Tx) error {
			if err := topic.PublishTx(t.Context(), tx, "k", []byte("x")); err != nil {
				return err
			}
			if closed(wake) {
				t.Error("the subscribers were woken before the publish's transaction committed")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !closed(wake) {
			t.Error("the subscribers were not woken once the publish's transaction committed")
		}

		wake = topic.sig.wait()
		rollback := errors.New("roll back")
		err = db.Tx(t.Context(), func(tx *sql.Tx) error {
			if err := topic.PublishTx(t.Context(), tx, "k", []byte("y")); err != nil {
				return err
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatalf("Tx = %v, want the function's error", err)
		}
		if closed(wake) {
			t.Error("a rolled-back publish woke the subscribers")
		}
		if got := sentCount(t, topic.name) - before; got != 1 {
			t.Errorf("publishes counted %v, want 1: the rolled-back one counts nothing", got)
		}
	})

	t.Run("a transaction run again after a serialization failure counts its send once", func(t *testing.T) {
		t.Parallel()
		if !storetest.Postgres() {
			t.Skip("PostgreSQL only: SQLite's transactions are never run again")
		}
		db := storetest.New(t)
		q := New(NewOpts{DB: db, Name: "aftercommit.retried"})
		before := sentCount(t, q.name)
		runs := 0
		err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			runs++
			if _, err := q.SendTx(t.Context(), tx, Message{Body: []byte("x")}); err != nil {
				return err
			}
			if runs == 1 {
				return &pgconn.PgError{Code: "40001", Message: "could not serialize access (the test's)"}
			}
			return nil
		})
		if err != nil || runs != 2 {
			t.Fatalf("Tx = %v after %d runs, want success on the second", err, runs)
		}
		if got := sentCount(t, q.name) - before; got != 1 {
			t.Errorf("the send counted %v times, want 1", got)
		}
	})

	t.Run("a record handler's publish counts only when the record's savepoint is kept", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		in, err := NewTopic(t.Context(), TopicOpts{DB: db, Name: "aftercommit.in", Partitions: 1})
		if err != nil {
			t.Fatal(err)
		}
		out, err := NewTopic(t.Context(), TopicOpts{DB: db, Name: "aftercommit.out", Partitions: 1})
		if err != nil {
			t.Fatal(err)
		}
		before := sentCount(t, out.name)
		sub, err := in.Subscribe(t.Context(), SubscribeOpts{
			Group: "relay",
			Retry: RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond},
			Handler: func(ctx context.Context, tx *sql.Tx, r Record) error {
				if err := out.PublishTx(ctx, tx, r.Key, r.Value); err != nil {
					return err
				}
				if r.Attempt == 1 {
					return errors.New("fails after publishing; the publish is rolled back")
				}
				return nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Stop(context.Background()) })
		if _, err := in.Publish(t.Context(), "k", []byte("x")); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the record relayed on its second attempt", func() bool {
			recs, err := out.Read(t.Context(), ReadFilter{})
			return err == nil && len(recs) == 1
		})
		if got := sentCount(t, out.name) - before; got != 1 {
			t.Errorf("the relay's publishes counted %v, want 1: the rolled-back one counts nothing", got)
		}
	})

	t.Run("a record handler that fails after publishing writes none of its records and wakes nobody, while one beside it in the chunk keeps its own", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topics := map[string]*Topic{}
		for _, name := range []string{"staged.in", "staged.ok", "staged.bad"} {
			topic, err := NewTopic(t.Context(), TopicOpts{DB: db, Name: name, Partitions: 1})
			if err != nil {
				t.Fatal(err)
			}
			topics[name] = topic
		}
		in, ok, bad := topics["staged.in"], topics["staged.ok"], topics["staged.bad"]
		listening(t, db)
		// Both records wait before the group starts, so one transaction
		// handles them, each in its savepoint.
		for _, v := range []string{"ok", "bad"} {
			if _, err := in.Publish(t.Context(), v, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
		okBefore, badBefore := sentCount(t, ok.name), sentCount(t, bad.name)
		okWake, badWake := ok.sig.wait(), bad.sig.wait()
		sub, err := in.Subscribe(t.Context(), SubscribeOpts{
			Group: "relay",
			Handler: func(ctx context.Context, tx *sql.Tx, r Record) error {
				if string(r.Value) == "ok" {
					return ok.PublishTx(ctx, tx, r.Key, r.Value)
				}
				if err := ok.PublishTx(ctx, tx, r.Key, r.Value); err != nil {
					return err
				}
				if err := bad.PublishTx(ctx, tx, r.Key, r.Value); err != nil {
					return err
				}
				return Permanent(errors.New("fails after publishing to both topics"))
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Stop(context.Background()) })
		testwait.Until(t, 20*time.Second, "both records finished, the bad one dead-lettered", func() bool {
			var committed, dead int
			_ = db.Read.QueryRow(`select committed from queue_group_offsets where topic = 'staged.in' and grp = 'relay'`).Scan(&committed)
			_ = db.Read.QueryRow(`select count(*) from queue_dead where grp = 'relay'`).Scan(&dead)
			return committed == 2 && dead == 1
		})
		recs, err := ok.Read(t.Context(), ReadFilter{})
		if err != nil || len(recs) != 1 || string(recs[0].Value) != "ok" || recs[0].Offset != 0 {
			t.Errorf("staged.ok holds %+v (%v), want the good record alone, at offset 0", recs, err)
		}
		var end int64
		if err := db.Read.QueryRow(`select next_offset from queue_topic_partitions where topic = 'staged.ok'`).Scan(&end); err != nil || end != 1 {
			t.Errorf("staged.ok ends at %d (%v), want 1: the failed record took no offset", end, err)
		}
		if recs, err := bad.Read(t.Context(), ReadFilter{}); err != nil || len(recs) != 0 {
			t.Errorf("staged.bad holds %+v (%v), want nothing", recs, err)
		}
		if !closed(okWake) {
			t.Error("the good record's publish did not wake staged.ok's subscribers")
		}
		if closed(badWake) {
			t.Error("the failed record's publish woke staged.bad's subscribers")
		}
		if got := sentCount(t, ok.name) - okBefore; got != 1 {
			t.Errorf("staged.ok counted %v publishes, want 1", got)
		}
		if got := sentCount(t, bad.name) - badBefore; got != 0 {
			t.Errorf("staged.bad counted %v publishes, want 0", got)
		}
	})
}
