package queue

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"switchyard/store"
	"switchyard/telemetry"
)

// ID identifies a queue message; it is the goqite row's id and survives a
// redrive.
type ID string

// Message is a queue message. Send reads Body, Key, OrderKey, Delay and
// Priority; a handler also gets ID, Attempt and SentAt.
type Message struct {
	ID   ID
	Body []byte
	// Key is an optional idempotency key: a second send with the same key to
	// the same queue is a no-op reported as a duplicate (the BullMQ jobId).
	// Keys are remembered for AdminOpts.KeyRetention (default 7 days).
	Key string
	// OrderKey is optional: messages with the same order key are handled one
	// at a time, in send order, across retries, restarts and redrives; a
	// retrying message holds back only the later messages of its own key.
	OrderKey string
	// Delay postpones the first delivery.
	Delay time.Duration
	// Priority: higher is received first (goqite's priority).
	Priority int
	// Attempt is 1 on the first delivery, 2 on the first retry, and so on.
	Attempt int
	// SentAt is when the message was sent.
	SentAt time.Time
	// Traceparent is the W3C trace context the message carries (package
	// telemetry), kept through retries, dead letters and redrives; "" when
	// none was recorded. Send takes the sending context's span when it is
	// empty. In the Message a handler gets, with tracing on, it is the
	// context of the delivery's own span (queue.handle <queue>), a child of
	// the one sent.
	Traceparent string

	// started is when the worker handed the message to its handler, for
	// the duration AckTx records in the attempt history.
	started time.Time
}

// SendResult tells what a send did.
type SendResult struct {
	// ID of the message: the new one, or the one that first used the key.
	ID ID
	// Duplicate is true when the key was already used and nothing was sent.
	Duplicate bool
}

// NewOpts configure New. Zero values get defaults.
type NewOpts struct {
	DB *store.DB
	// Name of the queue, e.g. "sender.flow".
	Name string
	// Timeout is how long a delivered message stays invisible before it is
	// delivered again; workers extend it while the handler runs (default 30 s).
	Timeout time.Duration
	// Retry is the failure policy (defaults in RetryPolicy).
	Retry RetryPolicy
	// Logger gets failures and dead letters; nil discards.
	Logger *slog.Logger
	// RecordSuccesses puts every successful delivery into the attempt
	// history, not only one that follows failed attempts (attempts.go). It
	// costs a write per message on the send→handle→ack path and a row per
	// message until retention (docs/benchmarks.md).
	RecordSuccesses bool
}

// Queue is a named durable queue on the goqite table.
type Queue struct {
	db      *store.DB
	name    string
	timeout time.Duration
	retry   RetryPolicy
	log     *slog.Logger
	sig     *signal
	// span names the consumer span of a delivery: "queue.handle <name>".
	span string
	// recordSuccesses: see NewOpts.RecordSuccesses.
	recordSuccesses bool
}

// DefaultTimeout is a delivered message's default visibility timeout.
const DefaultTimeout = 30 * time.Second

// New returns the queue opts.Name in opts.DB. It panics on wiring mistakes.
// Like Start, it prepares statements on the writer connection, so it must not
// be called inside a transaction.
func New(opts NewOpts) *Queue {
	if opts.DB == nil {
		panic("queue: nil DB")
	}
	if opts.Name == "" || strings.HasSuffix(opts.Name, heldSuffix) {
		panic("queue: empty queue name, or one ending in " + heldSuffix)
	}
	if opts.Timeout < 0 {
		panic("queue: negative timeout")
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	hub := hubFor(opts.DB)
	hub.declare(opts.Name)
	// A process that only sends (omni's inbound role) never calls Start, so
	// the hot statements are prepared here too; parsing them per send cost
	// about a seventh of the webhook path.
	hub.stmts.prepare(context.Background(), opts.DB)
	declareQueueMetrics(opts.Name, true)
	return &Queue{
		db:      opts.DB,
		name:    opts.Name,
		timeout: opts.Timeout,
		retry:   opts.Retry.withDefaults(),
		log:     opts.Logger.With(slog.String("queue", opts.Name)),
		sig:     queueSignal(opts.DB, opts.Name),
		span:    "queue.handle " + opts.Name,

		recordSuccesses: opts.RecordSuccesses,
	}
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Send sends m in its own transaction (grouped with concurrent writers) and
// returns once it is committed.
func (q *Queue) Send(ctx context.Context, m Message) (SendResult, error) {
	var res SendResult
	err := q.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = q.send(ctx, tx, m)
		return err
	})
	if err != nil {
		return SendResult{}, err
	}
	return res, nil
}

