package queue

import (
	"container/heap"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/store"
	"switchyard/telemetry"
)

// HandlerFunc handles one queue message. Return nil to acknowledge it, an
// error to retry it with backoff, RetryAfter(d, err) to retry after exactly
// d, or Permanent(err) to dead-letter it now. A handler may call network
// services; it must not hold a database transaction open while it does.
type HandlerFunc func(ctx context.Context, m Message) error

// BatchHandlerFunc handles the messages of one receive together, e.g. in
// one transaction (see SavepointTx). It returns one error per message, in
// the order of msgs, each meaning what HandlerFunc's would; a nil slice
// acknowledges them all. Messages with one order key are never in one
// batch: a key's next message is received once the one before it is
// finished.
type BatchHandlerFunc func(ctx context.Context, msgs []Message) []error

// WorkerOpts configure Queue.Start. Zero values get defaults.
type WorkerOpts struct {
	// Handler handles one message at a time. Handler or BatchHandler is
	// required, not both.
	Handler HandlerFunc
	// BatchHandler handles up to 64 messages a call: those one receive
	// took.
	BatchHandler BatchHandlerFunc
	// Concurrency bounds how many messages are handled at once (default
	// 4): with Handler, how many handlers run at once; with BatchHandler,
	// how many messages its running calls hold in all.
	Concurrency int
	// PollInterval is how often the worker looks for messages whatever it
	// was told (default 500 ms). Sends in this process wake it at once, and
	// on PostgreSQL so do sends in the other processes on the database (a
	// broadcast, see notify.go), for which the poll is the fallback; on
	// SQLite it is how messages sent by other processes on the file are
	// found.
	PollInterval time.Duration
}

// DefaultPollInterval is the fallback polling interval of workers and
// subscriptions.
const DefaultPollInterval = 500 * time.Millisecond

// maxReceiveBatch caps how many messages one receive transaction takes.
const maxReceiveBatch = 64

// Worker runs a handler over a queue's messages until stopped.
type Worker struct {
	q    *Queue
	opts WorkerOpts

	hctx    context.Context // handlers' context; cancelled when Stop gives up
	hcancel context.CancelFunc

	stopOnce  sync.Once
	stopping  chan struct{}
	abandon   chan struct{}
	abandoned atomic.Bool
	drained   chan struct{}

	resultsMu sync.Mutex
	results   chan result
	closed    bool

	mu       sync.Mutex
	inflight map[ID]struct{}
	dues     dueTimes      // when the retries this worker scheduled become visible
	kick     chan struct{} // the completer scheduled a retry: recompute the wait
}

type result struct {
	m   Message
	err error
	dur time.Duration
}

// Start starts a worker on q. ctx carries values to the handlers; cancelling
// it is a hard stop, like Stop's deadline passing. Call it at wiring time, not
// inside a transaction (it prepares statements on the writer). Panics
// without a handler, or with both kinds.
func (q *Queue) Start(ctx context.Context, opts WorkerOpts) *Worker {
	if (opts.Handler == nil) == (opts.BatchHandler == nil) {
		panic("queue: a worker needs a Handler or a BatchHandler")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	hubFor(q.db).stmts.prepare(ctx, q.db)
	declareConsumerMetrics(q.name, "")
	hctx, cancel := context.WithCancel(ctx)
	w := &Worker{
		q:        q,
		opts:     opts,
		hctx:     hctx,
		hcancel:  cancel,
		stopping: make(chan struct{}),
		abandon:  make(chan struct{}),
		drained:  make(chan struct{}),
		results:  make(chan result, opts.Concurrency),
		inflight: map[ID]struct{}{},
		kick:     make(chan struct{}, 1),
	}
	loopDone := make(chan struct{})
	completerDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		w.loop()
	}()
	go func() {
		defer close(completerDone)
		w.complete()
	}()
	go func() {
		<-loopDone
		w.resultsMu.Lock()
		w.closed = true
		close(w.results)
		w.resultsMu.Unlock()
		<-completerDone
		close(w.drained)
	}()
	go func() {
		select {
		case <-ctx.Done():
			w.hardStop()
		case <-w.drained:
		}
	}()
	return w
}

