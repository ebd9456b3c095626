package backend

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/telemetry"
)

var (
	metricEmitted = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_bot_outbox_emitted_events_total",
		Help: "Outbox events emitted, by event type: counted once their transaction committed.",
	}, []string{"event_type"})
	metricAcked = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_bot_outbox_acked_events_total",
		Help: "Outbox events changed by an ack, by outcome (processed, retry, dead_letter, closed).",
	}, []string{"outcome"})
	metricWaiters = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_bot_outbox_long_polling_requests",
		Help: "GET /bot/events/pending requests long-polling right now.",
	})
)

// Ack outcomes, the values of the acked metric's outcome label and of the log key.
const (
	outcomeProcessed  = "processed"
	outcomeRetry      = "retry"
	outcomeDeadLetter = "dead_letter"
	outcomeClosed     = "closed"
)

// ackOutcomes lists the ack outcomes, whose series exist at 0 from NewOutbox on.
var ackOutcomes = []string{outcomeProcessed, outcomeRetry, outcomeDeadLetter, outcomeClosed}

// maxErrorText caps a stored last_error.
const maxErrorText = 2000

// maxAckIDs caps the ids of one ack (processed and retry together).
const maxAckIDs = 10_000

// OutboxOpts configure NewOutbox.
type OutboxOpts struct {
	DB *store.DB
	// Logger gets the dead-letter lines; nil discards.
	Logger *slog.Logger
	// PollInterval is how often a long-polling pending request looks at the
	// table when nothing in this process woke it (emits from another process,
	// retries coming due). Default 1 s.
	PollInterval time.Duration
}

// Outbox is the backend's transactional outbox bot_event_outbox: emitters,
// the pending query with its long-poll, ack, and the operator's view.
type Outbox struct {
	db   *store.DB
	log  *slog.Logger
	poll time.Duration
	wake notifier
	// idle counts long-polls that found nothing and sleep until woken.
	idle atomic.Int32
	// stopping is closed by StopWaiting: long-polls answer at once from then on.
	stopping chan struct{}
	stopOnce sync.Once
}

// NewOutbox returns an Outbox on opts.DB. A nil DB is a wiring mistake and panics.
func NewOutbox(opts OutboxOpts) *Outbox {
	if opts.DB == nil {
		panic("backend: NewOutbox needs a DB")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	// An alert on emits or acks sees 0, not "no data", before the first one.
	for _, t := range contract.EventTypes {
		metricEmitted.WithLabelValues(string(t))
	}
	for _, o := range ackOutcomes {
		metricAcked.WithLabelValues(o)
	}
	return &Outbox{db: opts.DB, log: opts.Logger, poll: opts.PollInterval, stopping: make(chan struct{})}
}

// StopWaiting ends every long-poll (it answers what it has, usually nothing)
// and makes later ones answer at once, so an HTTP server's graceful shutdown
// does not wait out a 30 s wait: register it with http.Server.RegisterOnShutdown.
func (o *Outbox) StopWaiting() { o.stopOnce.Do(func() { close(o.stopping) }) }

// notifier wakes every waiter at once: a waiter takes the current channel,
// and Notify closes it and puts a fresh one in its place.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func (n *notifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
}

// Notify wakes the long-polling pending requests of this process. Call it
// after committing a transaction that used an Emit…Tx method; Tx does it for
// you. A missed Notify delays an event by at most the poll interval.
func (o *Outbox) Notify() { o.wake.notify() }

// Tx runs fn in a write transaction (db.Tx) and, once it committed, wakes the
// long-polling consumers. Use it around business changes that emit.
func (o *Outbox) Tx(ctx context.Context, fn store.TxFunc) error {
	if err := o.db.Tx(ctx, fn); err != nil {
		return err
	}
	o.Notify()
	return nil
}

// Target names the user an event is about. The zero value of a field is NULL
// in the row; at least one field should be set for the per-user order to mean
// anything.
type Target struct {
	MagnetUID  contract.UID
	TelegramID contract.TelegramID
}

func (t Target) ptrs() (*contract.UID, *contract.TelegramID) {
	var (
		uid *contract.UID
		tg  *contract.TelegramID
	)
	if t.MagnetUID != 0 {
		uid = &t.MagnetUID
	}
	if t.TelegramID != "" {
		tg = &t.TelegramID
	}
	return uid, tg
}