// SendTx sends m inside the caller's transaction: the message exists if and
// only if the transaction commits. Once it has committed, workers in this
// process are woken and the send is counted; a transaction that rolls back
// (or, on PostgreSQL, is run again) wakes nobody and counts nothing. tx must
// be a transaction of db.Tx: for another, the wake-up comes at once, before
// the message is visible, and the workers find it at their next poll. On
// PostgreSQL a send with an order key holds that key's lock until tx ends
// (see lock.go): keep such transactions short.
func (q *Queue) SendTx(ctx context.Context, tx *sql.Tx, m Message) (SendResult, error) {
	res, err := q.send(ctx, tx, m)
	if err != nil {
		return SendResult{}, err
	}
	return res, nil
}

// sent counts a committed send and wakes the queue's workers.
func (q *Queue) sent(res SendResult) {
	if res.Duplicate {
		metricDuplicates.WithLabelValues(q.name).Inc()
		return
	}
	metricSent.WithLabelValues(q.name).Inc()
	q.sig.notify()
}

const (
	insertKeyQuery = `
		insert into queue_keys (queue, key, message_id, created_at) values (?, ?, ?, ?)
		on conflict (queue, key) do nothing`
	selectKeyQuery   = `select message_id from queue_keys where queue = ? and key = ?`
	orderQueuedQuery = `select count(*) from (select 1 from queue_order where queue = ? and order_key = ? limit 1) as head`
	// insertOrderQuery records a message's place in its order key and parks
	// it when an earlier message of the key is still queued: one statement,
	// one round trip on PostgreSQL.
	insertOrderQuery = `
		insert into queue_order (queue, order_key, message_id, parked, not_before)
		values (?, ?, ?, case when exists (select 1 from queue_order where queue = ? and order_key = ?) then 1 else 0 end, ?)
		returning parked`
	// insertParkedOrderQuery is insertOrderQuery's insert with parked
	// given: on SQLite, after orderQueuedQuery (see recordOrder).
	insertParkedOrderQuery = `
		insert into queue_order (queue, order_key, message_id, parked, not_before) values (?, ?, ?, ?, ?)`
	insertMessageQuery = `
		insert into goqite (id, created, queue, body, timeout, received, priority, traceparent)
		values (?, ?, ?, ?, ?, 0, ?, ?)`
)

