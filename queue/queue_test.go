package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// start starts a worker and stops it when the test ends.
func start(t testing.TB, q *queue.Queue, opts queue.WorkerOpts) *queue.Worker {
	t.Helper()
	w := q.Start(context.Background(), opts)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

func count(t testing.TB, db *store.DB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Read.QueryRow(query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func liveMessages(t testing.TB, db *store.DB, name string) int {
	t.Helper()
	return count(t, db, `select count(*) from goqite where queue in (?, ?)`, name, name+"~held")
}

func TestSend(t *testing.T) {
	t.Parallel()

	t.Run("eight concurrent senders of one key send exactly one message", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "receiver.flow"})
		var (
			wg      sync.WaitGroup
			results = make([]queue.SendResult, 8)
			errs    = make([]error, 8)
			begin   = make(chan struct{})
		)
		for i := range 8 {
			wg.Go(func() {
				<-begin
				results[i], errs[i] = q.Send(context.Background(), queue.Message{Body: []byte(fmt.Sprint(i)), Key: "tg:update:42"})
			})
		}
		close(begin)
		wg.Wait()
		fresh := 0
		for i := range 8 {
			if errs[i] != nil {
				t.Fatalf("sender %d: %v", i, errs[i])
			}
			if !results[i].Duplicate {
				fresh++
			}
			if results[i].ID != results[0].ID {
				t.Errorf("sender %d got id %s, sender 0 got %s: every duplicate must name the first message", i, results[i].ID, results[0].ID)
			}
		}
		if fresh != 1 {
			t.Errorf("%d sends reported a new message, want exactly 1", fresh)
		}
		if n := liveMessages(t, db, "receiver.flow"); n != 1 {
			t.Errorf("queue holds %d messages, want 1", n)
		}
	})

	t.Run("the same key on another queue is a different message", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		a := queue.New(queue.NewOpts{DB: db, Name: "a"})
		b := queue.New(queue.NewOpts{DB: db, Name: "b"})
		ra, err := a.Send(t.Context(), queue.Message{Body: []byte("x"), Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		rb, err := b.Send(t.Context(), queue.Message{Body: []byte("x"), Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if ra.Duplicate || rb.Duplicate || ra.ID == rb.ID {
			t.Errorf("sends to two queues with one key: %+v and %+v; want two new messages", ra, rb)
		}
	})

	t.Run("a send in a rolled-back transaction leaves neither message nor key", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		boom := errors.New("the caller's own write failed")
		err := db.Tx(t.Context(), func(tx *sql.Tx) error {
			if _, err := q.SendTx(t.Context(), tx, queue.Message{Body: []byte("x"), Key: "k"}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Tx returned %v, want the caller's error", err)
		}
		if n := liveMessages(t, db, "q"); n != 0 {
			t.Fatalf("rolled-back send left %d messages", n)
		}
		res, err := q.Send(t.Context(), queue.Message{Body: []byte("x"), Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Duplicate {
			t.Error("the key of a rolled-back send suppressed a later send")
		}
	})

	t.Run("a negative delay is refused", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("x"), Delay: -time.Second}); err == nil {
			t.Error("negative delay accepted")
		}
	})
}

func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("a send in this process wakes an idle worker without polling", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		got := make(chan queue.Message, 1)
		start(t, q, queue.WorkerOpts{PollInterval: time.Hour, Handler: func(ctx context.Context, m queue.Message) error {
			got <- m
			return nil
		}})
		// The worker's first receive finds nothing; from then on only the
		// wake-up can bring the message within the hour-long poll.
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("hello")})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m.ID != sent.ID || string(m.Body) != "hello" || m.Attempt != 1 || m.SentAt.IsZero() {
				t.Errorf("handler got %+v, want the sent message on attempt 1", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the worker did not wake up for a send")
		}
		testwait.Until(t, 5*time.Second, "the message acknowledged", func() bool { return liveMessages(t, db, "q") == 0 })
	})

	t.Run("a delayed message is not delivered before its delay", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var at atomic.Value
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			at.Store(db.Now())
			return nil
		}})
		t0 := db.Now()
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("later"), Delay: time.Minute}); err != nil {
			t.Fatal(err)
		}
		msgs, err := admin.ListMessages(t.Context(), queue.MessageFilter{Queue: "q", State: queue.StateDelayed})
		if err != nil || len(msgs) != 1 || !msgs[0].VisibleAt.Equal(t0.Add(time.Minute)) {
			t.Fatalf("delayed messages: %+v, %v; want one visible at %s", msgs, err, t0.Add(time.Minute))
		}
		clock.Advance(time.Minute)
		testwait.Until(t, 5*time.Second, "the delayed message handled", func() bool { return at.Load() != nil })
		if got := at.Load().(time.Time); got.Before(t0.Add(time.Minute)) {
			t.Errorf("handled at %s, before its delay ended at %s", got, t0.Add(time.Minute))
		}
	})

	t.Run("a handler whose process dies gets its message back after the timeout", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Timeout: 30 * time.Second})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		started := make(chan queue.Message, 1)
		w := q.Start(context.Background(), queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			started <- m
			<-ctx.Done() // never finishes on its own
			return ctx.Err()
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("job")})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("message not delivered")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := w.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop = %v, want the deadline: the handler never finished", err)
		}

		again := make(chan queue.Message, 1)
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			again <- m
			return nil
		}})
		clock.Advance(29 * time.Second)
		msgs, err := admin.ListMessages(t.Context(), queue.MessageFilter{Queue: "q"})
		if err != nil || len(msgs) != 1 || msgs[0].State != queue.StateInFlight {
			t.Fatalf("before the timeout: %+v, %v; want the message still in flight", msgs, err)
		}
		clock.Advance(2 * time.Second)
		select {
		case m := <-again:
			if m.ID != sent.ID || m.Attempt != 2 {
				t.Errorf("redelivered %s attempt %d, want %s attempt 2", m.ID, m.Attempt, sent.ID)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the abandoned message did not come back after its timeout")
		}
		testwait.Until(t, 5*time.Second, "the redelivered message acknowledged", func() bool { return liveMessages(t, db, "q") == 0 })
	})

	t.Run("a graceful stop lets running handlers finish and acknowledges them", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		release := make(chan struct{})
		var running atomic.Int32
		w := q.Start(context.Background(), queue.WorkerOpts{Concurrency: 3, Handler: func(ctx context.Context, m queue.Message) error {
			running.Add(1)
			<-release
			return nil
		}})
		for i := range 3 {
			if _, err := q.Send(t.Context(), queue.Message{Body: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 5*time.Second, "three handlers running", func() bool { return running.Load() == 3 })
		stopped := make(chan error, 1)
		go func() { stopped <- w.Stop(context.Background()) }()
		close(release)
		if err := <-stopped; err != nil {
			t.Fatalf("Stop = %v", err)
		}
		if n := liveMessages(t, db, "q"); n != 0 {
			t.Errorf("%d messages left after a graceful stop, want 0", n)
		}
	})

	t.Run("concurrency bounds the handlers running at once", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		var now, peak, done atomic.Int32
		start(t, q, queue.WorkerOpts{Concurrency: 3, Handler: func(ctx context.Context, m queue.Message) error {
			n := now.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(time.Millisecond) // hold the slot so others would overlap
			now.Add(-1)
			done.Add(1)
			return nil
		}})
		for i := range 30 {
			if _, err := q.Send(t.Context(), queue.Message{Body: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 10*time.Second, "30 messages handled", func() bool { return done.Load() == 30 })
		if p := peak.Load(); p > 3 {
			t.Errorf("%d handlers ran at once, want at most 3", p)
		}
	})

	t.Run("a handler that acknowledges in its own transaction takes effect once", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		mustExec(t, db, `create table effects (id text primary key)`)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		var calls atomic.Int32
		start(t, q, queue.WorkerOpts{Handler: func(ctx context.Context, m queue.Message) error {
			calls.Add(1)
			return db.Tx(ctx, func(tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, `insert into effects (id) values (?)`, string(m.ID)); err != nil {
					return err
				}
				return q.AckTx(ctx, tx, m)
			})
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "the message acknowledged", func() bool { return liveMessages(t, db, "q") == 0 })
		if n := count(t, db, `select count(*) from effects where id = ?`, string(sent.ID)); n != 1 {
			t.Errorf("%d effects, want 1", n)
		}
		// A second acknowledgement of the same delivery is refused, so a
		// duplicate delivery's transaction would roll back.
		err = db.Tx(t.Context(), func(tx *sql.Tx) error {
			return q.AckTx(t.Context(), tx, queue.Message{ID: sent.ID, Attempt: 1})
		})
		if !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("second AckTx = %v, want ErrNotFound", err)
		}
	})

	t.Run("a panicking handler is retried, not fatal", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: queue.RetryPolicy{MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
		var calls atomic.Int32
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			if calls.Add(1) == 1 {
				panic("boom")
			}
			return nil
		}})
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "handled on the second attempt", func() bool { return liveMessages(t, db, "q") == 0 })
		if n := count(t, db, `select count(*) from queue_failures where queue = 'q' and error like '%panicked: boom%'`); n != 1 {
			t.Errorf("%d failure records of the panic, want 1", n)
		}
	})
}

