package omni

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// chatWithInbound runs the chat role on a fresh database and returns a
// function that enqueues updates as the webhook does.
func chatWithInbound(t *testing.T, retry queue.RetryPolicy) (*store.DB, func(body []byte)) {
	t.Helper()
	db := storetest.New(t)
	in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
	runWorker(t, NewChat(ChatOpts{DB: db, DisableAutoAck: true, PollInterval: 20 * time.Millisecond, Retry: retry}))
	return db, func(body []byte) {
		t.Helper()
		if _, err := in.enqueue(context.Background(), envelopeOf(t, body, db.Now())); err != nil {
			t.Fatal(err)
		}
	}
}

// failInserts makes storing a message with this text fail, until undone.
func failInserts(t *testing.T, db *store.DB, text string) (undo func()) {
	t.Helper()
	return failInsertsWhen(t, db, "omni_messages", `new.text = '`+text+`'`, "injected failure", "")
}

func threadTexts(t *testing.T, db *store.DB, chatID string) []string {
	t.Helper()
	rows, err := db.Read.Query(`select m.text from omni_messages m join omni_threads t on t.id = m.thread_id
		where t.chat_id = ? order by m.seq`, chatID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestReceiverLanes(t *testing.T) {
	t.Parallel()

	t.Run("a failing envelope moves to receiver.retry with its thread's later ones behind it, while other threads flow", func(t *testing.T) {
		t.Parallel()
		db, enqueue := chatWithInbound(t, queue.RetryPolicy{MaxAttempts: 1000, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
		undo := failInserts(t, db, "first")
		enqueue(update(1, "message", privateMessage(42, 1, "first", t0)))
		enqueue(update(2, "message", privateMessage(42, 2, "second", t0+1)))
		enqueue(update(3, "message", privateMessage(43, 1, "elsewhere", t0+1)))
		enqueue(update(4, "message", privateMessage(42, 3, "third", t0+2)))

		testwait.Until(t, 10*time.Second, "", func() bool {
			return len(threadTexts(t, db, "43")) == 1 && count(t, db, `select count(*) from omni_parked where lane = 'receiver'`) == 3
		}, func() string {
			return fmt.Sprintf("thread 43 %v, parked %d", threadTexts(t, db, "43"),
				count(t, db, `select count(*) from omni_parked where lane = 'receiver'`))
		})
		if got := threadTexts(t, db, "42"); len(got) != 0 {
			t.Fatalf("thread 42 = %v while its first envelope fails, want nothing applied out of order", got)
		}
		undo()
		testwait.Until(t, 10*time.Second, "", func() bool { return len(threadTexts(t, db, "42")) == 3 }, func() string { return fmt.Sprintf("thread 42 = %v", threadTexts(t, db, "42")) })
		if got := strings.Join(threadTexts(t, db, "42"), ","); got != "first,second,third" {
			t.Errorf("thread 42 = %s, want first,second,third", got)
		}
		testwait.Until(t, 5*time.Second, "", func() bool { return count(t, db, `select count(*) from omni_parked`) == 0 }, func() string { return "the thread stayed parked" })
	})

	t.Run("an envelope that never applies ends in receiver.dlq and releases its thread", func(t *testing.T) {
		t.Parallel()
		db, enqueue := chatWithInbound(t, queue.RetryPolicy{MaxAttempts: 3, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
		failInserts(t, db, "poison")
		enqueue(update(1, "message", privateMessage(42, 1, "poison", t0)))
		enqueue(update(2, "message", privateMessage(42, 2, "after", t0+1)))
		testwait.Until(t, 10*time.Second, "", func() bool { return len(threadTexts(t, db, "42")) == 1 }, func() string { return fmt.Sprintf("thread 42 = %v", threadTexts(t, db, "42")) })
		if got := threadTexts(t, db, "42"); got[0] != "after" {
			t.Errorf("thread 42 = %v, want the envelope after the poison one", got)
		}
		dead, err := queue.NewAdmin(queue.AdminOpts{DB: db}).ListDead(context.Background(), queue.DeadFilter{Queue: QueueReceiverRetry})
		if err != nil {
			t.Fatal(err)
		}
		if len(dead) != 1 || !strings.Contains(string(dead[0].Body), "poison") || !strings.Contains(dead[0].LastError, "injected failure") {
			t.Errorf("dead letters = %+v, want the poison envelope with its error", dead)
		}
	})
}

// TestReceiverBatch: the chat role applies a receive's envelopes in one
// transaction, each in its own savepoint.
func TestReceiverBatch(t *testing.T) {
	t.Parallel()

	t.Run("a failing envelope is rolled back alone: its neighbours in the batch are applied once and not retried, it moves to receiver.retry", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
		failInserts(t, db, "poison")
		const n, poisoned = 20, 7
		for i := range n {
			text := fmt.Sprintf("hello %d", i)
			if i == poisoned {
				text = "poison"
			}
			if _, err := in.enqueue(context.Background(), envelopeOf(t, update(1+i, "message", privateMessage(int64(500+i), 1, text, t0)), db.Now())); err != nil {
				t.Fatal(err)
			}
		}
		// Started once all are enqueued, so that one receive takes them all.
		runWorker(t, NewChat(ChatOpts{DB: db, AutoAckText: "got it", PollInterval: 20 * time.Millisecond,
			Retry: queue.RetryPolicy{MaxAttempts: 2, MinBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}}))
		testwait.Until(t, 10*time.Second, "", func() bool {
			return count(t, db, `select count(*) from omni_inbound_events`) == n-1 && count(t, db, `select count(*) from queue_dead where queue = ?`, QueueReceiverRetry) == 1
		}, func() string { return dumpLanes(t, db) })

		for i := range n {
			got := threadTexts(t, db, fmt.Sprint(500+i))
			if i == poisoned {
				if len(got) != 0 || count(t, db, `select count(*) from omni_contacts where provider_user_id = ?`, fmt.Sprint(500+i)) != 0 {
					t.Errorf("the failing envelope's chat has %v and a contact: its writes were not rolled back", got)
				}
				continue
			}
			if want := []string{fmt.Sprintf("hello %d", i), "got it"}; !slices.Equal(got, want) {
				t.Errorf("chat %d = %v, want %v", 500+i, got, want)
			}
		}
		if f := count(t, db, `select count(*) from queue_failures where queue = ?`, QueueReceiverFlow); f != 0 {
			t.Errorf("%d failures recorded on %s: the failing envelope's neighbours were retried with it", f, QueueReceiverFlow)
		}
		if c := count(t, db, `select count(*) from goqite where queue = ?`, QueueSenderFlow); c != n-1 {
			t.Errorf("%d commands on %s, want the %d acknowledgements of the applied envelopes", c, QueueSenderFlow, n-1)
		}
		if p := count(t, db, `select count(*) from omni_parked`); p != 0 {
			t.Errorf("%d threads still parked after the dead letter", p)
		}
	})
}

// TestLaneMovesCountedOnceCommitted: a move into the retry lane is counted
// when its transaction commits, not for a transaction rolled back (or run
// again by Tx on PostgreSQL).
func TestLaneMovesCountedOnceCommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	name := fmt.Sprintf("test-lane-%d", time.Now().UnixNano())
	l := newLane(db, name, QueueReceiverFlow, QueueReceiverRetry, queue.RetryPolicy{}, nil)
	moves := func() float64 {
		families, err := prometheus.DefaultGatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if f.GetName() == "switchyard_omni_lane_moves_total" && l.GetName() == "lane" && l.GetValue() == name {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	errRolledBack := errors.New("rolled back")
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		if err := l.escalateTx(ctx, tx, []byte(`{}`), "message-1", "chat-1", 0); err != nil {
			return err
		}
		return errRolledBack
	})
	if !errors.Is(err, errRolledBack) {
		t.Fatalf("Tx = %v", err)
	}
	if n := moves(); n != 0 {
		t.Fatalf("%v moves counted for a rolled back transaction, want 0", n)
	}
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return l.escalateTx(ctx, tx, []byte(`{}`), "message-1", "chat-1", 0) }); err != nil {
		t.Fatal(err)
	}
	if n := moves(); n != 1 {
		t.Fatalf("%v moves counted after the commit, want 1", n)
	}
}
