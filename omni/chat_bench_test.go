package omni

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// BenchmarkChatApply measures the chat role draining a backlog: b.N
// customers' business messages over chatBenchThreads threads of one stored
// business connection, enqueued on receiver.flow as the webhook enqueues
// them, then the chat role started and timed until the ledger holds every
// one (the first message of each thread queues its acknowledgement). The
// baseline, in the same run, is the same backlog on a database of its own
// drained by a handler that does nothing, with the same worker options: the
// queue's own receive and acknowledge. Both at synchronous=FULL; on
// PostgreSQL when SWITCHYARD_TEST_DB names one.
//
//	go test -run '^$' -bench ChatApply -benchtime 20000x -count 3 ./omni/
func BenchmarkChatApply(b *testing.B) {
	var baseline float64
	b.Run("baseline=no-op-handler", func(b *testing.B) {
		db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
		chatBacklog(b, db, b.N)
		var handled atomic.Int64
		flow := queue.New(queue.NewOpts{DB: db, Name: QueueReceiverFlow, Retry: queue.RetryPolicy{MaxAttempts: flowAttempts}})
		b.ResetTimer()
		start := time.Now()
		w := flow.Start(context.Background(), queue.WorkerOpts{
			Handler:     func(context.Context, queue.Message) error { handled.Add(1); return nil },
			Concurrency: chatBenchConcurrency,
		})
		waitDrained(b, db, b.N, func() int { return int(handled.Load()) })
		elapsed := time.Since(start)
		b.StopTimer()
		if err := w.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		baseline = float64(b.N) / elapsed.Seconds()
		b.ReportMetric(baseline, "envelopes/s")
		b.ReportMetric(0, "ns/op")
	})

	b.Run("chat", func(b *testing.B) {
		db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
		chatBacklog(b, db, b.N)
		chat := NewChat(ChatOpts{DB: db, Concurrency: chatBenchConcurrency})
		b.ResetTimer()
		start := time.Now()
		stop := runWorker(b, chat)
		ledger := func() int { return count(b, db, `select count(*) from omni_inbound_events`) - 1 } // less the connection
		waitDrained(b, db, b.N, ledger)
		elapsed := time.Since(start)
		b.StopTimer()
		stop()
		rate := float64(b.N) / elapsed.Seconds()
		b.ReportMetric(rate, "envelopes/s")
		if baseline > 0 {
			b.ReportMetric(rate/baseline, "x-baseline")
		}
		b.ReportMetric(0, "ns/op")
		if n := count(b, db, `select count(*) from omni_messages where direction = 'inbound'`); n != b.N {
			b.Fatalf("%d inbound messages stored, want %d", n, b.N)
		}
		if acks, threads := count(b, db, `select count(*) from omni_messages where origin = 'rule'`), min(b.N, chatBenchThreads); acks != threads {
			b.Fatalf("%d acknowledgements queued, want one for each of the %d threads", acks, threads)
		}
	})
}

// chatBenchThreads is how many threads the backlog spreads over, and
// chatBenchConcurrency the envelopes in hand at once, for the chat role
// (its default) and the baseline alike.
const (
	chatBenchThreads     = 500
	chatBenchConcurrency = 256
)

// chatBacklog stores a business connection and enqueues on receiver.flow n
// customers' messages to it, message i in thread i%chatBenchThreads, as the
// webhook would, a few hundred per transaction.
func chatBacklog(b *testing.B, db *store.DB, n int) {
	b.Helper()
	in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
	now := db.Now()
	const conn = "bc-bench"
	connection := envelopeOf(b, update(1, "business_connection", businessConnection(conn, 900, true, true, t0)), now)
	domain := newChatDomain(db, AutoAckRule{})
	if err := db.Tx(context.Background(), func(tx *sql.Tx) error {
		_, err := domain.applyTx(context.Background(), tx, connection)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	var bodies [][]byte
	for i := range n {
		chat := int64(100_000 + i%chatBenchThreads)
		bodies = append(bodies, update(2+i, "business_message",
			businessMessage(conn, chat, chat, 1+i, fmt.Sprintf("message number %d from a customer: when is my order coming?", i), t0+int64(i))))
	}
	const chunk = 500
	for len(bodies) > 0 {
		part := bodies[:min(chunk, len(bodies))]
		bodies = bodies[len(part):]
		err := db.Tx(context.Background(), func(tx *sql.Tx) error {
			for _, body := range part {
				env, err := NormalizeTelegram(body, inboxBotID, now)
				if err != nil {
					return err
				}
				raw, err := env.Encode()
				if err != nil {
					return err
				}
				if _, err := in.flow.SendTx(context.Background(), tx, queue.Message{Body: raw, Key: env.IdempotencyKey, OrderKey: OrderingKey(env)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// waitDrained waits until done reports every one of the n envelopes
// handled, for a few minutes at most.
func waitDrained(b *testing.B, db *store.DB, n int, done func() int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for done() < n {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d envelopes handled in 5 minutes; %d messages left on %s", done(), n,
				count(b, db, `select count(*) from goqite where queue like ?`, QueueReceiverFlow+"%"), QueueReceiverFlow)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
