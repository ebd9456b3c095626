package omni

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"switchyard/queue"
	"switchyard/store"
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
	// Concurrency bounds the envelopes applied at once per queue (default 4).
	// Envelopes of one thread are applied one at a time whatever it is.
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
		opts.Concurrency = 4
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

// newChatDomain wires the chat transactions to sender.flow on db.
func newChatDomain(db *store.DB, autoAck AutoAckRule) *chatDomain {
	sender := queue.New(queue.NewOpts{DB: db, Name: QueueSenderFlow, Retry: queue.RetryPolicy{MaxAttempts: flowAttempts}})
	return &chatDomain{
		now:        db.Now,
		autoAck:    autoAck,
		lockThread: threadLockQuery(db),
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

// Name names the worker.
func (c *Chat) Name() string { return "omni-chat" }

// Run consumes receiver.flow and receiver.retry until ctx is cancelled, then
// returns once the envelopes in hand are applied and acknowledged.
func (c *Chat) Run(ctx context.Context) error {
	return c.lane.run(ctx,
		queue.WorkerOpts{Handler: c.handleFlow, Concurrency: c.opts.Concurrency, PollInterval: c.opts.PollInterval},
		queue.WorkerOpts{Handler: c.handleRetry, Concurrency: c.opts.Concurrency, PollInterval: c.opts.PollInterval},
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

// handleFlow applies an envelope from receiver.flow. When its thread has
// envelopes waiting in receiver.retry it goes behind them; when applying it
// fails it moves to receiver.retry itself, and later envelopes of its thread
// follow it there.
func (c *Chat) handleFlow(ctx context.Context, m queue.Message) error {
	env, err := c.envelopeOf(m)
	if env == nil {
		return err
	}
	key := OrderingKey(env)
	parked, err := c.lane.parked(ctx, key)
	if err != nil {
		return err
	}
	if parked {
		return c.db.Tx(ctx, func(tx *sql.Tx) error {
			return c.lane.escalateTx(ctx, tx, m.Body, env.IdempotencyKey, key, 0)
		})
	}
	wait, await := decideAwaitConnection(env.ReceivedAt, c.db.Now(), m.Attempt, flowAttempts)
	var res applied
	err = c.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = c.domain.applyWaitingTx(ctx, tx, env, await)
		return err
	})
	if err == nil {
		c.record(env, res)
		return nil
	}
	if ctx.Err() != nil {
		return err // stopping: the message comes back after its timeout
	}
	if errors.Is(err, errConnectionUnknown) {
		// It waits in place, holding its thread's later envelopes behind it.
		return c.awaitConnection(env, wait, err)
	}
	// Nothing of the failed apply was kept: hand the envelope to the retry lane.
	delay := c.lane.policy.Backoff(1)
	if moveErr := c.db.Tx(ctx, func(tx *sql.Tx) error {
		return c.lane.escalateTx(ctx, tx, m.Body, env.IdempotencyKey, key, delay)
	}); moveErr != nil {
		return errors.Join(err, moveErr)
	}
	metricChatEvents.WithLabelValues(string(env.EventType), chatRetry).Inc()
	c.log.Warn("envelope not applied; moved to "+QueueReceiverRetry, slog.String("event_id", env.IdempotencyKey),
		slog.String("outcome", "retry"), slog.Any("err", err))
	return nil
}

// handleRetry applies an envelope from receiver.retry and releases its
// thread's hold. Failures retry in place with backoff; the last attempt
// releases the thread and dead-letters the envelope (receiver.dlq).
func (c *Chat) handleRetry(ctx context.Context, m queue.Message) error {
	env, err := c.envelopeOf(m)
	if env == nil {
		return err
	}
	wait, await := decideAwaitConnection(env.ReceivedAt, c.db.Now(), m.Attempt, c.lane.policy.MaxAttempts)
	var res applied
	err = c.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		if res, err = c.domain.applyWaitingTx(ctx, tx, env, await); err != nil {
			return err
		}
		return c.lane.unparkTx(ctx, tx, env.IdempotencyKey)
	})
	if err == nil {
		c.record(env, res)
		return nil
	}
	if ctx.Err() == nil && errors.Is(err, errConnectionUnknown) {
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