// userKey is the stored grouping key. The numbers are zero-padded so that the
// text order of keys is the numeric order of ids within each kind.
func userKey(uid *contract.UID, tg *contract.TelegramID) string {
	switch {
	case uid != nil:
		return fmt.Sprintf("uid:%020d", int64(*uid))
	case tg != nil:
		n, _ := strconv.ParseInt(string(*tg), 10, 64)
		return fmt.Sprintf("tg:%020d", n)
	default:
		return ""
	}
}

// NewEvent is an event to emit.
type NewEvent struct {
	Type    contract.EventType
	Target  Target
	Payload json.RawMessage // nil or JSON null: no payload
}

const insertEventSQL = `
	insert into bot_event_outbox (event_type, telegram_id, magnet_uid, payload, created_at, attempts, user_key, traceparent)
	values (?, ?, ?, ?, ?, 0, ?, ?)
	returning id`

// lockUserSQL is how EmitTx, on PostgreSQL, makes one user's events commit
// in id order: a transaction-scoped advisory lock on the user's key, taken
// before the insert and held to the commit. An id is assigned at insert, not
// at commit, so without it two transactions emitting for one user could
// commit out of id order, and a consumer that handled the later id (already
// committed) would get the earlier one afterwards — the per-user order
// broken. SQLite's single writer commits in insert order by itself. The lock
// is in a class of its own (the first key), apart from other advisory locks,
// and the users share 256 of them by a hash of their key: a transaction that
// emits for thousands of users holds at most 256 locks of the server's shared
// lock table, and two users of one lock only wait for each other's commit.
const lockUserSQL = `select pg_advisory_xact_lock(1651471480, hashtext(cast(? as text)) & 255)`

// EmitTx writes ev inside the caller's transaction with exactly one INSERT
// (on PostgreSQL, behind the user's advisory lock: see lockUserSQL), so the
// event commits or rolls back with the caller's business change, and one
// user's events commit in id order. Call Notify after the commit (or use Tx).
//
// The emit is a producer span, bot.outbox.emit, in the trace of ctx (the
// backend action's); the row keeps that span's traceparent, which GET
// /bot/events/pending hands to the bot so that its handling links to it.
func (o *Outbox) EmitTx(ctx context.Context, tx *sql.Tx, ev NewEvent) (id contract.EventID, err error) {
	if !ev.Type.Valid() {
		return 0, contract.Invalidf("unknown event type %q", ev.Type)
	}
	ctx, span := telemetry.Start(ctx, "bot.outbox.emit", trace.WithSpanKind(trace.SpanKindProducer))
	defer func() { endEmit(span, id, err) }()
	if span.IsRecording() {
		span.SetAttributes(emitAttributes(ev)...)
	}
	var payload any
	if p := bytes.TrimSpace(ev.Payload); len(p) > 0 && string(p) != "null" {
		if !json.Valid(p) || p[0] != '{' {
			return 0, contract.Invalidf("payload must be a JSON object or null")
		}
		payload = string(p)
	}
	uid, tg := ev.Target.ptrs()
	key := userKey(uid, tg)
	if o.db.Postgres() {
		if _, err := tx.ExecContext(ctx, lockUserSQL, key); err != nil {
			return 0, fmt.Errorf("emit %s: lock the user's events: %w", ev.Type, err)
		}
	}
	err = tx.QueryRowContext(ctx, insertEventSQL,
		string(ev.Type), nullString(tg), nullUID(uid), payload, store.TS(o.db.Now()), key, telemetry.Traceparent(ctx),
	).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("emit %s: %w", ev.Type, err)
	}
	o.db.AfterCommit(tx, func() { metricEmitted.WithLabelValues(string(ev.Type)).Inc() })
	return id, nil
}

// emitAttributes name what an emit is about: its type and its user, by the
// ids the console's search finds a trace by.
func emitAttributes(ev NewEvent) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("bot.event_type", string(ev.Type)),
	}
	if ev.Target.TelegramID != "" {
		attrs = append(attrs, telemetry.String("telegram.user_id", string(ev.Target.TelegramID)))
	}
	if ev.Target.MagnetUID != 0 {
		attrs = append(attrs, telemetry.String("bot.magnet_uid", strconv.FormatInt(int64(ev.Target.MagnetUID), 10)))
	}
	return attrs
}