// Stop stops receiving and waits for running handlers to finish and their
// results to be committed. When ctx ends first, the handlers' context is
// cancelled and their results are discarded: their messages are delivered
// again after the queue's timeout, as after a crash. Stop returns ctx's error
// in that case.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() { close(w.stopping) })
	select {
	case <-w.drained:
		w.hcancel()
		return nil
	case <-ctx.Done():
		w.hardStop()
		<-w.drained
		return ctx.Err()
	}
}

func (w *Worker) hardStop() {
	w.stopOnce.Do(func() { close(w.stopping) })
	if w.abandoned.CompareAndSwap(false, true) {
		close(w.abandon)
		w.hcancel()
	}
}

// loop receives messages while there are free handler slots, and extends the
// timeout of the messages in flight.
func (w *Worker) loop() {
	q := w.q
	free := w.opts.Concurrency
	freed := make(chan struct{}, w.opts.Concurrency)
	stopping := w.stopping
	empty := false // the last receive found fewer messages than it asked for
	extend := time.NewTicker(max(q.timeout/3, time.Millisecond))
	defer extend.Stop()
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	timer := time.NewTimer(0)
	defer timer.Stop()
	told := q.sig.listen()
	defer q.sig.unlisten(told)
	w.sweepExhausted()

	for {
		if stopping == nil && free == w.opts.Concurrency {
			return
		}
		wake := q.sig.wait()
		if told.woken.Swap(false) {
			empty = false // a send since the last receive
		}
		if w.retriesDue() {
			empty = false // a retry became visible: receive it now
		}
		// A damaged database file takes no more work: it does not heal, and
		// messages handled on it would only fail and burn their attempts.
		if stopping != nil && free > 0 && !empty && q.db.Corrupt() == nil {
			n := min(free, maxReceiveBatch)
			msgs, err := w.receive(n)
			if err != nil {
				q.log.Error("queue receive failed", slog.Any("err", err))
				empty = true
			} else {
				empty = len(msgs) < n
			}
			if w.opts.BatchHandler != nil && len(msgs) > 0 {
				free -= len(msgs)
				go w.handleBatch(msgs, freed)
			} else {
				for _, m := range msgs {
					free--
					go w.handle(m, freed)
				}
			}
			if len(msgs) > 0 && free > 0 && !empty {
				continue
			}
		}
		timer.Reset(w.waitFor())
		select {
		case <-freed:
			free++
		drain:
			for {
				select {
				case <-freed:
					free++
				default:
					break drain
				}
			}
		case <-wake:
			empty = false
		case <-w.kick: // a retry was scheduled: sleep until it is due
		case <-timer.C:
			empty = false
		case <-extend.C:
			w.extendInflight()
		case <-sweep.C:
			w.sweepExhausted()
		case <-stopping:
			stopping = nil
		case <-w.abandon:
			return
		}
	}
}

// retriesDue forgets the retries this worker scheduled that have become
// visible, and reports whether there were any: the receive that follows
// finds them.
func (w *Worker) retriesDue() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dues.popDue(w.q.db.Now())
}

// waitFor is how long the loop may sleep: until the next retry this worker
// scheduled becomes visible, at most the poll interval. It forgets nothing:
// whichever wake-up ends the sleep, the top of the loop sees what is due.
func (w *Worker) waitFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if next, ok := w.dues.next(); ok {
		return max(min(w.opts.PollInterval, next.Sub(w.q.db.Now())), 0)
	}
	return w.opts.PollInterval
}

func (w *Worker) handle(m Message, freed chan<- struct{}) {
	start := time.Now()
	m.started = start
	err := w.call(m)
	dur := time.Since(start)
	// The result goes to the completer before the slot is freed, so a
	// graceful stop, which waits for every slot, loses no result.
	w.resultsMu.Lock()
	if !w.closed && !w.abandoned.Load() {
		w.results <- result{m: m, err: err, dur: dur}
	}
	w.resultsMu.Unlock()
	freed <- struct{}{}
}

