package omni

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/telemetry"
)

// ChatOpts configure NewChat. Zero values get defaults.
type ChatOpts struct {
	DB *store.DB
	// Logger gets one line per failure; nil discards.
	Logger *slog.Logger
	// AutoAckText is the automatic acknowledgement of a contact's first
	// message in a thread (DefaultAutoAckText when empty). Operators change
	// it, or switch it off, through the admin API; that choice, once made,
	// wins over these options.
	AutoAckText string
	// DisableAutoAck switches the acknowledgement off by default.
	DisableAutoAck bool
	// GroupChats is what becomes of group, supergroup and channel chats:
	// GroupChatsIgnore (the default when empty) or GroupChatsThread
	// (OMNI_GROUP_CHATS). Any other value panics.
	GroupChats GroupChats
	// Concurrency bounds the envelopes of receiver.flow in hand at once
	// (default 256): they are applied in batches of up to 64 (one receive),
	// each batch in one transaction. Envelopes of one thread are applied one
	// at a time whatever it is. receiver.retry applies retryConcurrency
	// envelopes at once, each in a transaction of its own.
	Concurrency int
	// PollInterval is how often the workers look for envelopes enqueued by
	// another process (default queue.DefaultPollInterval).
	PollInterval time.Duration
	// Retry is receiver.retry's policy: attempts before receiver.dlq and the
	// backoff between them (queue/'s defaults when zero).
	Retry queue.RetryPolicy
}

// Chat is the omni_chat role: it consumes receiver.flow (and receiver.retry),
// applies each envelope to contacts, threads and messages, and puts the
// outgoing commands its rules make on sender.flow. It never calls a provider.
type Chat struct {
	db     *store.DB
	log    *slog.Logger
	opts   ChatOpts
	lane   *lane
	domain *chatDomain
}

// NewChat returns the chat role on opts.DB. A nil DB panics.
func NewChat(opts ChatOpts) *Chat {
	if opts.DB == nil {
		panic("omni: NewChat needs a DB")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 256
	}
	groups, err := ParseGroupChats(string(opts.GroupChats))
	if err != nil {
		panic("omni: NewChat: " + err.Error())
	}
	c := &Chat{
		db:   opts.DB,
		log:  opts.Logger.With(slog.String("role", "chat")),
		opts: opts,
		lane: newLane(opts.DB, "receiver", QueueReceiverFlow, QueueReceiverRetry, opts.Retry, opts.Logger),
	}
	c.domain = newChatDomain(opts.DB, autoAckDefault(opts.AutoAckText, opts.DisableAutoAck))
	c.domain.groups = groups
	declareChatMetrics()
	return c
}

func autoAckDefault(text string, off bool) AutoAckRule {
	if text == "" {
		text = DefaultAutoAckText
	}
	return AutoAckRule{Enabled: !off, Text: text}
}

// newChatDomain wires the chat transactions to sender.flow on db and
// prepares their statements; like queue.New, it must not be called inside
// a transaction.
func newChatDomain(db *store.DB, autoAck AutoAckRule) *chatDomain {
	sender := queue.New(queue.NewOpts{DB: db, Name: QueueSenderFlow, Retry: queue.RetryPolicy{MaxAttempts: flowAttempts}})
	receiver := queue.New(queue.NewOpts{DB: db, Name: QueueReceiverFlow, Retry: queue.RetryPolicy{MaxAttempts: flowAttempts}})
	return &chatDomain{
		now:        db.Now,
		wake:       receiver.WakeTx,
		autoAck:    autoAck,
		lockThread: threadLockQuery(db),
		stmts:      prepareChatQueries(db),
		send: func(ctx context.Context, tx *sql.Tx, cmd SendCommand) error {
			body, err := json.Marshal(cmd)
			if err != nil {
				return err
			}
			_, err = sender.SendTx(ctx, tx, queue.Message{Body: body, Key: cmd.jobKey(), OrderKey: cmd.orderKey()})
			return err
		},
	}
}

// connectionFirst sorts a business connection's update before other
// envelopes.
func connectionFirst(env *Envelope) int {
	if env.EventType == EventConnectionUpdated {
		return 0
	}
	return 1
}

// retryConcurrency is how many envelopes receiver.retry applies at once:
// few, and failing ones, so one at a time each.
const retryConcurrency = 4

// Name names the worker.
func (c *Chat) Name() string { return "omni-chat" }