// endEmit ends an emit's span with the event's id, once the insert gave one.
func endEmit(span trace.Span, id contract.EventID, err error) {
	if id != 0 && span.IsRecording() {
		span.SetAttributes(attribute.Int64("bot.event_id", int64(id)))
	}
	telemetry.End(span, err)
}

// Emit writes ev in a transaction of its own (exactly one INSERT) and wakes
// the long-polling consumers once it committed.
func (o *Outbox) Emit(ctx context.Context, ev NewEvent) (contract.EventID, error) {
	var id contract.EventID
	err := o.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		id, err = o.EmitTx(ctx, tx, ev)
		return err
	})
	return id, err
}

func typed[P any](t contract.EventType, target Target, p P) (NewEvent, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return NewEvent{}, fmt.Errorf("marshal %s payload: %w", t, err)
	}
	return NewEvent{Type: t, Target: target, Payload: b}, nil
}

func (o *Outbox) emitTyped(ctx context.Context, tx *sql.Tx, ev NewEvent, err error) (contract.EventID, error) {
	if err != nil {
		return 0, err
	}
	if tx == nil {
		return o.Emit(ctx, ev)
	}
	return o.EmitTx(ctx, tx, ev)
}

// EmitWalletConnected emits wallet_connected in its own transaction.
func (o *Outbox) EmitWalletConnected(ctx context.Context, t Target, p contract.WalletConnectedPayload) (contract.EventID, error) {
	ev, err := typed(contract.EventWalletConnected, t, p)
	return o.emitTyped(ctx, nil, ev, err)
}

// EmitWalletConnectedTx emits wallet_connected inside tx.
func (o *Outbox) EmitWalletConnectedTx(ctx context.Context, tx *sql.Tx, t Target, p contract.WalletConnectedPayload) (contract.EventID, error) {
	ev, err := typed(contract.EventWalletConnected, t, p)
	return o.emitTyped(ctx, tx, ev, err)
}

// EmitRegistered emits registered in its own transaction.
func (o *Outbox) EmitRegistered(ctx context.Context, t Target, p contract.RegisteredPayload) (contract.EventID, error) {
	ev, err := typed(contract.EventRegistered, t, p)
	return o.emitTyped(ctx, nil, ev, err)
}

// EmitRegisteredTx emits registered inside tx.
func (o *Outbox) EmitRegisteredTx(ctx context.Context, tx *sql.Tx, t Target, p contract.RegisteredPayload) (contract.EventID, error) {
	ev, err := typed(contract.EventRegistered, t, p)
	return o.emitTyped(ctx, tx, ev, err)
}

// EmitNewPartner emits new_partner (to the leader) in its own transaction.
func (o *Outbox) EmitNewPartner(ctx context.Context, t Target, p contract.NewPartnerPayload) (contract.EventID, error) {
	ev, err := typed(contract.EventNewPartner, t, p)
	return o.emitTyped(ctx, nil, ev, err)
}

// EmitNewPartnerTx emits new_partner inside tx.
func (o *Outbox) EmitNewPartnerTx(ctx context.Context, tx *sql.Tx, t Target, p contract.NewPartnerPayload) (contract.EventID, error) {
	ev, err := typed(contract.EventNewPartner, t, p)
	return o.emitTyped(ctx, tx, ev, err)
}

// EmitStatusNftActivated emits status_nft_activated in its own transaction.
func (o *Outbox) EmitStatusNftActivated(ctx context.Context, t Target, p contract.StatusNftActivatedPayload) (contract.EventID, error) {
	ev, err := typed(contract.EventStatusNftActivated, t, p)
	return o.emitTyped(ctx, nil, ev, err)
}

// EmitStatusNftActivatedTx emits status_nft_activated inside tx.
func (o *Outbox) EmitStatusNftActivatedTx(ctx context.Context, tx *sql.Tx, t Target, p contract.StatusNftActivatedPayload) (contract.EventID, error) {
	ev, err := typed(contract.EventStatusNftActivated, t, p)
	return o.emitTyped(ctx, tx, ev, err)
}

// EmitReactivation emits the reserved reactivation type (operators only).
func (o *Outbox) EmitReactivation(ctx context.Context, t Target, payload json.RawMessage) (contract.EventID, error) {
	return o.Emit(ctx, NewEvent{Type: contract.EventReactivation, Target: t, Payload: payload})
}