// handleBatch is handle for the messages of one receive, given to the
// batch handler together; each frees its slot once its result is with the
// completer.
func (w *Worker) handleBatch(msgs []Message, freed chan<- struct{}) {
	start := time.Now()
	for i := range msgs {
		msgs[i].started = start
	}
	errs := w.callBatch(msgs)
	dur := time.Since(start)
	w.resultsMu.Lock()
	if !w.closed && !w.abandoned.Load() {
		for i, m := range msgs {
			w.results <- result{m: m, err: errs[i], dur: dur}
		}
	}
	w.resultsMu.Unlock()
	// A batch handler that acknowledged its messages in its own
	// transaction (AckTx) released the next message of each of their order
	// keys with its commit: the loop looks for them now, not after the
	// completer's commit.
	for i, m := range msgs {
		if errs[i] == nil && m.OrderKey != "" {
			w.q.sig.wake()
			break
		}
	}
	for range msgs {
		freed <- struct{}{}
	}
}

// callBatch calls the batch handler: one error per message, whatever it
// returned (a panic, or a result count that does not match, fails them all).
// With tracing on, each message has a consumer span of its own around the
// call (handleSpan), ended with that message's result.
func (w *Worker) callBatch(msgs []Message) (errs []error) {
	var spans []trace.Span
	if telemetry.Enabled() {
		spans = make([]trace.Span, len(msgs))
		for i := range msgs {
			_, spans[i] = w.q.handleSpan(w.hctx, &msgs[i])
		}
	}
	defer func() {
		if p := recover(); p != nil {
			errs = repeatErr(len(msgs), fmt.Errorf("batch handler panicked: %v", p))
		}
		for i, span := range spans {
			w.q.endHandleSpan(span, msgs[i], errs[i])
		}
	}()
	errs = w.opts.BatchHandler(w.hctx, msgs)
	switch {
	case errs == nil:
		return make([]error, len(msgs))
	case len(errs) != len(msgs):
		return repeatErr(len(msgs), fmt.Errorf("batch handler returned %d results for %d messages", len(errs), len(msgs)))
	}
	return errs
}

func repeatErr(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (w *Worker) call(m Message) (err error) {
	ctx, span := w.q.handleSpan(w.hctx, &m)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
		w.q.endHandleSpan(span, m, err)
	}()
	return w.opts.Handler(ctx, m)
}

// handleSpan starts the consumer span of one delivery of m, "queue.handle
// <queue>", as a child of the span that sent it (m.Traceparent, carried
// through retries, dead letters and redrives), and sets m.Traceparent to the
// new span's context: a batch handler, which gets one context for all its
// messages, resumes each message's span from it, and what a handler sends
// with it joins the delivery's trace. With tracing off it returns ctx and a
// span that does nothing, and allocates nothing.
func (q *Queue) handleSpan(ctx context.Context, m *Message) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, q.span) // ctx as it is, and a span that does nothing
	}
	ctx, span := telemetry.Start(telemetry.Resume(ctx, m.Traceparent), q.span, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.destination.name", q.name),
			attribute.String("messaging.message.id", string(m.ID)),
			attribute.Int("queue.attempt", m.Attempt),
		))
	m.Traceparent = telemetry.Traceparent(ctx)
	return ctx, span
}

// endHandleSpan ends a delivery's span with what the handler's result asks
// of the queue: done, retry or dead (the commit that follows may still find
// the message delivered again meanwhile; the span tells the handler's
// verdict). A failed delivery is an error span.
func (q *Queue) endHandleSpan(span trace.Span, m Message, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	outcome := "done"
	if err != nil {
		outcome = "retry"
		if q.retry.decide(m.Attempt, err).dead {
			outcome = "dead"
		}
	}
	span.SetAttributes(attribute.String("queue.outcome", outcome))
	telemetry.End(span, err)
}

