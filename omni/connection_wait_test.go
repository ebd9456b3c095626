package omni

import (
	"context"
	"fmt"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// A business message and its business_connection update have different
// ordering keys (OrderingKey), so the chat role may take the message first.
// Applied then, it would find no connection: no acknowledgement, and the
// owner's own message taken for the customer's. It waits for the connection
// instead, for connectionWait at most.
func TestBusinessMessageWaitsForItsConnection(t *testing.T) {
	t.Parallel()

	// chatOn runs the chat role with the acknowledgement on, over db, and
	// returns a function that enqueues updates as the webhook does.
	chatOn := func(t *testing.T, db *store.DB) func(body []byte) {
		t.Helper()
		in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
		runWorker(t, NewChat(ChatOpts{DB: db, AutoAckText: "thanks, we are on it", PollInterval: 20 * time.Millisecond}))
		return func(body []byte) {
			t.Helper()
			if _, err := in.enqueue(context.Background(), envelopeOf(t, body, db.Now())); err != nil {
				t.Fatal(err)
			}
		}
	}
	// tried reports whether the chat role has handled the flow's messages
	// once: each either waits (a retry is scheduled) or was applied.
	tried := func(t *testing.T, db *store.DB, n int) bool {
		return count(t, db, `select count(*) from queue_retries where queue = ?`, QueueReceiverFlow)+
			count(t, db, `select count(*) from omni_messages`) >= n
	}
	type stored struct {
		direction Direction
		origin    Origin
		status    Status
		text      string
	}
	messagesOf := func(t *testing.T, db *store.DB, chatID string) []stored {
		t.Helper()
		rows, err := db.Read.Query(`select m.direction, m.origin, m.status, m.text from omni_messages m
			join omni_threads t on t.id = m.thread_id where t.chat_id = ? order by m.seq`, chatID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []stored
		for rows.Next() {
			var s stored
			if err := rows.Scan(&s.direction, &s.origin, &s.status, &s.text); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	nothingStuck := func(t *testing.T, db *store.DB) {
		t.Helper()
		if n := count(t, db, `select count(*) from queue_dead`); n != 0 {
			t.Errorf("%d dead letters, want none", n)
		}
		if n := count(t, db, `select count(*) from omni_parked`); n != 0 {
			t.Errorf("%d parked threads, want none", n)
		}
	}

	t.Run("a customer's first message applied before its connection is acknowledged once the connection is in", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		enqueue := chatOn(t, db)
		enqueue(update(1, "business_message", businessMessage("bc-late", 3001, 3001, 10, "do you deliver?", t0+5)))
		enqueue(update(2, "business_message", businessMessage("bc-late", 900, 3002, 11, "the owner writes first", t0+6)))
		testwait.Until(t, 10*time.Second, "", func() bool { return tried(t, db, 2) },
			func() string { return "the chat role never took the business messages" })
		enqueue(update(3, "business_connection", businessConnection("bc-late", 900, true, true, t0)))

		testwait.Until(t, 10*time.Second, "", func() bool {
			return len(messagesOf(t, db, "3001")) == 2 && len(messagesOf(t, db, "3002")) == 1
		}, func() string {
			return fmt.Sprintf("customer thread %+v, owner's thread %+v", messagesOf(t, db, "3001"), messagesOf(t, db, "3002"))
		})
		got := messagesOf(t, db, "3001")
		if want := (stored{DirectionInbound, OriginProvider, StatusReceived, "do you deliver?"}); got[0] != want {
			t.Errorf("the customer's message = %+v, want %+v", got[0], want)
		}
		if want := (stored{DirectionOutbound, OriginRule, StatusQueued, "thanks, we are on it"}); got[1] != want {
			t.Errorf("after the customer's message: %+v, want the acknowledgement %+v", got[1], want)
		}
		if got := messagesOf(t, db, "3002")[0]; got.direction != DirectionOutbound || got.status != StatusSent {
			t.Errorf("the owner's own message = %+v, want outbound and sent", got)
		}
		if n := count(t, db, `select count(*) from goqite where queue = ?`, QueueSenderFlow); n != 1 {
			t.Errorf("%d commands on %s, want the one acknowledgement", n, QueueSenderFlow)
		}
		nothingStuck(t, db)
	})

	t.Run("a message waiting for its connection goes once the connection is applied, not at its next look", func(t *testing.T) {
		t.Parallel()
		// The clock stands still: the message's next look never comes, so
		// only the connection's arrival can move it.
		db, _ := storetest.NewWithClock(t)
		enqueue := chatOn(t, db)
		enqueue(update(1, "business_message", businessMessage("bc-wake", 3001, 3001, 10, "hello?", t0)))
		testwait.Until(t, 10*time.Second, "", func() bool { return tried(t, db, 1) },
			func() string { return "the chat role never took the business message" })
		enqueue(update(2, "business_connection", businessConnection("bc-wake", 900, true, true, t0)))
		testwait.Until(t, 10*time.Second, "", func() bool { return len(messagesOf(t, db, "3001")) == 2 },
			func() string { return fmt.Sprintf("thread %+v", messagesOf(t, db, "3001")) })
		nothingStuck(t, db)
	})

	t.Run("a connection taken in one batch with its first message is applied before it", func(t *testing.T) {
		t.Parallel()
		// Both wait before the chat role starts, so that one receive takes
		// them, the message first; the clock stands still, so a message
		// that waited would wait for good.
		db, _ := storetest.NewWithClock(t)
		in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
		for _, body := range [][]byte{
			update(1, "business_message", businessMessage("bc-batch", 3001, 3001, 10, "hello?", t0)),
			update(2, "business_connection", businessConnection("bc-batch", 900, true, true, t0)),
		} {
			if _, err := in.enqueue(context.Background(), envelopeOf(t, body, db.Now())); err != nil {
				t.Fatal(err)
			}
		}
		runWorker(t, NewChat(ChatOpts{DB: db, AutoAckText: "thanks, we are on it", PollInterval: 20 * time.Millisecond}))
		testwait.Until(t, 10*time.Second, "", func() bool { return len(messagesOf(t, db, "3001")) == 2 },
			func() string { return fmt.Sprintf("thread %+v", messagesOf(t, db, "3001")) })
		if n := count(t, db, `select count(*) from queue_failures where queue = ?`, QueueReceiverFlow); n != 0 {
			t.Errorf("%d failed attempts on %s, want none: the message waited", n, QueueReceiverFlow)
		}
		nothingStuck(t, db)
	})

	t.Run("the thread's later messages wait behind the first, in order", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		enqueue := chatOn(t, db)
		for i, text := range []string{"one", "two", "three"} {
			enqueue(update(1+i, "business_message", businessMessage("bc-order", 3001, 3001, 10+i, text, t0+int64(i))))
		}
		testwait.Until(t, 10*time.Second, "", func() bool { return tried(t, db, 1) },
			func() string { return "the chat role never took the first business message" })
		enqueue(update(9, "business_connection", businessConnection("bc-order", 900, true, true, t0)))
		testwait.Until(t, 10*time.Second, "", func() bool { return len(messagesOf(t, db, "3001")) == 4 },
			func() string { return fmt.Sprintf("thread %+v", messagesOf(t, db, "3001")) })
		var texts []string
		for _, m := range messagesOf(t, db, "3001") {
			texts = append(texts, m.text)
		}
		if got, want := fmt.Sprint(texts), "[one thanks, we are on it two three]"; got != want {
			t.Errorf("thread = %s, want %s", got, want)
		}
		nothingStuck(t, db)
	})

	t.Run("a message whose connection never comes is applied without it once it is older than the wait", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		enqueue := chatOn(t, db)
		enqueue(update(1, "business_message", businessMessage("bc-never", 3001, 3001, 10, "anyone there?", t0)))
		testwait.Until(t, 10*time.Second, "", func() bool { return tried(t, db, 1) },
			func() string { return "the chat role never took the business message" })
		if n := count(t, db, `select count(*) from omni_messages`); n != 0 {
			t.Fatalf("%d messages stored at once, want the message waiting for its connection", n)
		}
		clock.Advance(connectionWait + time.Second)
		testwait.Until(t, 10*time.Second, "", func() bool { return len(messagesOf(t, db, "3001")) == 1 },
			func() string { return fmt.Sprintf("thread %+v", messagesOf(t, db, "3001")) })
		if got, want := messagesOf(t, db, "3001")[0], (stored{DirectionInbound, OriginProvider, StatusReceived, "anyone there?"}); got != want {
			t.Errorf("message = %+v, want %+v (no connection: inbound, no acknowledgement)", got, want)
		}
		nothingStuck(t, db)
	})
}