// EmitStructOvertake emits the reserved struct_overtake type (operators only).
func (o *Outbox) EmitStructOvertake(ctx context.Context, t Target, payload json.RawMessage) (contract.EventID, error) {
	return o.Emit(ctx, NewEvent{Type: contract.EventStructOvertake, Target: t, Payload: payload})
}

// pendingSQL is the spec's query. The spec orders by COALESCE(magnet_uid,
// telegram_id), which mixes an integer and a text column (and would interleave
// uid 5 with Telegram id 5); user_key is that identity as one text value
// ("uid:<20 digits>" or "tg:<20 digits>", written at emit), so each user's
// events come together, in id order, on every dialect.
//
// Beyond the spec, an event waits while an earlier event of the same user
// waits for its retry (next_retry_at in the future): otherwise a later event
// would be handled in the next page, before the retried one, and the per-user
// order the consumer keeps inside one page would break across pages. A
// dead-lettered event no longer holds its user back.
//
// The order names the index's leading columns too (processed_at,
// dead_lettered_at: both NULL in every row the query keeps, so they change
// nothing): PostgreSQL does not take "is null" as an equality that drops a
// column from the order, and, asked for user_key, id alone, sorts the whole
// backlog instead of walking idx_bot_event_outbox_pending. Spelled out, both
// dialects walk the index and stop at the limit (TestPendingQueryPlan).
const pendingSQL = `
	select o.id, o.event_type, o.telegram_id, o.magnet_uid, o.payload, o.created_at, o.attempts, o.traceparent
	from bot_event_outbox o
	where o.processed_at is null and o.dead_lettered_at is null
	  and (o.next_retry_at is null or o.next_retry_at <= ?)
	  and not exists (
	    select 1 from bot_event_outbox h
	    where h.processed_at is null and h.dead_lettered_at is null
	      and h.user_key = o.user_key and h.id < o.id
	      and h.next_retry_at > ?)
	order by o.processed_at, o.dead_lettered_at, o.user_key, o.id
	limit ?`

// Pending returns up to limit due, unprocessed events in the contract's order
// (limit is clamped with ClampPendingLimit).
func (o *Outbox) Pending(ctx context.Context, limit int) ([]contract.Event, error) {
	now := store.TS(o.db.Now())
	rows, err := o.db.Read.QueryContext(ctx, pendingSQL, now, now, contract.ClampPendingLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("pending events: %w", err)
	}
	defer rows.Close()
	events := make([]contract.Event, 0)
	for rows.Next() {
		var (
			e       contract.Event
			tg      sql.NullString
			uid     sql.NullInt64
			payload sql.NullString
			created store.Timestamp
		)
		if err := rows.Scan(&e.ID, &e.EventType, &tg, &uid, &payload, &created, &e.Attempts, &e.Traceparent); err != nil {
			return nil, fmt.Errorf("pending events: %w", err)
		}
		e.TelegramID, e.MagnetUID = tgPtr(tg), uidPtr(uid)
		if payload.Valid {
			e.Payload = json.RawMessage(payload.String)
		}
		e.CreatedAt = created.Time
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pending events: %w", err)
	}
	return events, nil
}

// WaitPending is Pending that, when nothing is due, waits up to wait for an
// event: it wakes when an emit of this process commits (Notify) or the
// store's clock is moved by hand (store.DB.OnClockMove), and looks again
// every poll interval for everything else. It returns an empty list when
// wait passes, and ctx's error when ctx ends first.
func (o *Outbox) WaitPending(ctx context.Context, limit int, wait time.Duration) ([]contract.Event, error) {
	wait = min(wait, contract.MaxPendingWait)
	if wait <= 0 {
		return o.Pending(ctx, limit)
	}
	metricWaiters.Inc()
	defer metricWaiters.Dec()
	// A clock moved by hand (a test's) may make retries due: look again.
	defer o.db.OnClockMove(o.Notify)()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(o.poll)
	defer tick.Stop()
	for {
		woken := o.wake.wait() // taken before the query, so no Notify falls between
		events, err := o.Pending(ctx, limit)
		if err != nil || len(events) > 0 {
			return events, err
		}
		o.idle.Add(1)
		select {
		case <-woken:
		case <-tick.C:
		case <-deadline.C:
			o.idle.Add(-1)
			return events, nil
		case <-o.stopping:
			o.idle.Add(-1)
			return events, nil
		case <-ctx.Done():
			o.idle.Add(-1)
			return nil, ctx.Err()
		}
		o.idle.Add(-1)
	}
}