func (q *Queue) send(ctx context.Context, tx *sql.Tx, m Message) (SendResult, error) {
	w := newWriter(ctx, tx, q.db)
	if m.Delay < 0 {
		return SendResult{}, fmt.Errorf("queue %s: negative delay %s", q.name, m.Delay)
	}
	now := q.db.Now()
	id := newID()
	if m.OrderKey != "" {
		id = orderedID(id)
	}
	if m.Key != "" {
		res, err := w.exec(insertKeyQuery, q.name, m.Key, string(id), store.TS(now))
		if err != nil {
			return SendResult{}, fmt.Errorf("queue %s: record key: %w", q.name, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return SendResult{}, err
		} else if n == 0 {
			var first ID
			if err := w.queryRow(selectKeyQuery, q.name, m.Key).Scan(&first); err != nil {
				return SendResult{}, fmt.Errorf("queue %s: read key: %w", q.name, err)
			}
			res := SendResult{ID: first, Duplicate: true}
			afterCommit(q.db, tx, func() { q.sent(res) })
			return res, nil
		}
	}
	visible, queue := gqTime(now.Add(m.Delay)), q.name
	if m.OrderKey != "" {
		if err := lockOrderKeys(w, q.name, m.OrderKey); err != nil {
			return SendResult{}, err
		}
		parked, err := recordOrder(w, q.name, m.OrderKey, id, visible)
		if err != nil {
			return SendResult{}, fmt.Errorf("queue %s: record order: %w", q.name, err)
		}
		if parked {
			visible, queue = parkedTimeout, heldQueue(q.name)
		}
	}
	body := m.Body
	if body == nil {
		body = []byte{}
	}
	traceparent := m.Traceparent
	if traceparent == "" {
		traceparent = telemetry.Traceparent(ctx)
	}
	if _, err := w.exec(insertMessageQuery, string(id), gqTime(now), queue, body, visible, m.Priority, traceparent); err != nil {
		return SendResult{}, fmt.Errorf("queue %s: insert message: %w", q.name, err)
	}
	res := SendResult{ID: id}
	afterCommit(q.db, tx, func() { q.sent(res) })
	return res, nil
}

// recordOrder gives message id its place in orderKey, parked when an
// earlier message of the key is still queued, and reports whether it is.
// The caller holds the key's lock (lockOrderKeys), so the two statements of
// SQLite's way see no other send of the key between them (SQLite has one
// writer anyway). PostgreSQL runs insertOrderQuery, one round trip; SQLite
// runs a RETURNING clause through an ephemeral table of its own, which cost
// more than the insert itself (about 40 µs a send, the ingest benchmark's
// largest statement), so there the head is looked up first.
func recordOrder(w writer, queue, orderKey string, id ID, visible string) (bool, error) {
	if w.pg {
		var parked bool
		err := w.queryRow(insertOrderQuery, queue, orderKey, string(id), queue, orderKey, visible).Scan(&parked)
		return parked, err
	}
	var queued int64
	if err := w.queryRow(orderQueuedQuery, queue, orderKey).Scan(&queued); err != nil {
		return false, err
	}
	parked := queued > 0
	_, err := w.exec(insertParkedOrderQuery, queue, orderKey, string(id), store.Flag(parked), visible)
	return parked, err
}

// AckTx acknowledges m inside the caller's transaction, so the handler's own
// writes and the acknowledgement commit together (exactly-once for local
// effects). It fails with ErrNotFound when m was already acknowledged,
// purged, or delivered again after its timeout expired; the handler should
// then return that error so its transaction rolls back. Like SendTx, on
// PostgreSQL it holds m's order key's lock until tx ends.
func (q *Queue) AckTx(ctx context.Context, tx *sql.Tx, m Message) error {
	w := newWriter(ctx, tx, q.db)
	if err := lockOrderKeys(w, q.name, m.OrderKey); err != nil {
		return err
	}
	now := q.db.Now()
	ok, err := finishMessage(w, q.name, m.ID, m.Attempt, m.OrderKey, now)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("queue %s: ack %s: %w", q.name, m.ID, ErrNotFound)
	}
	// The worker's commit finds the message gone and records nothing: the
	// success is recorded here, with the acknowledgement.
	dur := unknownDuration
	if !m.started.IsZero() {
		dur = time.Since(m.started)
	}
	return q.recordSuccess(w, m.ID, m.Attempt, dur, now)
}

const (
	deleteDeliveredQuery = `delete from goqite where queue = ? and id = ? and received = ?`
	deleteRetryQuery     = `delete from queue_retries where message_id = ?`
	deleteOrderQuery     = `delete from queue_order where message_id = ?`
	unparkQuery          = `
		update queue_order set parked = 0
		where seq = (select min(seq) from queue_order where queue = ? and order_key = ?) and parked = 1
		returning message_id, not_before`
	releaseQuery = `update goqite set queue = ?, timeout = ? where id = ?`
)