// Run consumes receiver.flow and receiver.retry until ctx is cancelled, then
// returns once the envelopes in hand are applied and acknowledged.
func (c *Chat) Run(ctx context.Context) error {
	return c.lane.run(ctx,
		queue.WorkerOpts{BatchHandler: c.handleFlowBatch, Concurrency: c.opts.Concurrency, PollInterval: c.opts.PollInterval},
		queue.WorkerOpts{Handler: c.handleRetry, Concurrency: retryConcurrency, PollInterval: c.opts.PollInterval},
	)
}

// decodeEnvelope reads a receiver.flow body; one that cannot be read never
// will be, so it is a permanent failure.
func decodeEnvelope(body []byte) (*Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, queue.Permanent(fmt.Errorf("decode envelope: %w", err))
	}
	if env.Version != EnvelopeVersion {
		return nil, queue.Permanent(fmt.Errorf("envelope version %d, this build reads %d", env.Version, EnvelopeVersion))
	}
	if env.IdempotencyKey == "" {
		return nil, queue.Permanent(errors.New("envelope without idempotencyKey"))
	}
	if err := validFor(&env); err != nil {
		return nil, queue.Permanent(fmt.Errorf("envelope %s: %w", env.IdempotencyKey, err))
	}
	return &env, nil
}

// envelopeOf decodes a message of receiver.flow or receiver.retry. One that
// is no envelope, or an invalid one, it deals with there and then (it is a
// dead letter) and returns nil with what the handler is to return.
func (c *Chat) envelopeOf(m queue.Message) (*Envelope, error) {
	env, err := decodeEnvelope(m.Body)
	if err != nil {
		metricChatEvents.WithLabelValues(eventInvalid, chatDead).Inc()
		return nil, err
	}
	if env.EventType == EventInvalid {
		return nil, c.deadInvalid(env)
	}
	return env, nil
}

// flowItem is an envelope of a receiver.flow batch and what became of it.
type flowItem struct {
	i     int // its message's index in the batch
	m     queue.Message
	env   *Envelope
	key   string
	wait  time.Duration // before it is tried again, when it waits for its connection
	await bool          // it may wait for its connection (decideAwaitConnection)
	// ctx carries its apply's span (span), in the trace of its webhook:
	// its savepoint and what it queues are in that trace.
	ctx  context.Context
	span trace.Span

	// What the batch's transaction did with it; each run of the
	// transaction function starts afresh (reset).
	res      applied
	done     bool  // applied, ignored or a duplicate: res says which
	moved    bool  // handed to receiver.retry: its thread is parked
	applyErr error // why a moved envelope did not apply (nil: it followed its thread)
	waiting  bool  // it waits for its business connection; err says so
	err      error // its message's result, when not nil
}

func (it *flowItem) reset() {
	it.res, it.done, it.moved, it.applyErr, it.waiting, it.err = applied{}, false, false, nil, false, nil
}

// handleFlowBatch applies the envelopes of one receive from receiver.flow,
// in one transaction, each in a savepoint of its own (queue.SavepointTx):
// the transaction has one commit, and an envelope that fails leaves its
// neighbours applied. Its thread's later envelopes are behind it in
// receiver.flow (one message per order key is in hand at a time), so per
// thread they are still applied one at a time, in order. An envelope whose
// thread has envelopes waiting in receiver.retry goes behind them; one that
// fails to apply moves to receiver.retry itself, and later envelopes of its
// thread follow it there; a business message whose connection is not known
// yet waits in place (decideAwaitConnection).
func (c *Chat) handleFlowBatch(ctx context.Context, msgs []queue.Message) []error {
	errs := make([]error, len(msgs))
	items := make([]*flowItem, 0, len(msgs))
	keys := make([]string, 0, len(msgs))
	now := c.db.Now()
	for i, m := range msgs {
		env, err := c.envelopeOf(m)
		if env == nil {
			errs[i] = err
			continue
		}
		it := &flowItem{i: i, m: m, env: env, key: OrderingKey(env)}
		it.wait, it.await = decideAwaitConnection(env.ReceivedAt, now, m.Attempt, flowAttempts)
		items = append(items, it)
		keys = append(keys, it.key)
	}
	if len(items) == 0 {
		return errs
	}
	// A business connection goes before the batch's messages: they may
	// need it, and envelopes of different order keys have no order to keep
	// (those of one key keep theirs: the sort is stable).
	slices.SortStableFunc(items, func(a, b *flowItem) int {
		return cmp.Compare(connectionFirst(a.env), connectionFirst(b.env))
	})
	bctx, batch := batchSpan(ctx, len(items))
	var link context.Context
	if batch.IsRecording() {
		link = bctx
	}
	for _, it := range items {
		it.ctx, it.span = applySpan(ctx, it.m, it.env, link)
	}
	parked, err := c.lane.parkedKeys(bctx, keys)
	if err == nil {
		err = c.db.Tx(bctx, func(tx *sql.Tx) error { return c.applyFlowTx(bctx, tx, items, parked) })
	}
	telemetry.End(batch, err)
	if err != nil {
		// Nothing of the batch was kept (or, stopping, it is abandoned): the
		// queue delivers each message again.
		for _, it := range items {
			errs[it.i] = err
			endApply(it.span, chatRetry, applied{}, err)
		}
		return errs
	}
	for _, it := range items {
		errs[it.i] = c.flowOutcome(it)
		outcome, err := flowItemOutcome(it)
		endApply(it.span, outcome, it.res, err)
	}
	return errs
}