// validate refuses an id in both lists, and error keys that are not ids.
func validateAck(r contract.AckRequest) error {
	if n := len(r.ProcessedIDs) + len(r.RetryIDs); n > maxAckIDs {
		return contract.Invalidf("an ack takes at most %d ids, got %d", maxAckIDs, n)
	}
	processed := make(map[contract.EventID]bool, len(r.ProcessedIDs))
	for _, id := range r.ProcessedIDs {
		processed[id] = true
	}
	for _, id := range r.RetryIDs {
		if processed[id] {
			return contract.Invalidf("event %d is in both processedIds and retryIds", id)
		}
	}
	for k := range r.Errors {
		if _, err := parseEventID(k); err != nil {
			return contract.Invalidf("errors key %q is not an event id", k)
		}
	}
	return nil
}

// retryDecision is what a retry ack does to an event.
type retryDecision struct {
	Attempts    int
	NextRetryAt time.Time // zero when the event leaves the retry loop
	DeadLetter  bool      // registered after BOT_OUTBOX_MAX_ATTEMPTS: kept unprocessed, dead-lettered
	Close       bool      // any other type after BOT_OUTBOX_MAX_ATTEMPTS: processed_at = now
}

// decideRetry is the spec's rule: attempts += 1; while attempts <
// BOT_OUTBOX_MAX_ATTEMPTS the event is due again after
// BOT_OUTBOX_BACKOFF_BASE_SECONDS · 2^attempts seconds; at the limit a
// registered event is dead-lettered and any other type is closed.
func decideRetry(t contract.EventType, attempts int, now time.Time) retryDecision {
	d := retryDecision{Attempts: attempts + 1}
	switch {
	case d.Attempts < contract.BOT_OUTBOX_MAX_ATTEMPTS:
		backoff := time.Duration(contract.BOT_OUTBOX_BACKOFF_BASE_SECONDS<<d.Attempts) * time.Second // 60 s · 2^attempts
		d.NextRetryAt = now.Add(backoff)
	case t == contract.EventRegistered:
		d.DeadLetter = true
	default:
		d.Close = true
	}
	return d
}

const (
	ackProcessedSQL = `update bot_event_outbox set processed_at = ? where id = ? and processed_at is null`
	// A retry counts only for an event that is due: a repeated retry ack finds
	// next_retry_at in the future and changes nothing.
	ackRetrySelectSQL = `
		select event_type, attempts, magnet_uid, telegram_id from bot_event_outbox
		where id = ? and processed_at is null and dead_lettered_at is null
		  and (next_retry_at is null or next_retry_at <= ?)`
	// The update applies only to the row as the select read it (the same
	// attempts, still unprocessed, undead and due): on PostgreSQL another ack
	// may have changed it between the two — processed it, or retried it —
	// and then this retry changes nothing, where writing the values decided
	// from the stale read would clear the other's processed_at (the event
	// handed out again) or count its attempt twice. A READ COMMITTED update
	// that waited for the other's row lock checks its condition against the
	// row the other committed.
	ackRetryUpdateSQL = `
		update bot_event_outbox
		set attempts = ?, last_attempt_at = ?, last_error = ?, next_retry_at = ?, processed_at = ?, dead_lettered_at = ?
		where id = ? and attempts = ? and processed_at is null and dead_lettered_at is null
		  and (next_retry_at is null or next_retry_at <= ?)`
)

type deadLetter struct {
	id      contract.EventID
	user    string
	lastErr string
}

// Ack applies a consumer's ack in one transaction. It is idempotent: unknown
// ids are ignored, processed events stay as they are, and a retry only counts
// for a due event. An id in both lists is refused before anything changes.
func (o *Outbox) Ack(ctx context.Context, req contract.AckRequest) (contract.AckResult, error) {
	return o.AckBy(ctx, req, "")
}