// finishMessage removes delivery attempt of message id (fenced by the
// attempt, so a stale delivery cannot remove a newer one), its retry state
// and its order slot, releasing the next message of its order key. It
// reports whether the delivery was still current. The caller holds the
// order key's lock (lockOrderKeys).
func finishMessage(w writer, queue string, id ID, attempt int, orderKey string, now time.Time) (bool, error) {
	res, err := w.exec(deleteDeliveredQuery, queue, string(id), attempt)
	if err != nil {
		return false, fmt.Errorf("queue %s: delete %s: %w", queue, id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if attempt > 1 {
		if _, err := w.exec(deleteRetryQuery, string(id)); err != nil {
			return false, err
		}
	}
	if orderKey != "" {
		if err := releaseOrder(w, queue, id, orderKey, now); err != nil {
			return false, err
		}
	}
	return true, nil
}

// releaseOrder removes id's order slot and, when the key's earliest message
// is parked (no message of the key is active any more), makes it visible.
func releaseOrder(w writer, queue string, id ID, orderKey string, now time.Time) error {
	if _, err := w.exec(deleteOrderQuery, string(id)); err != nil {
		return fmt.Errorf("queue %s: order slot: %w", queue, err)
	}
	var (
		next      ID
		notBefore string
	)
	err := w.queryRow(unparkQuery, queue, orderKey).Scan(&next, &notBefore)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("queue %s: order head: %w", queue, err)
	}
	visible := max(gqTime(now), notBefore)
	_, err = w.exec(releaseQuery, queue, visible, string(next))
	return err
}

const (
	takeDeliveredQuery = `
		delete from goqite where queue = ? and id = ? and received = ?
		returning body, created, priority, traceparent`
	orderSlotQuery   = `select seq from queue_order where message_id = ?`
	firstFailedQuery = `select first_failed_at from queue_retries where message_id = ?`
	insertDeadQuery  = `
		insert into queue_dead (id, queue, grp, partition_id, log_offset, key, order_key, seq, priority, body,
			attempts, last_error, created_at, first_failed_at, dead_at, traceparent)
		values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// insertFailureQuery records one attempt in the attempt history
	// (attempts.go): despite the table's name, successes too.
	insertFailureQuery = `
		insert into queue_failures (queue, grp, message_id, attempt, error, outcome, failed_at, duration_us, instance)
		values (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	retryMessageQuery = `update goqite set timeout = ? where queue = ? and id = ? and received = ?`
	upsertRetryQuery  = `
		insert into queue_retries (message_id, queue, attempt, last_error, first_failed_at, failed_at)
		values (?, ?, ?, ?, ?, ?)
		on conflict (message_id) do update set
			attempt = excluded.attempt, last_error = excluded.last_error, failed_at = excluded.failed_at`
)

// deadLetterMessage moves delivery attempt of message id to the dead-letter
// queue with its last error, and records the attempt, whose handler ran for
// dur (negative: unknown). It reports whether the delivery was current.
// The caller holds the order key's lock (lockOrderKeys).
func deadLetterMessage(w writer, queue string, id ID, attempt int, orderKey, lastErr string, dur time.Duration, now time.Time) (bool, error) {
	var (
		body        []byte
		created     string
		priority    int
		seq         int64
		traceparent string
	)
	err := w.queryRow(takeDeliveredQuery, queue, string(id), attempt).Scan(&body, &created, &priority, &traceparent)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("queue %s: take %s: %w", queue, id, err)
	}
	firstFailed := store.TS(now)
	if attempt > 1 {
		var ts store.Timestamp
		err := w.queryRow(firstFailedQuery, string(id)).Scan(&ts)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, err
		}
		if !ts.IsZero() {
			firstFailed = ts
		}
		if _, err := w.exec(deleteRetryQuery, string(id)); err != nil {
			return false, err
		}
	}
	if orderKey != "" {
		if err := w.queryRow(orderSlotQuery, string(id)).Scan(&seq); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return false, err
		}
		if err := releaseOrder(w, queue, id, orderKey, now); err != nil {
			return false, err
		}
	}
	createdAt, _ := parseGQ(created)
	if _, err := w.exec(insertDeadQuery, string(id), queue, "", nil, nil, "", orderKey, seq, priority, body,
		attempt, lastErr, store.TS(createdAt), firstFailed, store.TS(now), traceparent); err != nil {
		return false, fmt.Errorf("queue %s: dead-letter %s: %w", queue, id, err)
	}
	if err := recordAttempt(w, queue, "", string(id), attempt, OutcomeDead, lastErr, dur, now); err != nil {
		return false, err
	}
	return true, nil
}

