package referral

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"switchyard/queue"
	"switchyard/store"
)

// Opts configure New. Zero values get defaults.
type Opts struct {
	DB *store.DB
	// Logger gets the consumers' structured log; nil discards.
	Logger *slog.Logger
	// Group is the consumer group on pin.identity.users.v1 (default
	// referral-identity-users). Another name replays the topic from its
	// first retained record beside the real group.
	Group string
	// Retry is the group's failure policy. The default retries a transient
	// failure or a missing owner replica with a backoff from 1 s doubling to
	// 15 min, 16 attempts in all (about 90 minutes), then dead-letters it.
	Retry queue.RetryPolicy
	// PollInterval is how often the consumer looks for records published by
	// other processes on the file (default 500 ms; this process's publishes
	// wake it at once).
	PollInterval time.Duration
	// LagInterval is how often the lag gauges are refreshed (default 15 s).
	LagInterval time.Duration
}

// Default retry policy of the consumer group.
const (
	DefaultMaxAttempts = 16
	DefaultMinBackoff  = time.Second
	DefaultMaxBackoff  = 15 * time.Minute
)

// Service is the referral context: the consumers of pin.identity.users.v1,
// the operator API and the reads behind it. Run starts the consumers.
type Service struct {
	db       *store.DB
	log      *slog.Logger
	opts     Opts
	users    *queue.Topic
	admin    *queue.Admin
	bondsOut txPublisher
	leadsOut txPublisher
	stmts    map[string]*sql.Stmt // consumerQueries, prepared on the writer
	// storeSpans names the spans of the consumer's statements (trace.go).
	storeSpans *storeSpans
	// linkQuery and ownerQuery are branch B's reads of the link and of its
	// owner's replica: liveLinkByURLQuery and getReplicaQuery, locking the
	// rows on PostgreSQL (see readAttachFacts).
	linkQuery, ownerQuery string
}