// AckBy is Ack for the consumer instance named (its X-Switchyard-Instance
// header; "" for this process), under which the ack's attempts go into the
// events' attempt history (attempts.go).
func (o *Outbox) AckBy(ctx context.Context, req contract.AckRequest, instance string) (contract.AckResult, error) {
	instance = consumerInstance(instance)
	if err := validateAck(req); err != nil {
		return contract.AckResult{}, err
	}
	reasons := make(map[contract.EventID]string, len(req.Errors))
	for k, v := range req.Errors {
		id, _ := parseEventID(k) // validated above
		if len(v) > maxErrorText {
			v = strings.ToValidUTF8(v[:maxErrorText], "")
		}
		reasons[id] = v
	}
	var (
		res  contract.AckResult
		dead []deadLetter
	)
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		res, dead = contract.AckResult{}, dead[:0]
		processed := make([]contract.EventID, 0, len(req.ProcessedIDs))
		now := o.db.Now()
		for _, id := range req.ProcessedIDs {
			r, err := tx.ExecContext(ctx, ackProcessedSQL, store.TS(now), id)
			if err != nil {
				return fmt.Errorf("ack processed %d: %w", id, err)
			}
			n, err := r.RowsAffected()
			if err != nil {
				return err
			}
			res.Processed += int(n)
			if n == 1 {
				processed = append(processed, id)
			}
		}
		if err := recordProcessed(ctx, tx, processed, instance, now); err != nil {
			return err
		}
		for _, id := range req.RetryIDs {
			var (
				typ      contract.EventType
				attempts int
				uid      sql.NullInt64
				tg       sql.NullString
			)
			err := tx.QueryRowContext(ctx, ackRetrySelectSQL, id, store.TS(now)).Scan(&typ, &attempts, &uid, &tg)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("ack retry %d: %w", id, err)
			}
			d := decideRetry(typ, attempts, now)
			var processedAt, deadAt store.Timestamp
			switch {
			case d.DeadLetter:
				deadAt = store.TS(now)
			case d.Close:
				processedAt = store.TS(now)
			}
			lastErr := sql.NullString{}
			if reason, ok := reasons[id]; ok {
				lastErr = sql.NullString{String: reason, Valid: true}
			}
			r, err := tx.ExecContext(ctx, ackRetryUpdateSQL,
				d.Attempts, store.TS(now), lastErr, store.TS(d.NextRetryAt), processedAt, deadAt,
				id, attempts, store.TS(now))
			if err != nil {
				return fmt.Errorf("ack retry %d: %w", id, err)
			}
			if n, err := r.RowsAffected(); err != nil {
				return fmt.Errorf("ack retry %d: %w", id, err)
			} else if n == 0 {
				continue // another ack changed the event first: this one counts for nothing
			}
			if err := recordAttempt(ctx, tx, id, d.Attempts, retryOutcome(d), lastErr.String, instance, now); err != nil {
				return err
			}
			switch {
			case d.DeadLetter:
				res.DeadLettered++
			case d.Close:
				res.Closed++
			default:
				res.Retried++
			}
			if d.DeadLetter {
				dead = append(dead, deadLetter{id: id, user: contract.UserKey(uidPtr(uid), tgPtr(tg)), lastErr: lastErr.String})
			}
		}
		return nil
	})
	if err != nil {
		return contract.AckResult{}, err
	}
	metricAcked.WithLabelValues(outcomeProcessed).Add(float64(res.Processed))
	metricAcked.WithLabelValues(outcomeRetry).Add(float64(res.Retried))
	metricAcked.WithLabelValues(outcomeDeadLetter).Add(float64(res.DeadLettered))
	metricAcked.WithLabelValues(outcomeClosed).Add(float64(res.Closed))
	for _, d := range dead {
		o.log.LogAttrs(ctx, slog.LevelError,
			fmt.Sprintf("[bot-outbox][DEAD-LETTER] registered event %d exhausted %d attempts; redrive it from the admin API", d.id, contract.BOT_OUTBOX_MAX_ATTEMPTS),
			slog.Int64("event_id", int64(d.id)),
			slog.String("user_id", d.user),
			slog.String("outcome", outcomeDeadLetter),
			slog.String("last_error", d.lastErr))
	}
	return res, nil
}

// EventState is where an event stands, for the operator.
type EventState string

// Event states. Pending has never been retried; retrying has; processed is
// closed (handled, or forced closed after the attempts ran out); dead is a
// registered event that ran out of attempts and waits for a redrive.
const (
	StatePending    EventState = "pending"
	StateRetrying   EventState = "retrying"
	StateProcessed  EventState = "processed"
	StateDead       EventState = "dead"
	stateUnfiltered EventState = ""
)

