package omni

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// lockedLog is a log destination tests can read while workers write.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// chatUpdates are n messages to the bot spread over four customers' chats,
// update_id 1…n, each chat's texts numbered in order.
func chatUpdates(n int) [][]byte {
	out := make([][]byte, n)
	for i := range n {
		customer := int64(900 + i%4)
		out[i] = update(i+1, "message", privateMessage(customer, i+1,
			fmt.Sprintf("chat %d message %03d %s", customer, i, strings.Repeat("x", 300)), t0+int64(i)))
	}
	return out
}

// inboundTexts lists the texts a chat's customer wrote, in thread order.
func inboundTexts(t *testing.T, db *store.DB, chatID string) []string {
	t.Helper()
	rows, err := db.Read.Query(`select m.text from omni_messages m join omni_threads t on t.id = m.thread_id
		where t.chat_id = ? and m.direction = 'inbound' order by m.seq`, chatID)
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

// keyStored reports whether update id is on receiver.flow.
func keyStored(t *testing.T, db *store.DB, updateID int) bool {
	t.Helper()
	return count(t, db, `select count(*) from queue_keys where queue = ? and key = ?`,
		QueueReceiverFlow, fmt.Sprintf("telegram:%d:%d", inboxBotID, updateID)) == 1
}

// checkChatOrder fails unless each customer's thread holds their messages
// once each, in update order, n in all.
func checkChatOrder(t *testing.T, db *store.DB, n int) {
	t.Helper()
	total := 0
	for c := int64(900); c < 904; c++ {
		texts := inboundTexts(t, db, fmt.Sprint(c))
		for i, text := range texts {
			want := fmt.Sprintf("chat %d message %03d", c, int(c-900)+4*i)
			if !strings.HasPrefix(text, want) {
				t.Fatalf("chat %d, position %d: %.30q, want %q — lost, doubled or out of order", c, i, text, want)
			}
		}
		total += len(texts)
	}
	if total != n {
		t.Fatalf("%d messages in the threads, want %d", total, n)
	}
}

func TestFullDatabase(t *testing.T) {
	t.Parallel()
	fast := queue.RetryPolicy{MaxAttempts: 1000, MinBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}

	t.Run("the webhook answers 503 while the database is full and 200 again once there is room, and no update is lost", func(t *testing.T) {
		t.Parallel()
		db, base := newInboundServer(t)
		const n = 24
		updates := chatUpdates(n)
		makeRoom := storetest.FillUp(t, db, false)
		var refused []int
		for i, body := range updates {
			status, answer := postUpdate(t, base, testSecret, body)
			switch status {
			case http.StatusOK:
				if !keyStored(t, db, i+1) {
					t.Fatalf("update %d answered 200 but is not on %s", i+1, QueueReceiverFlow)
				}
			case http.StatusServiceUnavailable:
				if !strings.Contains(answer, `"code":"unavailable"`) {
					t.Fatalf("update %d: 503 without the JSON error: %s", i+1, answer)
				}
				if keyStored(t, db, i+1) {
					t.Fatalf("update %d answered 503 but was stored", i+1)
				}
				refused = append(refused, i)
			default:
				t.Fatalf("update %d: %d %s while the database is full, want 200 or 503", i+1, status, answer)
			}
		}
		if len(refused) < n/2 {
			t.Fatalf("only %d of %d updates refused on a full database", len(refused), n)
		}

		makeRoom()
		for _, i := range refused { // Telegram delivers them again
			if status, answer := postUpdate(t, base, testSecret, updates[i]); status != http.StatusOK {
				t.Fatalf("update %d redelivered with room: %d %s", i+1, status, answer)
			}
		}
		runWorker(t, NewChat(ChatOpts{DB: db, DisableAutoAck: true, PollInterval: 20 * time.Millisecond, Retry: fast}))
		testwait.Until(t, 20*time.Second, "", func() bool { return count(t, db, `select count(*) from omni_messages`) == n }, func() string {
			return fmt.Sprintf("%d of %d messages applied", count(t, db, `select count(*) from omni_messages`), n)
		})
		checkChatOrder(t, db, n)
		t.Logf("%d of %d updates refused with 503 while full, all %d applied once room was back", len(refused), n, n)
	})

	t.Run("the chat role acknowledges no envelope it could not apply, and applies every one once room is back", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		fastClock(t, clock)
		in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
		base := serve(t, in.Routes)
		const n = 24
		for i, body := range chatUpdates(n) {
			if status, answer := postUpdate(t, base, testSecret, body); status != http.StatusOK {
				t.Fatalf("update %d: %d %s", i+1, status, answer)
			}
		}
		makeRoom := storetest.FillUp(t, db, true)
		logs := &lockedLog{}
		// A long acknowledgement makes every first message in a thread
		// write more than consuming its envelope frees.
		runWorker(t, NewChat(ChatOpts{DB: db, AutoAckText: strings.Repeat("Спасибо! ", 400), PollInterval: 20 * time.Millisecond,
			Retry: fast, Logger: slog.New(slog.NewTextHandler(logs, nil))}))
		testwait.Until(t, 20*time.Second, "", func() bool { return strings.Count(logs.String(), "database or disk is full") >= 3 }, func() string {
			return fmt.Sprintf("the chat role never met the full database (%d applied):\n%s",
				count(t, db, `select count(*) from omni_inbound_events`), logs.String())
		})

		// Every envelope is applied or still waits on a receiver queue;
		// none is dead-lettered for want of room.
		applied := count(t, db, `select count(*) from omni_inbound_events`)
		waiting := count(t, db, `select count(*) from goqite where queue like 'receiver.%'`)
		if applied+waiting < n || count(t, db, `select count(*) from queue_dead`) != 0 {
			t.Fatalf("while full: %d applied, %d waiting, %d dead of %d", applied, waiting,
				count(t, db, `select count(*) from queue_dead`), n)
		}

		// Messages whose failure could not be recorded either come back after
		// their visibility timeout (30 s on the fast clock).
		makeRoom()
		testwait.Until(t, 20*time.Second, "", func() bool {
			return count(t, db, `select count(*) from omni_inbound_events`) == n &&
				count(t, db, `select count(*) from goqite where queue like 'receiver.%'`) == 0
		}, func() string {
			return fmt.Sprintf("%d of %d applied, %d waiting\n%s", count(t, db, `select count(*) from omni_inbound_events`), n,
				count(t, db, `select count(*) from goqite where queue like 'receiver.%'`), dumpLanes(t, db))
		})
		checkChatOrder(t, db, n)
		if d := count(t, db, `select count(*) from queue_dead`); d != 0 {
			t.Fatalf("%d envelopes dead-lettered", d)
		}
		if acks := count(t, db, `select count(*) from omni_messages where direction = 'outbound'`); acks != 4 {
			t.Fatalf("%d acknowledgements queued, want one per thread (4)", acks)
		}
		t.Logf("while full: %d of %d applied, the rest waiting; all applied once, in order, after", applied, n)
	})
}

// fastClock runs clock ten times faster than the wall clock until the test
// ends, so that timeouts measured on the store's clock (a delivered
// message's 30 s) pass in a few seconds.
func fastClock(t *testing.T, clock *store.ManualClock) {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				clock.Advance(50 * time.Millisecond)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// dumpLanes describes the receiver lanes' state, for a failure message.
func dumpLanes(t *testing.T, db *store.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`select 'job', queue, id, received, timeout, '' from goqite where queue like 'receiver.%'`,
		`select 'order', queue, message_id, parked, not_before, order_key from queue_order where queue like 'receiver.%'`,
		`select 'parked', lane, message_key, '', '', '' from omni_parked`,
	} {
		rows, err := db.Read.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var a, b2, c, d, e, f any
			if err := rows.Scan(&a, &b2, &c, &d, &e, &f); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%v %v %v %v %v %v\n", a, b2, c, d, e, f)
		}
		rows.Close()
	}
	return b.String()
}