func mustExec(t testing.TB, db *store.DB, query string) {
	t.Helper()
	if err := db.Tx(context.Background(), func(tx *sql.Tx) error {
		_, err := tx.Exec(query)
		return err
	}); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func TestDeadLetters(t *testing.T) {
	t.Parallel()

	t.Run("an error marked permanent twice reads its class once", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "sender.flow"})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		start(t, q, queue.WorkerOpts{Handler: func(ctx context.Context, m queue.Message) error {
			// A lower layer gave up already; the handler says so again.
			return queue.Permanent(queue.Permanent(errors.New("chat not found")))
		}})
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte(`{"chat":1}`)}); err != nil {
			t.Fatal(err)
		}
		var dead []queue.DeadLetter
		testwait.Until(t, 5*time.Second, "a dead letter", func() bool {
			var err error
			dead, err = admin.ListDead(t.Context(), queue.DeadFilter{Queue: "sender.flow"})
			return err == nil && len(dead) == 1
		})
		if got, want := dead[0].LastError, "permanent: chat not found"; got != want {
			t.Errorf("last error %q, want %q", got, want)
		}
	})

	t.Run("a permanent error dead-letters on the first attempt", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "sender.flow"})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		start(t, q, queue.WorkerOpts{Handler: func(ctx context.Context, m queue.Message) error {
			return queue.Permanent(errors.New("chat not found"))
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte(`{"chat":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		var dead []queue.DeadLetter
		testwait.Until(t, 5*time.Second, "a dead letter", func() bool {
			dead, err = admin.ListDead(t.Context(), queue.DeadFilter{Queue: "sender.flow"})
			return err == nil && len(dead) == 1
		})
		d := dead[0]
		if d.ID != string(sent.ID) || d.Attempts != 1 || !strings.Contains(d.LastError, "chat not found") ||
			string(d.Body) != `{"chat":1}` || d.CreatedAt.IsZero() || d.FirstFailedAt.IsZero() || d.DeadAt.IsZero() {
			t.Errorf("dead letter %+v: want the message, 1 attempt, its error and its times", d)
		}
		if n := liveMessages(t, db, "sender.flow"); n != 0 {
			t.Errorf("%d live messages after dead-lettering, want 0", n)
		}
		if n := count(t, db, `select count(*) from queue_failures where message_id = ? and outcome = 'dead' and attempt = 1`, string(sent.ID)); n != 1 {
			t.Errorf("%d failure records, want 1", n)
		}
	})

	t.Run("a retryable error dead-letters after the maximum attempts, each failure recorded", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: queue.RetryPolicy{MaxAttempts: 4, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var calls atomic.Int32
		start(t, q, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			calls.Add(1)
			return fmt.Errorf("provider 500 on attempt %d", m.Attempt)
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		var dead []queue.DeadLetter
		testwait.Until(t, 5*time.Second, "a dead letter", func() bool {
			dead, err = admin.ListDead(t.Context(), queue.DeadFilter{Queue: "q"})
			return err == nil && len(dead) == 1
		})
		if dead[0].Attempts != 4 || !strings.Contains(dead[0].LastError, "attempt 4") || calls.Load() != 4 {
			t.Errorf("dead after %d attempts (%d calls), last error %q; want 4 attempts and the 4th error", dead[0].Attempts, calls.Load(), dead[0].LastError)
		}
		if !dead[0].FirstFailedAt.Before(dead[0].DeadAt) {
			t.Errorf("first failure %s not before death %s", dead[0].FirstFailedAt, dead[0].DeadAt)
		}
		if n := count(t, db, `select count(*) from queue_failures where message_id = ?`, string(sent.ID)); n != 4 {
			t.Errorf("%d failure records, want 4 (3 retries and the dead letter)", n)
		}
	})

	t.Run("redrive brings a dead letter back under its own id with attempts reset", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q"})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var fixed atomic.Bool
		handled := make(chan queue.Message, 1)
		start(t, q, queue.WorkerOpts{Handler: func(ctx context.Context, m queue.Message) error {
			if !fixed.Load() {
				return queue.Permanent(errors.New("bad payload"))
			}
			handled <- m
			return nil
		}})
		sent, err := q.Send(t.Context(), queue.Message{Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "a dead letter", func() bool {
			d, _ := admin.ListDead(t.Context(), queue.DeadFilter{Queue: "q"})
			return len(d) == 1
		})
		if _, err := admin.Redrive(t.Context(), queue.DeadFilter{Queue: "q", ID: "m_nope"}); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("redrive of an unknown id = %v, want ErrNotFound", err)
		}
		fixed.Store(true)
		n, err := admin.Redrive(t.Context(), queue.DeadFilter{Queue: "q", ID: string(sent.ID)})
		if err != nil || n != 1 {
			t.Fatalf("Redrive = %d, %v; want 1", n, err)
		}
		select {
		case m := <-handled:
			if m.ID != sent.ID || m.Attempt != 1 {
				t.Errorf("redriven message %s attempt %d, want %s attempt 1", m.ID, m.Attempt, sent.ID)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("redriven message not handled")
		}
		if d, _ := admin.ListDead(t.Context(), queue.DeadFilter{Queue: "q"}); len(d) != 0 {
			t.Errorf("%d dead letters after redrive, want 0", len(d))
		}
	})

	t.Run("a retry-after error is not retried before its delay", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "sender.flow"})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		var (
			mu    sync.Mutex
			calls []time.Time
		)
		start(t, q, queue.WorkerOpts{PollInterval: 2 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
			mu.Lock()
			calls = append(calls, db.Now())
			mu.Unlock()
			if m.Attempt == 1 {
				return queue.RetryAfter(10*time.Second, errors.New("429 Too Many Requests"))
			}
			return nil
		}})
		t0 := db.Now()
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		var msgs []queue.MessageInfo
		testwait.Until(t, 5*time.Second, "the message waiting for its retry", func() bool {
			msgs, _ = admin.ListMessages(t.Context(), queue.MessageFilter{Queue: "sender.flow", State: queue.StateDelayed})
			return len(msgs) == 1
		})
		if !msgs[0].VisibleAt.Equal(t0.Add(10*time.Second)) || !strings.Contains(msgs[0].LastError, "429") {
			t.Errorf("waiting message %+v: want visible at %s with the 429 as last error", msgs[0], t0.Add(10*time.Second))
		}
		clock.Advance(10*time.Second - time.Millisecond)
		msgs, _ = admin.ListMessages(t.Context(), queue.MessageFilter{Queue: "sender.flow", State: queue.StateDelayed})
		if len(msgs) != 1 {
			t.Fatalf("1 ms before the delay the message is not waiting any more: %+v", msgs)
		}
		clock.Advance(time.Millisecond)
		testwait.Until(t, 5*time.Second, "the retry", func() bool { return liveMessages(t, db, "sender.flow") == 0 })
		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 2 || calls[1].Sub(calls[0]) < 10*time.Second {
			t.Errorf("attempts at %v: want two, 10 s apart", calls)
		}
	})

	t.Run("a message delivered the maximum times without a result is dead-lettered", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Timeout: time.Second, Retry: queue.RetryPolicy{MaxAttempts: 1}})
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		started := make(chan struct{}, 1)
		w := q.Start(context.Background(), queue.WorkerOpts{Handler: func(ctx context.Context, m queue.Message) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}})
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		_ = w.Stop(ctx)
		clock.Advance(2 * time.Second)
		start(t, q, queue.WorkerOpts{Handler: func(ctx context.Context, m queue.Message) error {
			t.Error("an exhausted message was delivered again")
			return nil
		}}) // sweeps at start
		testwait.Until(t, 5*time.Second, "the exhausted message dead-lettered", func() bool {
			d, _ := admin.ListDead(t.Context(), queue.DeadFilter{Queue: "q"})
			return len(d) == 1 && strings.Contains(d[0].LastError, "without a result")
		})
	})
}

// TestOrderKeys is the model test of per-key order on queues: 10 keys × 60
// messages, 4 workers, 30% random retryable failures, and one key stuck in
// retry that must not delay the others. (The acceptance scale, 20 × 200, runs
// on topics in TestTopicOrder; a queue's order key costs a receive and an
// acknowledgement per message, which -race makes slow at that scale.)
func TestOrderKeys(t *testing.T) {
	t.Parallel()
	const (
		keys     = 10
		perKey   = 60
		stuckKey = "chat-00"
	)
	db := storetest.New(t)
	q := queue.New(queue.NewOpts{DB: db, Name: "sender.flow",
		Retry: queue.RetryPolicy{MaxAttempts: 100000, MinBackoff: time.Millisecond, MaxBackoff: 3 * time.Millisecond}})
	var (
		mu      sync.Mutex
		handled = map[string][]int{}
		stuck   atomic.Bool
		failed  atomic.Int64
	)
	stuck.Store(true)
	handler := func(ctx context.Context, m queue.Message) error {
		var key string
		var seq int
		if _, err := fmt.Sscanf(string(m.Body), "%s %d", &key, &seq); err != nil {
			return queue.Permanent(err)
		}
		if key != m.OrderKey {
			return queue.Permanent(fmt.Errorf("order key %q, body key %q", m.OrderKey, key))
		}
		if key == stuckKey && stuck.Load() {
			return queue.RetryAfter(50*time.Millisecond, errors.New("stuck"))
		}
		if rand.N(10) < 3 {
			failed.Add(1)
			return errors.New("flaky provider")
		}
		mu.Lock()
		handled[key] = append(handled[key], seq)
		mu.Unlock()
		return nil
	}
	for range 4 {
		start(t, q, queue.WorkerOpts{Concurrency: 2, PollInterval: 100 * time.Millisecond, Handler: handler})
	}
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("chat-%02d", k)
		wg.Go(func() {
			for i := range perKey {
				if _, err := q.Send(context.Background(), queue.Message{Body: fmt.Appendf(nil, "%s %d", key, i), OrderKey: key}); err != nil {
					t.Errorf("send %s %d: %v", key, i, err)
					return
				}
			}
		})
	}
	wg.Wait()

	othersDone := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := 1; k < keys; k++ {
			if len(handled[fmt.Sprintf("chat-%02d", k)]) < perKey {
				return false
			}
		}
		return true
	}
	testwait.Until(t, 60*time.Second, "every key but the stuck one handled", othersDone)
	mu.Lock()
	if n := len(handled[stuckKey]); n != 0 {
		t.Errorf("the stuck key had %d messages handled past its stuck head", n)
	}
	mu.Unlock()

	stuck.Store(false)
	testwait.Until(t, 60*time.Second, "the stuck key handled once released", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled[stuckKey]) >= perKey
	})
	testwait.Until(t, 5*time.Second, "the queue empty", func() bool { return liveMessages(t, db, "sender.flow") == 0 })
	mu.Lock()
	defer mu.Unlock()
	for key, seqs := range handled {
		if len(seqs) != perKey {
			t.Errorf("%s: %d messages took effect, want %d (exactly once each)", key, len(seqs), perKey)
		}
		for i, s := range seqs {
			if s != i {
				t.Errorf("%s: position %d handled message %d: out of send order", key, i, s)
				break
			}
		}
	}
	if failed.Load() == 0 {
		t.Error("no random failures happened; the test proves nothing about retries")
	}
}

func TestOrderKeyRedrive(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	q := queue.New(queue.NewOpts{DB: db, Name: "q"})
	admin := queue.NewAdmin(queue.AdminOpts{DB: db})
	var (
		mu    sync.Mutex
		order []string
		fail  = map[string]bool{"a1": true}
	)
	start(t, q, queue.WorkerOpts{Handler: func(ctx context.Context, m queue.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if fail[string(m.Body)] {
			return queue.Permanent(errors.New("bad"))
		}
		order = append(order, string(m.Body))
		return nil
	}})
	for _, b := range []string{"a1", "a2", "a3"} {
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte(b), OrderKey: "a"}); err != nil {
			t.Fatal(err)
		}
	}
	// a1 dies; its key is released, so a2 and a3 go on.
	testwait.Until(t, 5*time.Second, "a2 and a3 handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 2
	})
	mu.Lock()
	delete(fail, "a1")
	mu.Unlock()
	if n, err := admin.Redrive(t.Context(), queue.DeadFilter{Queue: "q"}); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	testwait.Until(t, 5*time.Second, "a1 handled after redrive", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "a2,a3,a1" {
		t.Errorf("handled %v; want a2,a3 (released by the dead letter) then the redriven a1", order)
	}
}

func TestRetryTiming(t *testing.T) {
	t.Parallel()
	// A poll interval far longer than any delay below: a worker that misses
	// the moment a retry becomes visible waits for the poll, which the
	// bounds below tell apart from a timely wake-up even on a loaded machine.
	const poll = 10 * time.Second

	t.Run("fifty retries with a 1 ms delay take milliseconds each, not a poll interval", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: queue.RetryPolicy{MaxAttempts: 100}})
		done := make(chan time.Time, 1)
		start(t, q, queue.WorkerOpts{PollInterval: poll, Handler: func(ctx context.Context, m queue.Message) error {
			if m.Attempt <= 50 {
				return queue.RetryAfter(time.Millisecond, errors.New("again"))
			}
			done <- time.Now()
			return nil
		}})
		began := time.Now()
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		select {
		case end := <-done:
			// A single missed wake-up costs a poll interval; fifty timely
			// ones take milliseconds each (well under a second without -race).
			if took := end.Sub(began); took > poll {
				t.Fatalf("50 retries took %s: wake-ups were missed", took)
			}
		case <-time.After(10 * poll):
			t.Fatal("the 51st attempt never came")
		}
	})

	t.Run("a retry-after delay is never cut short and the retry comes when it is due", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		q := queue.New(queue.NewOpts{DB: db, Name: "q", Retry: queue.RetryPolicy{MaxAttempts: 100}})
		delays := []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond}
		const rounds = 8
		var (
			mu       sync.Mutex
			returned time.Time
			gaps     []time.Duration
		)
		finished := make(chan struct{})
		start(t, q, queue.WorkerOpts{PollInterval: poll, Handler: func(ctx context.Context, m queue.Message) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if m.Attempt > 1 {
				gaps = append(gaps, now.Sub(returned))
			}
			if m.Attempt > rounds*len(delays) {
				close(finished)
				return nil
			}
			returned = time.Now()
			return queue.RetryAfter(delays[(m.Attempt-1)%len(delays)], errors.New("later"))
		}})
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-finished:
		case <-time.After(10 * poll):
			t.Fatal("the retries did not finish")
		}
		mu.Lock()
		defer mu.Unlock()
		for i, gap := range gaps {
			d := delays[i%len(delays)]
			if gap < d {
				t.Errorf("retry %d after a RetryAfter(%s) came %s later: too early", i+1, d, gap)
			}
			if gap > d+poll/4 {
				t.Errorf("retry %d after a RetryAfter(%s) came %s later: the wake-up was missed", i+1, d, gap)
			}
		}
	})
}

// The queue package keeps per-database state (wake-up signals, declared
// names, prepared statements) on the database itself: once a database is
// closed and dropped, nothing in the package keeps it alive.
func TestClosedDatabaseIsReleased(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/released.db"
	use := func() weak.Pointer[store.DB] {
		ctx := context.Background()
		db, err := store.Open(ctx, store.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		q := queue.New(queue.NewOpts{DB: db, Name: "released"})
		done := make(chan struct{})
		w := q.Start(ctx, queue.WorkerOpts{Handler: func(context.Context, queue.Message) error { close(done); return nil }})
		if _, err := q.Send(ctx, queue.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second * testwait.Slack):
			t.Fatal("the message was not handled")
		}
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return weak.Make(db)
	}
	wp := use()
	testwait.Until(t, 10*time.Second, "the closed database to be collected", func() bool {
		runtime.GC()
		return wp.Value() == nil
	})
}