// retryMessage schedules delivery attempt of message id again at visible,
// which visibleAt has rounded, and records the attempt, whose handler ran
// for dur.
func retryMessage(w writer, queue string, id ID, attempt int, lastErr string, dur time.Duration, visible, now time.Time) (bool, error) {
	res, err := w.exec(retryMessageQuery, gqTime(visible), queue, string(id), attempt)
	if err != nil {
		return false, fmt.Errorf("queue %s: retry %s: %w", queue, id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return false, err
	}
	if _, err := w.exec(upsertRetryQuery, string(id), queue, attempt, lastErr, store.TS(now), store.TS(now)); err != nil {
		return false, err
	}
	if err := recordAttempt(w, queue, "", string(id), attempt, OutcomeRetry, lastErr, dur, now); err != nil {
		return false, err
	}
	return true, nil
}

// goqite keeps its times as UTC text with milliseconds; queue/ writes the
// same layout into the goqite table so goqite's own API stays compatible.
const goqiteLayout = "2006-01-02T15:04:05.000Z"

// A message held back behind an earlier message of its order key waits in
// the goqite queue heldQueue(name), with a timeout that never comes, so that
// receives on the queue never scan it; its release moves it back.
const parkedTimeout = "9999-12-31T23:59:59.999Z"

const heldSuffix = "~held"

func heldQueue(name string) string { return name + heldSuffix }

func gqTime(t time.Time) string { return t.UTC().Format(goqiteLayout) }

// visibleAt is when a message scheduled for t becomes visible: t rounded up
// to goqite's millisecond, so that "not before t" holds, and a receive at or
// after the returned time (whose now is truncated to the millisecond) finds it.
// A worker waits for this time, not for t, or it would wake a fraction of a
// millisecond early, find nothing and sleep a whole poll interval.
func visibleAt(t time.Time) time.Time {
	t = t.UTC()
	if r := t.Sub(t.Truncate(time.Millisecond)); r > 0 {
		t = t.Add(time.Millisecond - r)
	}
	return t
}

func parseGQ(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	return t.UTC(), err
}

// newID makes a message id in goqite's own format ("m_" and 32 hex
// digits): the first 16 digits are the wall clock in nanoseconds, the last
// 16 random. Ids made later sort later (mostly: other processes' ids, or a
// clock stepped back, interleave; nothing relies on their order), so a send
// appends to the indexes that hold message ids — goqite's primary key,
// queue_order's message_id — where a random id landed on a page of its own
// in each: a batch of concurrent sends then dirtied, journaled and wrote to
// the WAL one leaf page per message and index instead of one per batch.
func newID() ID {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(time.Now().UnixNano()))
	_, _ = rand.Read(b[8:])
	return ID("m_" + hex.EncodeToString(b[:]))
}

// orderedID marks the id of a message with an order key ("o_" instead of
// "m_"), so receives look up order keys only for those messages.
func orderedID(id ID) ID { return "o_" + id[2:] }

func isOrdered(id ID) bool { return strings.HasPrefix(string(id), "o_") }