// A receive takes the visible messages it returns in one statement. On
// PostgreSQL, where receives run concurrently, its inner select locks the
// rows it picks and skips those another receive has locked (for update skip
// locked): without that, two receives read the same rows from their
// snapshots and both deliver them. SQLite, whose single writer runs one
// receive at a time, parses no FOR UPDATE.
//
// The limit is written into the text, one text for each batch size up to
// maxReceiveBatch, each prepared once: SQLite reads a value bound to a LIMIT
// to plan the statement, so it compiled a statement with "limit ?" again at
// every bind, every receive (6.5% of the CPU of a send→handle→ack loop).
// Rounding the sizes to a few powers of two instead cost a third of the
// loop's throughput in smaller batches.
//
// A paused queue (pause.go) has a row in queue_pauses: the NOT EXISTS,
// uncorrelated, is evaluated once a receive, and makes it take nothing.
const (
	receiveHead = `
	update goqite set timeout = ?, received = received + 1
	where id in (
		select id from goqite
		where queue = ? and timeout <= ? and received < ?
		and not exists (select 1 from queue_pauses where queue = ? and grp = '')
		order by priority desc, created
		limit `
	receiveTail = `
	returning id, body, received, created, priority, traceparent`
)

// receiveQueries[d][n-1] takes up to n messages, in SQLite's dialect (d 0)
// or PostgreSQL's (1).
var receiveQueries = [2][]string{receiveTexts(""), receiveTexts(`
		for update skip locked`)}

func receiveTexts(lock string) []string {
	var qs []string
	for n := 1; n <= maxReceiveBatch; n++ {
		qs = append(qs, receiveHead+strconv.Itoa(n)+lock+`)`+receiveTail)
	}
	return qs
}

// receiveSQL is the receive of n messages (1 to maxReceiveBatch) in db's
// dialect.
func receiveSQL(db *store.DB, n int) string {
	d := 0
	if db.Postgres() {
		d = 1
	}
	return receiveQueries[d][n-1]
}

// receive takes up to n visible messages in one transaction (n from 1 to
// maxReceiveBatch).
func (w *Worker) receive(n int) ([]Message, error) {
	q := w.q
	var msgs []Message
	ctx := context.WithoutCancel(w.hctx)
	err := q.db.Tx(ctx, func(tx *sql.Tx) error {
		msgs = msgs[:0]
		now := q.db.Now()
		sw := newWriter(ctx, tx, q.db)
		rows, err := sw.query(receiveSQL(q.db, n), gqTime(now.Add(q.timeout)), q.name, gqTime(now), q.retry.MaxAttempts, q.name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				m       Message
				created string
			)
			if err := rows.Scan(&m.ID, &m.Body, &m.Attempt, &created, &m.Priority, &m.Traceparent); err != nil {
				return err
			}
			m.SentAt, _ = parseGQ(created)
			msgs = append(msgs, m)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return orderKeysOf(sw, msgs)
	})
	if err != nil {
		return nil, fmt.Errorf("queue %s: receive: %w", q.name, err)
	}
	w.mu.Lock()
	for _, m := range msgs {
		w.inflight[m.ID] = struct{}{}
	}
	w.mu.Unlock()
	metricReceived.WithLabelValues(q.name, "").Add(float64(len(msgs)))
	return msgs, nil
}

const orderKeyQuery = `select order_key from queue_order where message_id = ?`

// orderKeysOf fills in the order keys of msgs.
func orderKeysOf(w writer, msgs []Message) error {
	for i := range msgs {
		if !isOrdered(msgs[i].ID) {
			continue
		}
		err := w.queryRow(orderKeyQuery, string(msgs[i].ID)).Scan(&msgs[i].OrderKey)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
	}
	return nil
}