// applyFlowTx is handleFlowBatch's transaction. Each envelope that comes to
// an end in it (applied, a duplicate, moved to receiver.retry) is
// acknowledged in it too, in the savepoint of its effect: the next envelope
// of its thread is released by the same commit, and an envelope delivered
// again meanwhile (its timeout passed) takes no effect here. It fails only
// when the transaction cannot go on (the ledger cannot be read, a savepoint
// fails, the role is stopping); what fails for one envelope is that
// envelope's.
func (c *Chat) applyFlowTx(ctx context.Context, tx *sql.Tx, items []*flowItem, parked map[string]bool) error {
	fresh := make([]string, 0, len(items))
	for _, it := range items {
		it.reset()
		if !parked[it.key] {
			fresh = append(fresh, it.env.IdempotencyKey)
		}
	}
	seen, err := c.domain.ledgerSeenTx(ctx, tx, fresh)
	if err != nil {
		return err
	}
	for _, it := range items {
		env := it.env
		// settle acknowledges the envelope's message and runs fn in one
		// savepoint (fn last: what it gives AfterCommit is then kept only
		// with its writes); stale says the acknowledgement failed.
		stale := false
		settle := func(fn func() error) error {
			stale = false
			return queue.SavepointTx(it.ctx, c.db, tx, func() error {
				if err := c.lane.flow.AckTx(it.ctx, tx, it.m); err != nil {
					stale = true
					return err
				}
				return fn()
			})
		}
		if parked[it.key] {
			// Behind its thread's envelopes in receiver.retry.
			err := settle(func() error { return c.lane.escalateTx(it.ctx, tx, it.m.Body, env.IdempotencyKey, it.key, 0) })
			if errors.Is(err, queue.ErrSavepoint) || ctx.Err() != nil {
				return err
			}
			it.moved, it.err = err == nil, err
			continue
		}
		if seen[env.IdempotencyKey] {
			err := settle(func() error { return nil })
			if errors.Is(err, queue.ErrSavepoint) || ctx.Err() != nil {
				return err
			}
			it.res, it.done, it.err = applied{Outcome: outcomeDuplicate}, err == nil, err
			continue
		}
		var res applied
		applyErr := settle(func() error {
			var err error
			res, err = c.domain.applyNewTx(it.ctx, tx, env, it.await)
			return err
		})
		switch {
		case applyErr == nil:
			it.res, it.done = res, true
			seen[env.IdempotencyKey] = true
			continue
		case errors.Is(applyErr, queue.ErrSavepoint), ctx.Err() != nil:
			return applyErr // stopping: the batch comes back after its timeout
		case stale:
			it.err = applyErr // delivered again meanwhile: that delivery applies it
			continue
		case errors.Is(applyErr, errConnectionUnknown):
			// It waits in place, holding its thread's later envelopes behind it.
			it.waiting, it.err = true, applyErr
			continue
		}
		// Nothing of the failed apply was kept: hand the envelope to the retry lane.
		delay := c.lane.policy.Backoff(1)
		moveErr := settle(func() error { return c.lane.escalateTx(it.ctx, tx, it.m.Body, env.IdempotencyKey, it.key, delay) })
		if errors.Is(moveErr, queue.ErrSavepoint) || ctx.Err() != nil {
			return errors.Join(applyErr, moveErr)
		}
		if moveErr != nil {
			it.err = errors.Join(applyErr, moveErr) // retried in receiver.flow
			continue
		}
		it.moved, it.applyErr = true, applyErr
	}
	return nil
}