// EventRecord is the whole outbox row, for the operator.
type EventRecord struct {
	ID             contract.EventID     `json:"id"`
	EventType      contract.EventType   `json:"eventType"`
	TelegramID     *contract.TelegramID `json:"telegramId"`
	MagnetUID      *contract.UID        `json:"magnetUid"`
	Payload        json.RawMessage      `json:"payload"`
	CreatedAt      time.Time            `json:"createdAt"`
	ProcessedAt    *time.Time           `json:"processedAt"`
	Attempts       int                  `json:"attempts"`
	ClaimedAt      *time.Time           `json:"claimedAt"`
	LockedUntil    *time.Time           `json:"lockedUntil"`
	LastError      *string              `json:"lastError"`
	LastAttemptAt  *time.Time           `json:"lastAttemptAt"`
	NextRetryAt    *time.Time           `json:"nextRetryAt"`
	DeadLettered   bool                 `json:"deadLettered"`
	DeadLetteredAt *time.Time           `json:"deadLetteredAt"`
	State          EventState           `json:"state"`
	// Traceparent is the emit's span (bot.outbox.emit), when it was traced:
	// the trace of the backend action that wrote the event.
	Traceparent string `json:"traceparent,omitempty"`
}

// EventFilter selects events for ListEvents. Zero fields select everything;
// events come newest first, and BeforeID pages backwards.
type EventFilter struct {
	State EventState
	Type  contract.EventType
	// MagnetUID and TelegramID keep the events about one user: by uid, by
	// Telegram id, or — both set — by either (an event names a user by one
	// or both).
	MagnetUID  contract.UID
	TelegramID contract.TelegramID
	// Search keeps the events a term finds (SearchEvents says how).
	Search string
	Limit  int // clamped like the pending limit
	// BeforeID keeps the events older than it (an older window); AfterID,
	// the events newer than it, listed oldest first — nearest AfterID
	// first — so that a newer window of Limit rows is the one next to it.
	BeforeID contract.EventID
	AfterID  contract.EventID
}

const recordColumns = `id, event_type, telegram_id, magnet_uid, payload, created_at, processed_at, attempts,
	claimed_at, locked_until, last_error, last_attempt_at, next_retry_at, dead_lettered_at, traceparent`

// ListEvents lists events for the operator: one window of the events of a
// filter, in id order (events.go).
func (o *Outbox) ListEvents(ctx context.Context, f EventFilter) ([]EventRecord, error) {
	q, args, err := f.listSQL()
	if err != nil {
		return nil, err
	}
	rows, err := o.db.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	list := make([]EventRecord, 0)
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		list = append(list, r)
	}
	return list, rows.Err()
}

// Counts are the outbox's unfinished events by state.
type Counts struct {
	Pending, Retrying, Dead int64
}

const countUnfinishedSQL = `
	select
		coalesce(sum(case when dead_lettered_at is null and attempts = 0 then 1 else 0 end), 0),
		coalesce(sum(case when dead_lettered_at is null and attempts > 0 then 1 else 0 end), 0),
		coalesce(sum(case when dead_lettered_at is not null then 1 else 0 end), 0)
	from bot_event_outbox where processed_at is null`

// CountUnfinished counts the events not processed yet, by state.
func (o *Outbox) CountUnfinished(ctx context.Context) (Counts, error) {
	var c Counts
	if err := o.db.Read.QueryRowContext(ctx, countUnfinishedSQL).Scan(&c.Pending, &c.Retrying, &c.Dead); err != nil {
		return Counts{}, fmt.Errorf("count outbox events: %w", err)
	}
	return c, nil
}

// handledEvents are the outbox's events by when they were processed: the
// index on (processed_at, id) answers a count from the rows of its range.
var handledEvents = store.Stamped{Table: "bot_event_outbox", Column: "processed_at"}

// CountHandled counts the events processed (handled, or closed after their
// attempts ran out) in [from, to); a zero to has no end.
func (o *Outbox) CountHandled(ctx context.Context, from, to time.Time) (int64, error) {
	n, err := handledEvents.CountBetween(ctx, o.db, from, to)
	if err != nil {
		return 0, fmt.Errorf("count handled outbox events: %w", err)
	}
	return n, nil
}

// deadEvents are the outbox's dead letters by when their attempts ran out
// (processed_at stays NULL in them); the pending index, (processed_at,
// dead_lettered_at, …), answers a count from the rows of its range.
var deadEvents = store.Stamped{Table: "bot_event_outbox", Column: "dead_lettered_at", Where: "processed_at is null"}