// New declares the referral topics (pin.identity.users.v1 with 6
// partitions, pin.referral.bonds.v1, pin.referral.lead-attachments.v1) and
// returns the service. It panics without a DB.
func New(ctx context.Context, opts Opts) (*Service, error) {
	if opts.DB == nil {
		panic("referral: nil DB")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Group == "" {
		opts.Group = ConsumerGroup
	}
	if opts.Retry.MaxAttempts <= 0 {
		opts.Retry.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Retry.MinBackoff <= 0 {
		opts.Retry.MinBackoff = DefaultMinBackoff
	}
	if opts.Retry.MaxBackoff <= 0 {
		opts.Retry.MaxBackoff = DefaultMaxBackoff
	}
	if opts.LagInterval <= 0 {
		opts.LagInterval = 15 * time.Second
	}
	s := &Service{
		db:    opts.DB,
		log:   opts.Logger.With(slog.String("component", "referral")),
		opts:  opts,
		admin: queue.NewAdmin(queue.AdminOpts{DB: opts.DB, Logger: opts.Logger}),
	}
	topics := make(map[string]*queue.Topic, 3)
	for _, name := range []string{TopicIdentityUsers, TopicBonds, TopicLeadAttachments} {
		t, err := queue.NewTopic(ctx, queue.TopicOpts{DB: opts.DB, Name: name, Partitions: IdentityPartitions, Logger: opts.Logger})
		if err != nil {
			return nil, fmt.Errorf("referral: %w", err)
		}
		topics[name] = t
	}
	s.linkQuery, s.ownerQuery = liveLinkByURLQuery, getReplicaQuery
	if opts.DB.Postgres() {
		s.linkQuery, s.ownerQuery = liveLinkByURLQuery+lockShared, getReplicaQuery+lockShared
	}
	s.storeSpans = newStoreSpans(opts.DB.Postgres(), s.linkQuery, s.ownerQuery)
	queries := append(slices.Clip(consumerQueries), s.linkQuery, s.ownerQuery)
	s.stmts = make(map[string]*sql.Stmt, len(queries))
	for _, q := range queries {
		st, err := opts.DB.Write.PrepareContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("referral: prepare: %w", err)
		}
		s.stmts[q] = st
	}
	s.users = topics[TopicIdentityUsers]
	s.bondsOut = topicPublisher{topics[TopicBonds]}
	s.leadsOut = topicPublisher{topics[TopicLeadAttachments]}
	return s, nil
}

// topicPublisher publishes to a queue topic inside the caller's transaction.
type topicPublisher struct{ t *queue.Topic }

func (p topicPublisher) publishTx(ctx context.Context, tx *sql.Tx, key string, value []byte) error {
	return p.t.PublishTx(ctx, tx, key, value)
}

// Name is the worker's name for the process's logs.
func (s *Service) Name() string { return "referral" }

// Run consumes pin.identity.users.v1 as the consumer group until ctx is
// cancelled, then stops taking records, lets the transactions in flight
// commit and returns nil. It also keeps the lag gauges current, and first
// makes every series of its counters exist at 0.
func (s *Service) Run(ctx context.Context) error {
	declareMetrics()
	sub, err := s.users.Subscribe(context.WithoutCancel(ctx), queue.SubscribeOpts{
		Group:        s.opts.Group,
		Handler:      s.handle,
		Retry:        s.opts.Retry,
		Start:        queue.StartEarliest,
		PollInterval: s.opts.PollInterval,
	})
	if err != nil {
		return fmt.Errorf("referral: subscribe %s/%s: %w", TopicIdentityUsers, s.opts.Group, err)
	}
	s.log.Info("consumer started", slog.String("topic", TopicIdentityUsers), slog.String("group", s.opts.Group))
	tick := time.NewTicker(s.opts.LagInterval)
	defer tick.Stop()
	s.refreshLag(ctx)
	for {
		select {
		case <-ctx.Done():
			err := sub.Stop(context.WithoutCancel(ctx))
			s.log.Info("consumer stopped", slog.String("group", s.opts.Group))
			return err
		case <-tick.C:
			s.refreshLag(ctx)
		}
	}
}

// refreshLag sets the lag gauges from the group's committed offsets.
func (s *Service) refreshLag(ctx context.Context) {
	st, err := s.admin.Stats(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("consumer lag not read", slog.Any("err", err))
		}
		return
	}
	for _, t := range st.Topics {
		if t.Name != TopicIdentityUsers {
			continue
		}
		for _, g := range t.Groups {
			if g.Group != s.opts.Group {
				continue
			}
			for _, p := range g.Partitions {
				lagMessages.WithLabelValues(strconv.Itoa(p.Partition)).Set(float64(p.Lag))
			}
			lagSeconds.Set(g.OldestAge.Seconds())
		}
	}
}

// handle is the consumer group's handler: one record, in the transaction
// that commits the group's offset. Its processing is a span,
// referral.event.handle, under the queue's receive span (trace.go).
func (s *Service) handle(ctx context.Context, tx *sql.Tx, rec queue.Record) error {
	start := time.Now()
	ctx, span := handleSpan(ctx)
	res, err := s.apply(ctx, tx, inbound{Key: rec.Key, Value: rec.Value, Partition: rec.Partition, Offset: rec.Offset, Attempt: rec.Attempt})
	endHandle(span, res, err)
	took := time.Since(start)
	s.db.AfterCommit(tx, func() { s.observe(ctx, rec, res, err, took) })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrBadPayload):
		return queue.Permanent(err)
	case errors.Is(err, ErrOwnerReplicaMissing):
		return fmt.Errorf("user %s link %s: %w", res.UserID, res.LinkID, err)
	default:
		return fmt.Errorf("apply %s %s: %w", res.Type, res.MessageID, err)
	}
}