// flowOutcome counts and logs what the committed batch did with it, and
// returns its message's result.
func (c *Chat) flowOutcome(it *flowItem) error {
	env := it.env
	switch {
	case it.done:
		c.record(env, it.res)
	case it.waiting:
		return c.awaitConnection(env, it.wait, it.err)
	case it.moved && it.applyErr != nil:
		metricChatEvents.WithLabelValues(string(env.EventType), chatRetry).Inc()
		c.log.Warn("envelope not applied; moved to "+QueueReceiverRetry, slog.String("event_id", env.IdempotencyKey),
			slog.String("outcome", "retry"), slog.Any("err", it.applyErr))
	}
	return it.err
}

// handleRetry applies an envelope from receiver.retry and releases its
// thread's hold. Failures retry in place with backoff; the last attempt
// releases the thread and dead-letters the envelope (receiver.dlq).
func (c *Chat) handleRetry(ctx context.Context, m queue.Message) (err error) {
	env, err := c.envelopeOf(m)
	if env == nil {
		return err
	}
	ctx, span := applySpan(ctx, m, env, nil)
	var res applied
	outcome := chatRetry
	defer func() { endApply(span, outcome, res, err) }()
	wait, await := decideAwaitConnection(env.ReceivedAt, c.db.Now(), m.Attempt, c.lane.policy.MaxAttempts)
	err = c.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		if res, err = c.domain.applyWaitingTx(ctx, tx, env, await); err != nil {
			return err
		}
		return c.lane.unparkTx(ctx, tx, env.IdempotencyKey)
	})
	if err == nil {
		c.record(env, res)
		outcome = string(res.Outcome)
		return nil
	}
	if ctx.Err() == nil && errors.Is(err, errConnectionUnknown) {
		outcome = chatWaiting
		return c.awaitConnection(env, wait, err)
	}
	if ctx.Err() == nil && m.Attempt >= c.lane.policy.MaxAttempts {
		// Give up on this one so the thread's later envelopes flow again.
		if unparkErr := c.db.Tx(ctx, func(tx *sql.Tx) error {
			return c.lane.unparkTx(ctx, tx, env.IdempotencyKey)
		}); unparkErr != nil {
			return errors.Join(err, unparkErr)
		}
		metricChatEvents.WithLabelValues(string(env.EventType), chatDead).Inc()
		outcome = chatDead
		c.log.Error("envelope dead-lettered", slog.String("event_id", env.IdempotencyKey),
			slog.Int("attempt", m.Attempt), slog.String("outcome", "dead"), slog.Any("err", err))
		return queue.Permanent(err)
	}
	return err
}

// awaitConnection is the outcome of a business message that waits for its
// connection (decideAwaitConnection): its queue delivers it again after wait.
func (c *Chat) awaitConnection(env *Envelope, wait time.Duration, err error) error {
	metricChatEvents.WithLabelValues(string(env.EventType), chatWaiting).Inc()
	c.log.Debug("business message waits for its connection", slog.String("event_id", env.IdempotencyKey),
		slog.String("business_connection_id", env.PayloadNormalized.BusinessConnectionID),
		slog.Duration("retry_in", wait), slog.String("outcome", chatWaiting))
	return queue.RetryAfter(wait, err)
}

// deadInvalid dead-letters an invalid envelope (an update that lacks what
// the Bot API always sends) with its reason, which the dead letter's
// lastError shows the operator.
func (c *Chat) deadInvalid(env *Envelope) error {
	err := invalidEnvelope(env)
	metricChatEvents.WithLabelValues(string(env.EventType), "dead").Inc()
	c.log.Warn("telegram update cannot be used; dead-lettered", slog.String("event_id", env.IdempotencyKey),
		slog.String("update_type", env.PayloadNormalized.UpdateType), slog.String("reason", env.PayloadNormalized.Reason),
		slog.String("outcome", "dead"))
	return err
}

func (c *Chat) record(env *Envelope, res applied) {
	metricChatEvents.WithLabelValues(string(env.EventType), string(res.Outcome)).Inc()
	if res.Outcome == outcomeIgnored {
		metricUpdatesIgnored.WithLabelValues(string(res.Reason)).Inc()
	}
	if c.log.Enabled(context.Background(), slog.LevelDebug) {
		c.log.Debug("envelope applied", slog.String("event_id", env.IdempotencyKey),
			slog.String("event_type", string(env.EventType)), slog.Int64("thread_id", int64(res.Thread)),
			slog.String("outcome", string(res.Outcome)), slog.String("reason", string(res.Reason)))
	}
}