// CountDeadLettered counts the events dead-lettered in [from, to) and not
// redriven since; a zero to has no end.
func (o *Outbox) CountDeadLettered(ctx context.Context, from, to time.Time) (int64, error) {
	n, err := deadEvents.CountBetween(ctx, o.db, from, to)
	if err != nil {
		return 0, fmt.Errorf("count dead-lettered outbox events: %w", err)
	}
	return n, nil
}

// GetEvent returns one event's whole row, or ErrEventNotFound.
func (o *Outbox) GetEvent(ctx context.Context, id contract.EventID) (EventRecord, error) {
	return o.getEvent(ctx, o.db.Read, id)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (o *Outbox) getEvent(ctx context.Context, q queryRower, id contract.EventID) (EventRecord, error) {
	r, err := scanRecord(q.QueryRowContext(ctx, `select `+recordColumns+` from bot_event_outbox where id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return EventRecord{}, contract.ErrEventNotFound
	}
	if err != nil {
		return EventRecord{}, fmt.Errorf("get event %d: %w", id, err)
	}
	return r, nil
}

// Redrive puts an unprocessed event (dead-lettered or retrying) back in the
// pending list at once: attempts and next_retry_at are reset and the
// dead-letter mark cleared. A processed event is ErrEventProcessed.
func (o *Outbox) Redrive(ctx context.Context, id contract.EventID) (EventRecord, error) {
	var rec EventRecord
	err := o.Tx(ctx, func(tx *sql.Tx) error {
		// The update itself tells whether the event is still unprocessed: on
		// PostgreSQL an ack may process it between a read and this write.
		r, err := tx.ExecContext(ctx,
			`update bot_event_outbox set attempts = 0, next_retry_at = null, dead_lettered_at = null
			 where id = ? and processed_at is null`, id)
		if err != nil {
			return fmt.Errorf("redrive %d: %w", id, err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return fmt.Errorf("redrive %d: %w", id, err)
		}
		rec, err = o.getEvent(ctx, tx, id)
		if err == nil && n == 0 {
			return contract.ErrEventProcessed
		}
		if err != nil {
			return err
		}
		return recordAttempt(ctx, tx, id, 0, AttemptRedriven, "", queue.Instance(), o.db.Now())
	})
	return rec, err
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(s scanner) (EventRecord, error) {
	var (
		r                                                 EventRecord
		tg, payload, lastErr                              sql.NullString
		uid                                               sql.NullInt64
		created, processed, claimed, locked, lastAt, next store.Timestamp
		dead                                              store.Timestamp
	)
	err := s.Scan(&r.ID, &r.EventType, &tg, &uid, &payload, &created, &processed, &r.Attempts,
		&claimed, &locked, &lastErr, &lastAt, &next, &dead, &r.Traceparent)
	if err != nil {
		return EventRecord{}, err
	}
	r.TelegramID, r.MagnetUID = tgPtr(tg), uidPtr(uid)
	if payload.Valid {
		r.Payload = json.RawMessage(payload.String)
	}
	if lastErr.Valid {
		r.LastError = &lastErr.String
	}
	r.CreatedAt = created.Time
	r.ProcessedAt, r.ClaimedAt, r.LockedUntil = processed.Ptr(), claimed.Ptr(), locked.Ptr()
	r.LastAttemptAt, r.NextRetryAt, r.DeadLetteredAt = lastAt.Ptr(), next.Ptr(), dead.Ptr()
	r.DeadLettered = r.DeadLetteredAt != nil && r.ProcessedAt == nil
	switch {
	case r.ProcessedAt != nil:
		r.State = StateProcessed
	case r.DeadLettered:
		r.State = StateDead
	case r.Attempts > 0:
		r.State = StateRetrying
	default:
		r.State = StatePending
	}
	return r, nil
}

func tgPtr(s sql.NullString) *contract.TelegramID {
	if !s.Valid {
		return nil
	}
	t := contract.TelegramID(s.String)
	return &t
}

func uidPtr(n sql.NullInt64) *contract.UID {
	if !n.Valid {
		return nil
	}
	u := contract.UID(n.Int64)
	return &u
}

func nullString(t *contract.TelegramID) any {
	if t == nil {
		return nil
	}
	return string(*t)
}

func nullUID(u *contract.UID) any {
	if u == nil {
		return nil
	}
	return int64(*u)
}