// observe logs and counts what one record did. It runs once the record's
// transaction has committed (store's AfterCommit), so a run of the
// transaction that was thrown away — a failed commit, or a PostgreSQL
// transaction run again after a serialization failure or deadlock — is
// neither logged nor counted, and its record is observed when it is handled
// again. A failed record's writes are rolled back with its savepoint while
// the transaction commits its retry or dead letter: its failure is observed
// with that commit.
func (s *Service) observe(ctx context.Context, rec queue.Record, res result, err error, took time.Duration) {
	typ := string(res.Type)
	if res.Type != TypeUserUpserted && res.Type != TypeUserBlocked {
		typ = typeOther
	}
	log := s.log.With(
		slog.String("message_id", res.MessageID),
		slog.String("user_id", string(res.UserID)),
		slog.String("correlation_id", res.CorrelationID),
		slog.String("type", typ),
	)
	outcome := resultOK
	defer func() {
		consumedTotal.WithLabelValues(typ, outcome).Inc()
		processingSeconds.WithLabelValues(typ, outcome).Observe(took.Seconds())
	}()
	log.DebugContext(ctx, "consumed", slog.Int("partition", rec.Partition), slog.Int64("offset", rec.Offset), slog.Int("attempt", rec.Attempt))
	if res.VersionDiffer {
		log.WarnContext(ctx, "contract version mismatch; proceeding", slog.Int("want", ContractVersion))
	}

	if err != nil {
		reason := reasonTransient
		switch {
		case errors.Is(err, ErrBadPayload):
			reason = reasonBadPayload
		case errors.Is(err, ErrOwnerReplicaMissing):
			reason = reasonOwnerMissing
		}
		outcome = resultRetry
		if reason == reasonBadPayload || rec.Attempt >= s.opts.Retry.MaxAttempts {
			outcome = resultDead
			deadLetteredTotal.WithLabelValues(reason).Inc()
		} else {
			retriesTotal.WithLabelValues(reason).Inc()
		}
		level := slog.LevelWarn
		if outcome == resultDead {
			level = slog.LevelError
		}
		log.Log(ctx, level, "failed", slog.String("outcome", outcome), slog.String("reason", reason),
			slog.Int("attempt", rec.Attempt), slog.Int("partition", rec.Partition), slog.Int64("offset", rec.Offset),
			slog.String("link_id", string(res.LinkID)), slog.Any("err", err))
		return
	}
	switch {
	case res.Ignored:
		outcome = resultIgnored
		log.DebugContext(ctx, "ignored message type")
		return
	case res.Duplicate:
		outcome = resultDuplicate
		duplicatesTotal.WithLabelValues(typ).Inc()
		log.InfoContext(ctx, "skipped-duplicate", slog.String("outcome", outcome))
		return
	}

	if res.Type == TypeUserBlocked {
		switch res.Outcome {
		case OutcomeNoReplica:
			log.WarnContext(ctx, "user-blocked for a user without replica; no-op", slog.String("outcome", string(res.Outcome)))
		default:
			replicaUpsertsTotal.WithLabelValues(typ, replicaResult(res.ReplicaApplied)).Inc()
			log.InfoContext(ctx, "replica-upserted", slog.String("outcome", string(res.Outcome)),
				slog.Bool("applied", res.ReplicaApplied), slog.Int64("replica_version", res.ReplicaVersion))
		}
		return
	}

	replicaUpsertsTotal.WithLabelValues(typ, replicaResult(res.ReplicaApplied)).Inc()
	log.InfoContext(ctx, "replica-upserted", slog.Bool("applied", res.ReplicaApplied),
		slog.Int64("replica_version", res.ReplicaVersion), slog.String("registered_via", res.RegisteredVia),
		slog.String("phone", res.Phone))

	attachOutcomesTotal.WithLabelValues(string(res.Outcome)).Inc()
	attrs := []any{slog.String("outcome", string(res.Outcome)), slog.String("link_id", string(res.LinkID)),
		slog.String("bond_id", string(res.BondID))}
	switch res.Outcome {
	case OutcomeR1:
		if res.LeadRequested {
			leadsRequestedTotal.Inc()
		}
		bondLatencySeconds.Observe(max(s.db.Now().Sub(res.BoundAt), 0).Seconds())
		log.InfoContext(ctx, "attach-outcome", append(attrs, slog.String("applied_rule", string(RuleR1)),
			slog.Bool("lead_requested", res.LeadRequested))...)
	case OutcomeG1:
		log.WarnContext(ctx, "attach-outcome", append(attrs, slog.String("slug", res.Slug),
			slog.String("reason", "referral link not found or deleted"))...)
	case OutcomeInvalidSlug:
		log.WarnContext(ctx, "attach-outcome", append(attrs, slog.String("reason", "ReferrerUrl is not a slug"))...)
	default:
		log.InfoContext(ctx, "attach-outcome", attrs...)
	}
}

// replicaResult is the result label of a replica write.
func replicaResult(applied bool) string {
	if applied {
		return replicaApplied
	}
	return replicaStale
}
