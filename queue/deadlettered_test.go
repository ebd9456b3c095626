package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// TestDeadLetteredSince: the dead-letterings of every queue and consumer
// group in a span of time, as the dead-lettered counter counts them; a
// redrive does not take them back.
func TestDeadLetteredSince(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, clock := storetest.NewWithClock(t)
	admin := queue.NewAdmin(queue.AdminOpts{DB: db})
	start := clock.Now()

	q := queue.New(queue.NewOpts{DB: db, Name: "dl.queue"})
	// A retry first, which is a failure but no dead letter.
	w := q.Start(ctx, queue.WorkerOpts{Handler: func(_ context.Context, m queue.Message) error {
		if m.Attempt == 1 {
			return errors.New("once more")
		}
		return queue.Permanent(errors.New("no"))
	}})
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	for range 2 {
		if _, err := q.Send(ctx, queue.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, 10*time.Second, "two retries", func() bool {
		return count(t, db, `select count(*) from queue_failures where outcome = 'retry'`) == 2
	})
	clock.Advance(time.Minute)
	topic, err := queue.NewTopic(ctx, queue.TopicOpts{DB: db, Name: "dl.topic", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := topic.Subscribe(ctx, queue.SubscribeOpts{Group: "g", Handler: func(context.Context, *sql.Tx, queue.Record) error {
		return queue.Permanent(errors.New("bad record"))
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })
	if _, err := topic.Publish(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	want := []queue.DeadLettered{{Queue: "dl.queue", Count: 2}, {Queue: "dl.topic", Group: "g", Count: 1}}
	var got []queue.DeadLettered
	testwait.Until(t, 10*time.Second, "three dead letters", func() bool {
		return count(t, db, `select count(*) from queue_dead`) == 3
	})
	testwait.Until(t, 10*time.Second, "three dead letters counted", func() bool {
		got, err = admin.DeadLetteredSince(ctx, start)
		return err == nil && slices.Equal(got, want)
	}, func() string { return "got " + fmtDead(got, err) })

	t.Run("a redrive does not take a dead-lettering back", func(t *testing.T) {
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := admin.Redrive(ctx, queue.DeadFilter{Queue: "dl.queue"}); err != nil || n != 2 {
			t.Fatalf("redrive = %d, %v", n, err)
		}
		got, err := admin.DeadLetteredSince(ctx, start)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("after the redrive: %s, want %v", fmtDead(got, err), want)
		}
	})

	t.Run("dead-letterings before since are left out", func(t *testing.T) {
		clock.Advance(time.Hour)
		got, err := admin.DeadLetteredSince(ctx, clock.Now().Add(-15*time.Minute))
		if err != nil || len(got) != 0 {
			t.Fatalf("an hour later, the last 15 minutes: %s, want none", fmtDead(got, err))
		}
	})
}

func fmtDead(d []queue.DeadLettered, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%+v", d)
}