// complete commits handler results in batches: acknowledgements, retries and
// dead letters of many messages share one transaction.
func (w *Worker) complete() {
	batch := make([]result, 0, 256)
	for r := range w.results {
		batch = append(batch[:0], r)
	fill:
		for len(batch) < cap(batch) {
			select {
			case r, ok := <-w.results:
				if !ok {
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		w.commit(batch)
	}
}

type outcome int

const (
	outcomeStale outcome = iota
	outcomeDone
	outcomeRetry
	outcomeDead
)

func (w *Worker) commit(batch []result) {
	q := w.q
	// A handler that failed on a damaged database did not fail on its own
	// account: record nothing, and the message comes back after its timeout
	// (to a process on a restored file) instead of being retried or dead-lettered here.
	kept := batch[:0]
	for _, r := range batch {
		if store.IsCorrupt(r.err) {
			w.mu.Lock()
			delete(w.inflight, r.m.ID)
			w.mu.Unlock()
			q.log.Error("queue failure not recorded: the database file is damaged", slog.String("message_id", string(r.m.ID)),
				slog.String("outcome", "halted"), slog.String("err", errorText(r.err)))
			continue
		}
		kept = append(kept, r)
	}
	if batch = kept; len(batch) == 0 {
		return
	}
	ctx := context.WithoutCancel(w.hctx)
	outcomes := make([]outcome, len(batch))
	dues := make([]time.Time, len(batch))
	keys := make([]string, len(batch))
	for i, r := range batch {
		keys[i] = r.m.OrderKey
	}
	err := q.db.Tx(ctx, func(tx *sql.Tx) error {
		now := q.db.Now()
		sw := newWriter(ctx, tx, q.db)
		// Every order key of the batch at once, so that two batches never
		// wait for each other's keys.
		if err := lockOrderKeys(sw, q.name, keys...); err != nil {
			return err
		}
		for i, r := range batch {
			outcomes[i] = outcomeStale
			if r.err == nil {
				// The row may be gone already: the handler acknowledged it with
				// AckTx (which recorded the attempt) or an operator purged it.
				// Either way it succeeded.
				ok, err := finishMessage(sw, q.name, r.m.ID, r.m.Attempt, r.m.OrderKey, now)
				if err != nil {
					return err
				}
				if ok {
					if err := q.recordSuccess(sw, r.m.ID, r.m.Attempt, r.dur, now); err != nil {
						return err
					}
				}
				outcomes[i] = outcomeDone
				continue
			}
			d := q.retry.decide(r.m.Attempt, r.err)
			text := errorText(r.err)
			if d.dead {
				ok, err := deadLetterMessage(sw, q.name, r.m.ID, r.m.Attempt, r.m.OrderKey, text, r.dur, now)
				if err != nil {
					return err
				}
				if ok {
					outcomes[i] = outcomeDead
				}
				continue
			}
			dues[i] = visibleAt(now.Add(d.delay))
			ok, err := retryMessage(sw, q.name, r.m.ID, r.m.Attempt, text, r.dur, dues[i], now)
			if err != nil {
				return err
			}
			if ok {
				outcomes[i] = outcomeRetry
			}
		}
		return nil
	})

	w.mu.Lock()
	for _, r := range batch {
		delete(w.inflight, r.m.ID)
	}
	if err == nil {
		for i := range batch {
			if outcomes[i] == outcomeRetry {
				w.dues.add(dues[i])
			}
		}
	}
	w.mu.Unlock()
	if err != nil {
		// Nothing of the batch was kept: the messages come back after their
		// timeout and are handled again.
		q.log.Error("queue results not committed; messages will be delivered again", slog.Int("count", len(batch)), slog.Any("err", err))
		return
	}
	wake, kick := false, false
	for i, r := range batch {
		metricDuration.WithLabelValues(q.name, "").Observe(r.dur.Seconds())
		switch outcomes[i] {
		case outcomeDone:
			metricSucceeded.WithLabelValues(q.name, "").Inc()
			wake = wake || r.m.OrderKey != ""
		case outcomeRetry:
			metricRetried.WithLabelValues(q.name, "").Inc()
			q.log.Warn("queue message failed; will retry", slog.String("message_id", string(r.m.ID)),
				slog.Int("attempt", r.m.Attempt), slog.String("outcome", "retry"),
				slog.Time("retry_at", dues[i]), slog.String("err", errorText(r.err)))
			kick = true
		case outcomeDead:
			metricDead.WithLabelValues(q.name, "").Inc()
			q.log.Error("queue message dead-lettered", slog.String("message_id", string(r.m.ID)),
				slog.Int("attempt", r.m.Attempt), slog.String("outcome", "dead"), slog.String("err", errorText(r.err)))
			wake = wake || r.m.OrderKey != ""
		case outcomeStale:
			q.log.Warn("queue failure not recorded: the message was delivered again or removed",
				slog.String("message_id", string(r.m.ID)), slog.Int("attempt", r.m.Attempt), slog.String("err", errorText(r.err)))
		}
	}
	if wake {
		q.sig.notify()
	}
	if kick {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

const extendQuery = `update goqite set timeout = ? where queue = ? and id in (%s) and timeout <> ?`

// extendInflight pushes back the timeout of every message this worker is handling.
func (w *Worker) extendInflight() {
	q := w.q
	w.mu.Lock()
	ids := make([]any, 0, len(w.inflight))
	for id := range w.inflight {
		ids = append(ids, string(id))
	}
	w.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx := context.WithoutCancel(w.hctx)
	err := q.db.Tx(ctx, func(tx *sql.Tx) error {
		args := append([]any{gqTime(q.db.Now().Add(q.timeout)), q.name}, ids...)
		args = append(args, parkedTimeout)
		_, err := tx.ExecContext(ctx, fmt.Sprintf(extendQuery, placeholders(len(ids))), args...)
		return err
	})
	if err != nil {
		q.log.Error("queue extend failed", slog.Int("count", len(ids)), slog.Any("err", err))
	}
}

const exhaustedQuery = `
	select id, received from goqite
	where queue = ? and received >= ? and timeout <= ?
	limit 100`

// sweepExhausted dead-letters messages that were delivered MaxAttempts
// times without a result (their handler outlived the timeout, or the process
// died each time): goqite would leave them in the table for ever.
func (w *Worker) sweepExhausted() {
	q := w.q
	ctx := context.WithoutCancel(w.hctx)
	var n int
	err := q.db.Tx(ctx, func(tx *sql.Tx) error {
		n = 0
		now := q.db.Now()
		rows, err := tx.QueryContext(ctx, exhaustedQuery, q.name, q.retry.MaxAttempts, gqTime(now))
		if err != nil {
			return err
		}
		type stuck struct {
			id       ID
			received int
		}
		var found []stuck
		for rows.Next() {
			var s stuck
			if err := rows.Scan(&s.id, &s.received); err != nil {
				rows.Close()
				return err
			}
			found = append(found, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		sw := newWriter(ctx, tx, q.db)
		msgs := make([]Message, len(found))
		keys := make([]string, len(found))
		for i, s := range found {
			msgs[i].ID = s.id
		}
		if err := orderKeysOf(sw, msgs); err != nil {
			return err
		}
		for i, m := range msgs {
			keys[i] = m.OrderKey
		}
		if err := lockOrderKeys(sw, q.name, keys...); err != nil {
			return err
		}
		for i, s := range found {
			text := fmt.Sprintf("delivered %d times without a result: the handler outlived the %s timeout or its process stopped", s.received, q.timeout)
			ok, err := deadLetterMessage(sw, q.name, s.id, s.received, msgs[i].OrderKey, text, unknownDuration, now)
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	if err != nil {
		q.log.Error("queue sweep failed", slog.Any("err", err))
		return
	}
	if n > 0 {
		metricDead.WithLabelValues(q.name, "").Add(float64(n))
		q.log.Error("queue messages dead-lettered after timing out", slog.Int("count", n), slog.String("outcome", "dead"))
	}
}

func placeholders(n int) string {
	if n <= 0 {
		return ""
	}
	return strings.Repeat("?, ", n-1) + "?"
}

// dueTimes is a min-heap of the times retries become visible.
type dueTimes []time.Time

// maxDues bounds the heap: past it, the latest are dropped and found by the
// poll instead.
const maxDues = 4096

func (d *dueTimes) add(t time.Time) {
	if len(*d) >= maxDues {
		return
	}
	heap.Push(d, t)
}

// popDue removes every time at or before now and reports whether there was one.
func (d *dueTimes) popDue(now time.Time) bool {
	due := false
	for len(*d) > 0 && !(*d)[0].After(now) {
		heap.Pop(d)
		due = true
	}
	return due
}

func (d dueTimes) next() (time.Time, bool) {
	if len(d) == 0 {
		return time.Time{}, false
	}
	return d[0], true
}

func (d dueTimes) Len() int           { return len(d) }
func (d dueTimes) Less(i, j int) bool { return d[i].Before(d[j]) }
func (d dueTimes) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *dueTimes) Push(x any)        { *d = append(*d, x.(time.Time)) }
func (d *dueTimes) Pop() any {
	old := *d
	t := old[len(old)-1]
	*d = old[:len(old)-1]
	return t
}
