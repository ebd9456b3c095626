package queue

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/store"
	"switchyard/telemetry"
)

// RecordHandlerFunc handles one record of a topic inside tx, the transaction
// that also commits the group's offset: the handler's writes and the commit
// happen together or not at all (exactly-once for local effects). It runs on
// the database's writer, so it must only use tx — no network calls, no
// db.Tx; a consumer whose effects leave the database uses
// SubscribeOpts.Process instead. Return nil to commit, an error to retry
// with backoff (holding back later records of the same key only),
// RetryAfter(d, err), or Permanent(err) to dead-letter the record; the
// handler's writes are rolled back on error.
type RecordHandlerFunc func(ctx context.Context, tx *sql.Tx, r Record) error

// StartPosition is where a new consumer group begins.
type StartPosition int

// Start positions.
const (
	// StartEarliest reads every retained record (the default).
	StartEarliest StartPosition = iota
	// StartLatest reads only records published after the group is created.
	StartLatest
)

// SubscribeOpts configure Topic.Subscribe. Zero values get defaults.
type SubscribeOpts struct {
	// Group names the consumer group; its offsets are shared by every
	// subscriber of the group, in any process on the database, and its
	// partitions are balanced among them.
	Group string
	// Handler handles each record inside the transaction that commits it
	// (exactly-once for local effects). Exactly one of Handler and Process
	// is required.
	Handler RecordHandlerFunc
	// Process handles each record outside any transaction, for consumers
	// whose effects leave the database; the outcomes of up to BatchSize
	// records are committed after they were processed (at-least-once: see
	// RecordProcessFunc).
	Process RecordProcessFunc
	// Retry is the group's failure policy (defaults in RetryPolicy).
	Retry RetryPolicy
	// RecordSuccesses puts every record this subscriber finishes into the
	// group's attempt history, not only one that follows failed attempts
	// (attempts.go); it costs a write per record.
	RecordSuccesses bool
	// Start applies only when the group is created.
	Start StartPosition
	// Concurrency is how many partitions may have a transaction in flight
	// at once (default: all of them). Each partition has at most one, so its
	// records are handled in offset order.
	Concurrency int
	// BatchSize caps the records handled in one transaction, each in its
	// own savepoint (default 64).
	BatchSize int
	// MaxPending caps the unfinished records kept in memory per partition,
	// including those held back behind a retrying record of their key; at
	// the cap the partition stops reading ahead (default 4096).
	MaxPending int
	// PollInterval is how often the subscriber looks for records published
	// by other processes, and at the group's leases: a partition freed or a
	// member joined in another process is noticed within it (default 500 ms).
	// On PostgreSQL those are also broadcast (notify.go), so the poll is the
	// fallback for a missed broadcast; on SQLite it is how they are found.
	PollInterval time.Duration
	// LeaseTTL is how long a subscriber's member lease and partitions stay
	// its own without renewal (default 30 s; renewed every third of it): a
	// subscriber that dies without stopping keeps its partitions from the
	// others this long. One that stops hands them over at once.
	LeaseTTL time.Duration
}

// Subscription is a running member of a consumer group.
type Subscription struct {
	t     *Topic
	db    *store.DB
	group string
	opts  SubscribeOpts
	retry RetryPolicy
	owner string // names the process: sub/host:pid:random
	// member is the name of the subscriber's member lease in the group.
	member string
	log    *slog.Logger
	// spans names the subscription's spans (see Subscribe's doc comment).
	spans subscriptionSpans

	hctx    context.Context
	hcancel context.CancelFunc

	stopOnce  sync.Once
	stopping  chan struct{}
	abandon   chan struct{}
	abandoned atomic.Bool
	done      chan struct{}

	results chan chunkResult

	// Owned by the loop goroutine.
	parts  []*partState
	joined bool // the member lease was taken once
	// freeSince is, by partition, since when this subscriber's looks have
	// found it free; zero while it is held (see rebalance).
	freeSince []time.Time
	inflight  int
	next      int       // partition to look at first, for fairness
	nextDue   time.Time // earliest retry of a held-back record
	// paused: the group was paused when last looked (pause.go); no
	// record is started until a look finds it resumed.
	paused bool
}

// partState is what the subscriber holds of an owned partition: its
// unfinished records in offset order. Records finished out of order (other
// keys passing a retrying one) are already gone from memory.
type partState struct {
	id        int
	owned     bool
	releasing bool // to be handed over to another member once idle
	committed int64
	fetchPos  int64
	caughtUp  bool
	doneBelow int64 // at load, done rows existed below this offset; fetches filter them
	pending   []*entry
	byOffset  map[int64]*entry
	busy      bool      // a transaction of this partition is in flight
	reload    bool      // memory disagrees with the database: read the partition again
	loadAfter time.Time // when a failed load may be tried again
	blocked   map[string]bool
}

type entry struct {
	rec         Record
	attempts    int // failed attempts so far
	notBefore   time.Time
	hasRetryRow bool
	finished    bool
	processed   error         // what Process returned, for the commit of its outcome
	took        time.Duration // how long Process ran, for the attempt history
}

type recOutcome struct {
	kind      outcome
	notBefore time.Time
	attempts  int
	err       string
	dur       time.Duration
}

const (
	// outcomeAbandoned: the subscriber was stopping; the record stays as it was.
	outcomeAbandoned outcome = iota + 100
	// outcomeSkipped: an earlier record of the key failed in the same
	// transaction, so this one waits too.
	outcomeSkipped
)

type chunkResult struct {
	part      *partState
	items     []*entry
	outs      []recOutcome
	committed int64
	err       error
}

// Subscribe creates the group if it is new (starting at opts.Start) and runs
// a subscriber: it joins the group's members, takes its share of the
// partitions (lease locks; see members.go), reads their logs from the
// committed offsets and hands the records to the handler in offset order,
// except that the records of a key with a record waiting for a retry are
// held back while other keys pass.
// ctx carries values to the handler; cancelling it is a hard stop.
//
// Traces (package telemetry), for a subscription with Handler: each
// transaction of a partition's records is a span, "topic.chunk <topic>",
// the root of a trace of its own, whose child is the transaction's store.tx.
// Each record handed to the handler is a consumer span, "topic.receive
// <topic>", the root of a new trace, linked to the publisher's span (the
// record's Traceparent) and to the chunk's span: a record is read by every
// group, replayed and retried, perhaps days after it was published, so its
// receipt follows from the publish without growing the publisher's trace.
// Every attempt is a receive span of its own. The handler's context carries
// the receive span, so the handler's processing span is its child (and what
// the handler publishes or sends carries it on unless it starts a trace of
// its own); the queue's writes of the record's outcome — the offset mark,
// the retry row or the dead letter, and the savepoint's release or rollback
// — are a storage span, "topic.settle <topic>", under it. The receive span
// ends with the outcome (done, retry, dead, stale, abandoned), marked failed
// when the handler failed. The Record a handler gets keeps the publisher's
// Traceparent. A subscription with Process starts no span (its Process
// runs before the transaction that records the outcome); its Record carries
// the Traceparent all the same. With no tracer installed none of this
// allocates.
func (t *Topic) Subscribe(ctx context.Context, opts SubscribeOpts) (*Subscription, error) {
	if (opts.Handler == nil) == (opts.Process == nil) {
		panic("queue: Subscribe needs exactly one of Handler and Process")
	}
	if opts.Group == "" {
		panic("queue: empty group")
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = t.partitions
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 64
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 4096
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 30 * time.Second
	}
	hubFor(t.db).stmts.prepare(ctx, t.db)
	if err := t.createGroup(ctx, opts.Group, opts.Start); err != nil {
		return nil, err
	}
	declareConsumerMetrics(t.name, opts.Group)
	hctx, cancel := context.WithCancel(ctx)
	owner := "sub/" + store.NewOwnerID()
	s := &Subscription{
		t:        t,
		db:       t.db,
		group:    opts.Group,
		opts:     opts,
		retry:    opts.Retry.withDefaults(),
		owner:    owner,
		member:   memberLeaseName(t.name, opts.Group, owner),
		log:      t.log.With(slog.String("group", opts.Group)),
		hctx:     hctx,
		hcancel:  cancel,
		stopping: make(chan struct{}),
		abandon:  make(chan struct{}),
		done:     make(chan struct{}),
		results:  make(chan chunkResult, opts.Concurrency),
		spans:    newSubscriptionSpans(t.name, opts.Group),
	}
	for p := range t.partitions {
		s.parts = append(s.parts, &partState{id: p})
	}
	go func() {
		defer close(s.done)
		s.loop()
	}()
	go func() {
		select {
		case <-ctx.Done():
			s.hardStop()
		case <-s.done:
		}
	}()
	return s, nil
}

// Owner is the subscriber's owner id, sub/host:pid:random: what its leases
// and the admin API's group members and partition owners name it by.
func (s *Subscription) Owner() string { return s.owner }

// Stop stops handing out records, waits for the transactions in flight,
// leaves the group and releases its partitions, which the other members take
// at once (those of other processes at their next poll). When ctx ends
// first, the handlers' context is cancelled; records not committed are
// handled again by the next owner. Stop returns ctx's error in that case.
func (s *Subscription) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	select {
	case <-s.done:
		s.hcancel()
		return nil
	case <-ctx.Done():
		s.hardStop()
		<-s.done
		return ctx.Err()
	}
}

func (s *Subscription) hardStop() {
	s.stopOnce.Do(func() { close(s.stopping) })
	if s.abandoned.CompareAndSwap(false, true) {
		close(s.abandon)
		s.hcancel()
	}
}

func (s *Subscription) loop() {
	ctx := context.WithoutCancel(s.hctx)
	stopping := s.stopping
	topicSig := s.t.sig
	pub := topicSig.listen()
	defer topicSig.unlisten(pub)
	groupSig := groupSignal(s.db, s.t.name, s.group)
	redrives := groupSig.listen()
	defer groupSig.unlisten(redrives)
	renew := time.NewTicker(max(s.opts.LeaseTTL/3, time.Millisecond))
	defer renew.Stop()
	timer := time.NewTimer(0)
	defer timer.Stop()
	lastPoll, lastGauges := time.Now(), time.Now()
	s.renewLeases(ctx)
	s.rebalance(ctx)
	s.updateGauges(ctx)
	s.lookPaused(ctx)

	for {
		if stopping == nil && s.inflight == 0 {
			break
		}
		// Take the wake-up channels before looking at what they announce, so
		// that a publish after the look closes the channel taken.
		topicWake, groupWake := topicSig.wait(), groupSig.wait()
		if marked := pub.dirty.Swap(0); marked != 0 {
			for _, p := range s.parts {
				if marked&(1<<(p.id%64)) != 0 {
					p.caughtUp = false
				}
			}
		}
		if redrives.woken.Swap(false) {
			// A redrive, a pause or a resume, or a member of this process
			// joined or handed partitions over.
			s.lookPaused(ctx)
			s.loadRedriven(ctx)
			if stopping != nil {
				s.rebalance(ctx)
			}
		}
		// A damaged database file takes no more work (see Worker.loop).
		if stopping != nil && s.db.Corrupt() == nil {
			for _, p := range s.parts {
				// Reload only with nothing in flight, so the records read
				// back are not being handled at the same time.
				if p.owned && p.reload && !p.busy && time.Now().After(p.loadAfter) {
					s.load(ctx, p)
				}
			}
			s.releaseIdle(ctx)
			s.refill(ctx)
			if !s.paused {
				s.dispatch()
			}
		}
		timer.Reset(s.waitFor(lastPoll))
		select {
		case r := <-s.results:
			s.apply(r)
		case <-topicWake: // the top of the loop reads what was published
		case <-groupWake: // the top of the loop reads the redriven records and balances
		case <-timer.C:
			if time.Since(lastPoll) >= s.opts.PollInterval {
				lastPoll = time.Now()
				if stopping != nil {
					s.rebalance(ctx)
				}
				if s.paused {
					s.lookPaused(ctx) // resumed in a process whose wake-up did not reach this one
				}
				s.wakeAll()
				s.loadRedriven(ctx)
			}
			if time.Since(lastGauges) >= time.Second {
				lastGauges = time.Now()
				s.updateGauges(ctx)
			}
		case <-renew.C:
			s.renewLeases(ctx)
		case <-stopping:
			stopping = nil
		case <-s.abandon:
			s.releaseLeases(ctx)
			return
		}
	}
	s.updateGauges(ctx)
	s.releaseLeases(ctx)
}

// lookPaused reads whether the group is paused. A failed read leaves what
// was known: a transaction of records checks again anyway.
func (s *Subscription) lookPaused(ctx context.Context) {
	paused, err := s.groupPaused(ctx, nil)
	if err != nil {
		s.log.Error("queue group pause state not read", slog.Any("err", err))
		return
	}
	s.paused = paused
}

// waitFor is how long the loop may sleep: until the next poll, or until the
// earliest held-back retry is due by the store's clock.
func (s *Subscription) waitFor(lastPoll time.Time) time.Duration {
	d := max(min(s.opts.PollInterval-time.Since(lastPoll), time.Second), time.Millisecond)
	if !s.nextDue.IsZero() {
		d = min(d, max(s.nextDue.Sub(s.db.Now()), time.Millisecond))
	}
	return d
}

func (s *Subscription) wakeAll() {
	for _, p := range s.parts {
		p.caughtUp = false
	}
}

// drop forgets a partition's in-memory state. A transaction still in
// flight for it reports to the old state, which is no longer looked at.
func (s *Subscription) drop(p *partState) {
	p.pending = nil
	p.byOffset = map[int64]*entry{}
	p.reload = false
}

const (
	committedQuery = `select committed from queue_group_offsets where topic = ? and grp = ? and partition_id = ?`
	maxDoneQuery   = `select coalesce(max(log_offset), -1) from queue_group_done where topic = ? and grp = ? and partition_id = ?`
	retriesQuery   = `
		select r.partition_id, r.log_offset, r.key, coalesce(r.value, l.value), r.published_at, r.attempts, r.not_before,
			coalesce(nullif(r.traceparent, ''), l.traceparent, '')
		from queue_group_retries r
		left join queue_topic_log l on l.topic = r.topic and l.partition_id = r.partition_id and l.log_offset = r.log_offset
		where r.topic = ? and r.grp = ? and r.partition_id = ?`
)

// load reads an owned partition's state: its committed offset and its
// records in retry; the log is then read from the committed offset.
func (s *Subscription) load(ctx context.Context, p *partState) {
	s.drop(p)
	err := func() error {
		err := readRow(ctx, s.db, committedQuery, s.t.name, s.group, p.id).Scan(&p.committed)
		if errors.Is(err, sql.ErrNoRows) {
			// The group was deleted after this subscriber joined it (a
			// delete refuses while a member is live, but one may join just
			// after its check): make it again, as Subscribe does.
			if err := s.t.createGroup(ctx, s.group, s.opts.Start); err != nil {
				return err
			}
			err = readRow(ctx, s.db, committedQuery, s.t.name, s.group, p.id).Scan(&p.committed)
		}
		if err != nil {
			return err
		}
		var maxDone int64
		if err := readRow(ctx, s.db, maxDoneQuery, s.t.name, s.group, p.id).Scan(&maxDone); err != nil {
			return err
		}
		p.fetchPos, p.doneBelow, p.caughtUp = p.committed, maxDone+1, false
		return s.readRetries(ctx, p)
	}()
	if err != nil {
		s.log.Error("queue partition load failed", slog.Int("partition", p.id), slog.Any("err", err))
		p.reload, p.loadAfter = true, time.Now().Add(s.opts.PollInterval)
	}
}

// readRetries adds the partition's records in retry that are not in memory
// yet: all of them at load, redriven ones later.
func (s *Subscription) readRetries(ctx context.Context, p *partState) error {
	rows, err := readQuery(ctx, s.db, retriesQuery, s.t.name, s.group, p.id)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		e := &entry{hasRetryRow: true, rec: Record{Topic: s.t.name}}
		var (
			value     []byte
			published store.Timestamp
			notBefore store.Timestamp
		)
		if err := rows.Scan(&e.rec.Partition, &e.rec.Offset, &e.rec.Key, &value, &published, &e.attempts, &notBefore, &e.rec.Traceparent); err != nil {
			return err
		}
		if _, known := p.byOffset[e.rec.Offset]; known {
			continue
		}
		if value == nil {
			s.log.Error("queue record in retry is no longer in the log", slog.Int("partition", p.id), slog.Int64("offset", e.rec.Offset))
			continue
		}
		e.rec.Value, e.rec.PublishedAt, e.notBefore = value, published.Time, notBefore.Time
		s.add(p, e)
	}
	return rows.Err()
}

// loadRedriven picks up records an operator redrove (possibly from another
// process) into the owned partitions.
func (s *Subscription) loadRedriven(ctx context.Context) {
	for _, p := range s.parts {
		if !p.owned || p.reload {
			continue
		}
		if err := s.readRetries(ctx, p); err != nil {
			s.log.Error("queue redriven records not read", slog.Int("partition", p.id), slog.Any("err", err))
		}
	}
}

// add puts e among the partition's unfinished records, in offset order.
func (s *Subscription) add(p *partState, e *entry) {
	n := len(p.pending)
	if n == 0 || p.pending[n-1].rec.Offset < e.rec.Offset {
		p.pending = append(p.pending, e)
	} else {
		i := sort.Search(n, func(i int) bool { return p.pending[i].rec.Offset > e.rec.Offset })
		p.pending = append(p.pending, nil)
		copy(p.pending[i+1:], p.pending[i:])
		p.pending[i] = e
	}
	p.byOffset[e.rec.Offset] = e
}

const fetchQuery = `
	select log_offset, key, value, published_at, traceparent from queue_topic_log
	where topic = ? and partition_id = ? and log_offset >= ?
	order by log_offset limit ?`

// refill reads ahead in the logs of owned partitions that have room.
func (s *Subscription) refill(ctx context.Context) {
	for _, p := range s.parts {
		if !p.owned || p.caughtUp || p.reload {
			continue
		}
		room := s.opts.MaxPending - len(p.byOffset)
		if room < s.opts.BatchSize && len(p.byOffset) > 0 {
			continue
		}
		if err := s.fetch(ctx, p, min(max(room, 1), 512)); err != nil {
			s.log.Error("queue fetch failed", slog.Int("partition", p.id), slog.Any("err", err))
			p.caughtUp = true // try again at the next poll
		}
	}
}

func (s *Subscription) fetch(ctx context.Context, p *partState, n int) error {
	rows, err := readQuery(ctx, s.db, fetchQuery, s.t.name, p.id, p.fetchPos, n)
	if err != nil {
		return err
	}
	var page []*entry
	for rows.Next() {
		e := &entry{rec: Record{Topic: s.t.name, Partition: p.id}}
		var at store.Timestamp
		if err := rows.Scan(&e.rec.Offset, &e.rec.Key, &e.rec.Value, &at, &e.rec.Traceparent); err != nil {
			rows.Close()
			return err
		}
		e.rec.PublishedAt = at.Time
		page = append(page, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	p.caughtUp = len(page) < n
	if len(page) == 0 {
		return nil
	}
	var done map[int64]bool
	if page[0].rec.Offset < p.doneBelow {
		if done, err = s.doneIn(ctx, p, page[0].rec.Offset, page[len(page)-1].rec.Offset); err != nil {
			return err
		}
	}
	for _, e := range page {
		if _, known := p.byOffset[e.rec.Offset]; known || done[e.rec.Offset] {
			continue
		}
		s.add(p, e)
	}
	p.fetchPos = page[len(page)-1].rec.Offset + 1
	return nil
}

func (s *Subscription) doneIn(ctx context.Context, p *partState, from, to int64) (map[int64]bool, error) {
	rows, err := s.db.Read.QueryContext(ctx, `
		select log_offset from queue_group_done
		where topic = ? and grp = ? and partition_id = ? and log_offset between ? and ?`,
		s.t.name, s.group, p.id, from, to)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	done := map[int64]bool{}
	for rows.Next() {
		var off int64
		if err := rows.Scan(&off); err != nil {
			return nil, err
		}
		done[off] = true
	}
	return done, rows.Err()
}

// dispatch starts a transaction for each owned partition that has none in
// flight and has records to handle, up to Concurrency at once.
func (s *Subscription) dispatch() {
	now := s.db.Now()
	s.nextDue = time.Time{}
	for i := range s.parts {
		p := s.parts[(s.next+i)%len(s.parts)]
		if !p.owned || p.reload || p.releasing {
			continue
		}
		items := s.pick(p, now, !p.busy && s.inflight < s.opts.Concurrency)
		if len(items) == 0 {
			continue
		}
		p.busy = true
		s.inflight++
		metricReceived.WithLabelValues(s.t.name, s.group).Add(float64(len(items)))
		go s.runChunk(p, items)
	}
	s.next = (s.next + 1) % len(s.parts)
}

// pick takes the partition's first unfinished records in offset order, up to
// BatchSize, passing over the keys whose earliest record waits for a retry.
// It also notes when the earliest such retry is due; with take false it only
// does that.
func (s *Subscription) pick(p *partState, now time.Time, take bool) []*entry {
	if p.blocked == nil {
		p.blocked = map[string]bool{}
	}
	clear(p.blocked)
	var items []*entry
	for _, e := range p.pending {
		if p.blocked[e.rec.Key] {
			continue
		}
		if e.notBefore.After(now) {
			p.blocked[e.rec.Key] = true
			if s.nextDue.IsZero() || e.notBefore.Before(s.nextDue) {
				s.nextDue = e.notBefore
			}
			continue
		}
		if !take {
			continue
		}
		items = append(items, e)
		if len(items) == s.opts.BatchSize {
			break
		}
	}
	return items
}

func (s *Subscription) runChunk(p *partState, items []*entry) {
	if s.opts.Process != nil {
		s.results <- s.processChunk(p, items)
		return
	}
	r := chunkResult{part: p, items: items, outs: make([]recOutcome, len(items)), committed: -1}
	ctx, span := s.chunkSpan(context.WithoutCancel(s.hctx), p.id, len(items))
	r.err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		r.committed, err = s.applyChunk(ctx, tx, p.id, items, r.outs)
		return err
	})
	if errors.Is(r.err, errPaused) {
		telemetry.End(span, nil) // not a failure: the records wait for the resume
	} else {
		telemetry.End(span, r.err)
	}
	s.results <- r
}

// applyChunk runs each record's handler in its own savepoint, in offset
// order, then records the outcome in the same transaction: the offset
// commit on success, the retry state or the dead letter on failure. A
// record whose key failed earlier in the chunk is skipped. Its last step,
// just before the commit, is the lease fence: when the partition's lease is
// no longer this subscriber's, the transaction fails with errLeaseLost and
// nothing is committed.
// It returns the partition's committed offset after folding the finished
// records into it.
func (s *Subscription) applyChunk(ctx context.Context, tx *sql.Tx, partition int, items []*entry, outs []recOutcome) (int64, error) {
	now := s.db.Now()
	w := newWriter(ctx, tx, s.db)
	if err := lockGroupPartition(w, s.t.name, s.group, partition); err != nil {
		return 0, err
	}
	// A paused group starts no record; a Process subscription checked
	// before it processed, and commits what it did.
	if s.opts.Process == nil {
		if paused, err := s.groupPaused(ctx, &w); err != nil {
			return 0, err
		} else if paused {
			return 0, errPaused
		}
	}
	var failed map[string]bool
	halt := false
	for i, e := range items {
		rec := e.rec
		rec.Attempt = e.attempts + 1
		out := &outs[i]
		*out = recOutcome{kind: outcomeSkipped, attempts: rec.Attempt}
		if halt || failed[rec.Key] {
			continue
		}
		rctx, span := s.receiveSpan(ctx, rec)
		stop, herr, err := s.applyRecord(ctx, rctx, w, tx, e, rec, out, now)
		endReceive(span, out, herr, err)
		if err != nil {
			return 0, err
		}
		if out.kind == outcomeRetry {
			if failed == nil {
				failed = map[string]bool{}
			}
			failed[rec.Key] = true
		}
		halt = stop
	}
	committed, err := s.compact(w, partition)
	if err != nil {
		return 0, err
	}
	// The fence runs just before the commit, after the records the handlers
	// published are written there (Topic.PublishTx), so that it stays the
	// last step.
	fence := func(ctx context.Context) error { return s.fence(ctx, tx, partition) }
	if !s.db.BeforeCommit(tx, fence) {
		if err := fence(ctx); err != nil {
			return 0, err
		}
	}
	return committed, nil
}

// applyRecord runs one record's handler in its own savepoint of tx and
// records its outcome in out: the offset commit on success, the retry state
// or the dead letter on failure. ctx is the chunk's; the handler gets rctx,
// which carries the record's receive span (receiveSpan), and the outcome's
// writes are its settle span (settleSpan). halt reports that the chunk must
// stop here (the record is stale, or the subscription stopping); herr is the
// handler's failure (or the offset mark's), whose writes were rolled back;
// err means the transaction can not go on.
func (s *Subscription) applyRecord(ctx, rctx context.Context, w writer, tx *sql.Tx, e *entry, rec Record, out *recOutcome, now time.Time) (halt bool, herr, err error) {
	if _, err := w.exec(savepointQuery); err != nil {
		return false, nil, err
	}
	start := time.Now()
	scope := hubFor(s.db).openScope(tx)
	herr = s.call(rctx, tx, e, rec)
	out.dur = time.Since(start)
	settle := s.settleSpan(rctx)
	defer func() { telemetry.End(settle, err) }()
	if herr == nil {
		herr = s.markFinished(w, e)
		if herr == nil {
			if _, err := w.exec(releaseSavepointQuery); err != nil {
				hubFor(s.db).closeScope(tx, scope)
				return false, herr, err
			}
			// The handler's publishes now wait for the transaction's
			// pre-commit, and what its sends and publishes do after the
			// commit for the commit.
			if err := hubFor(s.db).keepScope(ctx, s.db, tx, scope); err != nil {
				return false, herr, err
			}
			out.kind = outcomeDone
			// A record with a history — failed attempts, or a redrive (its
			// retry row) — gets its success recorded too.
			if rec.Attempt > 1 || e.hasRetryRow || s.opts.RecordSuccesses {
				err = recordAttempt(w, s.t.name, s.group, recordID(rec.Partition, rec.Offset), rec.Attempt, OutcomeDone, "", s.ran(e, out), now)
			}
			return false, nil, err
		}
	}
	// The record's writes are rolled back, and with them what its sends
	// and publishes would have done after the commit.
	hubFor(s.db).closeScope(tx, scope)
	if _, err := w.exec(rollbackSavepointQuery); err != nil {
		return false, herr, fmt.Errorf("roll back record %d:%d: %w (after %v)", rec.Partition, rec.Offset, err, herr)
	}
	if _, err := w.exec(releaseSavepointQuery); err != nil {
		return false, herr, err
	}
	switch {
	case errors.Is(herr, errStale):
		out.kind = outcomeStale
		return true, herr, nil
	case s.hctx.Err() != nil, store.IsCorrupt(herr):
		// Stopping, or the database file is damaged: nothing is recorded
		// and no attempt is counted.
		out.kind = outcomeAbandoned
		return true, herr, nil
	}
	out.err = errorText(herr)
	d := s.retry.decide(rec.Attempt, herr)
	if d.dead {
		out.kind = outcomeDead
		err = s.deadLetter(w, e, rec.Attempt, out.err, s.ran(e, out), now)
	} else {
		out.kind = outcomeRetry
		// As stored (store.TimeLayout keeps microseconds): a retry read
		// back after a reload and one kept in memory are due at the same
		// moment, which a clock moved by hand to it must reach.
		out.notBefore = now.Add(d.delay).Truncate(time.Microsecond)
		err = s.scheduleRetry(w, e, rec.Attempt, out.err, s.ran(e, out), out.notBefore, now)
	}
	if errors.Is(err, errStale) {
		out.kind = outcomeStale
		return true, herr, nil
	}
	return false, herr, err
}

// ran is how long e's handler ran, for the attempt history: Process ran
// before the transaction (processChunk timed it), a Handler in it.
func (s *Subscription) ran(e *entry, out *recOutcome) time.Duration {
	if s.opts.Process != nil {
		return e.took
	}
	return out.dur
}

func (s *Subscription) call(ctx context.Context, tx *sql.Tx, e *entry, r Record) (err error) {
	if s.opts.Process != nil {
		return e.processed // Process ran before this transaction (async.go)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return s.opts.Handler(ctx, tx, r)
}

const (
	savepointQuery         = `savepoint queue_record`
	releaseSavepointQuery  = `release queue_record`
	rollbackSavepointQuery = `rollback to queue_record`
	deleteRecordRetryQuery = `
		delete from queue_group_retries
		where topic = ? and grp = ? and partition_id = ? and log_offset = ? and attempts = ?`
	advanceQuery = `
		update queue_group_offsets set committed = ?
		where topic = ? and grp = ? and partition_id = ? and committed = ?`
	insertDoneQuery = `
		insert into queue_group_done (topic, grp, partition_id, log_offset)
		select ?, ?, ?, ? where ? > (select committed from queue_group_offsets where topic = ? and grp = ? and partition_id = ?)
		on conflict do nothing`
)

// markFinished records that e is finished for the group. It fails with
// errStale when another owner finished or changed e first, which makes the
// caller roll back the record's effects.
func (s *Subscription) markFinished(w writer, e *entry) error {
	topic, group, p, off := s.t.name, s.group, e.rec.Partition, e.rec.Offset
	if e.hasRetryRow {
		if n, err := affected(w.exec(deleteRecordRetryQuery, topic, group, p, off, e.attempts)); err != nil || n == 0 {
			return staleUnless(err)
		}
	}
	if n, err := affected(w.exec(advanceQuery, off+1, topic, group, p, off)); err != nil || n == 1 {
		return err
	}
	n, err := affected(w.exec(insertDoneQuery, topic, group, p, off, off, topic, group, p))
	if err != nil || n == 1 {
		return err
	}
	if e.hasRetryRow {
		return nil // a redriven record below the committed offset
	}
	return errStale
}

const (
	insertRecordRetryQuery = `
		insert into queue_group_retries (topic, grp, partition_id, log_offset, key, value, published_at, attempts, not_before, last_error, first_failed_at, traceparent)
		select ?, ?, ?, ?, ?, null, ?, ?, ?, ?, ?, ?
		where ? >= (select committed from queue_group_offsets where topic = ? and grp = ? and partition_id = ?)
		and not exists (select 1 from queue_group_done where topic = ? and grp = ? and partition_id = ? and log_offset = ?)
		on conflict do nothing`
	updateRecordRetryQuery = `
		update queue_group_retries set attempts = ?, not_before = ?, last_error = ?, first_failed_at = coalesce(first_failed_at, ?)
		where topic = ? and grp = ? and partition_id = ? and log_offset = ? and attempts = ?`
	firstFailedRecordQuery = `
		select first_failed_at from queue_group_retries
		where topic = ? and grp = ? and partition_id = ? and log_offset = ?`
)

func (s *Subscription) scheduleRetry(w writer, e *entry, attempt int, text string, dur time.Duration, notBefore, now time.Time) error {
	topic, group, p, off := s.t.name, s.group, e.rec.Partition, e.rec.Offset
	var (
		n   int64
		err error
	)
	if e.hasRetryRow {
		n, err = affected(w.exec(updateRecordRetryQuery, attempt, store.TS(notBefore), text, store.TS(now), topic, group, p, off, e.attempts))
	} else {
		n, err = affected(w.exec(insertRecordRetryQuery, topic, group, p, off, e.rec.Key, store.TS(e.rec.PublishedAt),
			attempt, store.TS(notBefore), text, store.TS(now), e.rec.Traceparent, off, topic, group, p, topic, group, p, off))
	}
	if err != nil || n == 0 {
		return staleUnless(err)
	}
	return recordAttempt(w, topic, group, recordID(p, off), attempt, OutcomeRetry, text, dur, now)
}

func (s *Subscription) deadLetter(w writer, e *entry, attempt int, text string, dur time.Duration, now time.Time) error {
	topic, group, p, off := s.t.name, s.group, e.rec.Partition, e.rec.Offset
	firstFailed := store.TS(now)
	if e.hasRetryRow {
		var ts store.Timestamp
		if err := w.queryRow(firstFailedRecordQuery, topic, group, p, off).Scan(&ts); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if !ts.IsZero() {
			firstFailed = ts
		}
	}
	if err := s.markFinished(w, e); err != nil {
		return err
	}
	if _, err := w.exec(insertDeadQuery, "r_"+string(newID())[2:], topic, group, p, off, e.rec.Key, "", 0, 0, e.rec.Value,
		attempt, text, store.TS(e.rec.PublishedAt), firstFailed, store.TS(now), e.rec.Traceparent); err != nil {
		return err
	}
	return recordAttempt(w, topic, group, recordID(p, off), attempt, OutcomeDead, text, dur, now)
}

const (
	doneAboveQuery = `
		select log_offset from queue_group_done
		where topic = ? and grp = ? and partition_id = ? and log_offset >= ?
		order by log_offset limit 1000`
	setCommittedQuery    = `update queue_group_offsets set committed = ? where topic = ? and grp = ? and partition_id = ?`
	deleteDoneBelowQuery = `delete from queue_group_done where topic = ? and grp = ? and partition_id = ? and log_offset < ?`
)

// compact folds the finished records just above the committed offset into
// it and returns the new committed offset.
func (s *Subscription) compact(w writer, p int) (int64, error) {
	topic, group := s.t.name, s.group
	var c int64
	if err := w.queryRow(committedQuery, topic, group, p).Scan(&c); err != nil {
		return 0, err
	}
	rows, err := w.query(doneAboveQuery, topic, group, p, c)
	if err != nil {
		return 0, err
	}
	next := c
	for rows.Next() {
		var off int64
		if err := rows.Scan(&off); err != nil {
			rows.Close()
			return 0, err
		}
		if off != next {
			break
		}
		next++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if next == c {
		return c, nil
	}
	if _, err := w.exec(setCommittedQuery, next, topic, group, p); err != nil {
		return 0, err
	}
	if _, err := w.exec(deleteDoneBelowQuery, topic, group, p, next); err != nil {
		return 0, err
	}
	return next, nil
}

// apply updates memory after a transaction of records committed or failed.
func (s *Subscription) apply(r chunkResult) {
	s.inflight--
	p := r.part
	p.busy = false
	if errors.Is(r.err, errPaused) {
		// Nothing was started or kept; the records wait for the resume.
		s.paused = true
		return
	}
	if errors.Is(r.err, errLeaseLost) {
		// Nothing of the transaction was kept, and the records are the next
		// owner's.
		if p.owned {
			s.lose(p, "queue partition's lease ran out before its records were committed; they are left to the next owner")
		}
		return
	}
	if r.err != nil {
		// Nothing of the transaction was kept; the records are tried again
		// shortly, without counting an attempt.
		s.log.Error("queue records not committed; trying again", slog.Int("partition", p.id), slog.Int("count", len(r.items)), slog.Any("err", r.err))
		retryAt := s.db.Now().Add(time.Second)
		for _, e := range r.items {
			e.notBefore = retryAt
		}
		return
	}
	if r.committed >= 0 {
		p.committed = r.committed
	}
	finished := 0
	for i, e := range r.items {
		out := r.outs[i]
		if out.kind != outcomeAbandoned && out.kind != outcomeStale && out.kind != outcomeSkipped {
			metricDuration.WithLabelValues(s.t.name, s.group).Observe(out.dur.Seconds())
		}
		switch out.kind {
		case outcomeDone:
			metricSucceeded.WithLabelValues(s.t.name, s.group).Inc()
			e.finished = true
			finished++
		case outcomeDead:
			metricDead.WithLabelValues(s.t.name, s.group).Inc()
			s.log.Error("queue record dead-lettered", slog.Int("partition", e.rec.Partition), slog.Int64("offset", e.rec.Offset),
				slog.Int("attempt", out.attempts), slog.String("outcome", "dead"), slog.String("err", out.err))
			e.finished = true
			finished++
		case outcomeRetry:
			metricRetried.WithLabelValues(s.t.name, s.group).Inc()
			s.log.Warn("queue record failed; will retry", slog.Int("partition", e.rec.Partition), slog.Int64("offset", e.rec.Offset),
				slog.Int("attempt", out.attempts), slog.String("outcome", "retry"), slog.Time("retry_at", out.notBefore), slog.String("err", out.err))
			e.attempts, e.notBefore, e.hasRetryRow = out.attempts, out.notBefore, true
		case outcomeStale:
			s.log.Warn("queue record was finished by another owner; reloading the partition",
				slog.Int("partition", e.rec.Partition), slog.Int64("offset", e.rec.Offset))
			p.reload = true
		}
	}
	if finished == 0 || p.byOffset[r.items[0].rec.Offset] != r.items[0] {
		return // nothing to remove, or the partition was dropped meanwhile
	}
	kept := p.pending[:0]
	for _, e := range p.pending {
		if e.finished {
			delete(p.byOffset, e.rec.Offset)
			continue
		}
		kept = append(kept, e)
	}
	clear(p.pending[len(kept):])
	p.pending = kept
}

// updateGauges exports the lag of the owned partitions.
func (s *Subscription) updateGauges(ctx context.Context) {
	for _, p := range s.parts {
		if !p.owned {
			continue
		}
		gs, err := groupPartitionStats(ctx, s.db, s.t.name, s.group, p.id, s.db.Now())
		if err != nil {
			s.log.Error("queue lag not read", slog.Int("partition", p.id), slog.Any("err", err))
			continue
		}
		part := strconv.Itoa(p.id)
		metricLag.WithLabelValues(s.t.name, s.group, part).Set(float64(gs.Lag))
		metricOldest.WithLabelValues(s.t.name, s.group, part).Set(gs.OldestAge.Seconds())
	}
}

func staleUnless(err error) error {
	if err != nil {
		return err
	}
	return errStale
}

func recordID(partition int, offset int64) string {
	return strconv.Itoa(partition) + ":" + strconv.FormatInt(offset, 10)
}

// subscriptionSpans are the names and fixed attributes of a subscription's
// spans, made once at Subscribe rather than for every record.
type subscriptionSpans struct {
	chunk, receive, settle string
	attrs                  []attribute.KeyValue // the system, the topic and the group
}

func newSubscriptionSpans(topic, group string) subscriptionSpans {
	return subscriptionSpans{
		chunk:   "topic.chunk " + topic,
		receive: "topic.receive " + topic,
		settle:  "topic.settle " + topic,
		attrs: []attribute.KeyValue{
			attribute.String("messaging.system", "switchyard"),
			attribute.String("messaging.destination.name", topic),
			attribute.String("messaging.consumer.group.name", group),
		},
	}
}

// chunkSpan starts the span of one transaction of a partition's records:
// the root of a trace that holds the transaction (store.tx), to which each
// record's receive span links. With tracing off it returns ctx and a span
// that does nothing, allocating nothing.
func (s *Subscription) chunkSpan(ctx context.Context, partition, n int) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, s.spans.chunk) // ctx as it is, and a span that does nothing
	}
	attrs := append(s.spans.attrs[:len(s.spans.attrs):len(s.spans.attrs)],
		attribute.String("messaging.destination.partition.id", strconv.Itoa(partition)),
		attribute.Int("messaging.batch.message_count", n))
	return telemetry.Start(ctx, s.spans.chunk, trace.WithNewRoot(), trace.WithAttributes(attrs...))
}

// receiveSpan starts the consumer span of one delivery of rec, the root of
// a new trace linked to the span that published rec (its Traceparent) and
// to the chunk's span (ctx's). It returns the handler's context, s.hctx
// carrying the span. With tracing off it returns s.hctx as it is and a span
// that does nothing, allocating nothing.
func (s *Subscription) receiveSpan(ctx context.Context, rec Record) (context.Context, trace.Span) {
	if !telemetry.Enabled() || s.opts.Process != nil {
		// Process ran before this transaction (async.go): a span now would
		// time the outcome's commit, not the record's processing.
		return telemetry.Start(s.hctx, s.spans.receive) // s.hctx as it is, and a span that does nothing
	}
	return s.startReceive(ctx, rec)
}

// processSpan starts the consumer span of one Process call of rec
// (async.go), as receiveSpan does for a handler: Process runs before its
// chunk's transaction, so the span links to the publisher's alone. With
// tracing off it returns s.hctx as it is and a span that does nothing.
func (s *Subscription) processSpan(rec Record) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(s.hctx, s.spans.receive)
	}
	return s.startReceive(context.Background(), rec)
}

// startReceive starts a receive span of rec linked to its publisher's span
// and to ctx's (a chunk's), when each is valid.
func (s *Subscription) startReceive(ctx context.Context, rec Record) (context.Context, trace.Span) {
	links := make([]trace.Link, 0, 2)
	if sc, ok := telemetry.Parse(rec.Traceparent); ok {
		links = append(links, trace.Link{SpanContext: sc})
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		links = append(links, trace.Link{SpanContext: sc})
	}
	attrs := append(s.spans.attrs[:len(s.spans.attrs):len(s.spans.attrs)],
		attribute.String("messaging.destination.partition.id", strconv.Itoa(rec.Partition)),
		attribute.Int64("queue.offset", rec.Offset),
		attribute.Int("queue.attempt", rec.Attempt))
	return telemetry.Start(s.hctx, s.spans.receive, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
}

// endReceive ends a receive span with the record's outcome, marked failed
// when the handler failed (herr) or the transaction broke (err).
func endReceive(span trace.Span, out *recOutcome, herr, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attribute.String("queue.outcome", outcomeName(out.kind)))
	telemetry.End(span, cmp.Or(err, herr))
}

// settleSpan starts the storage span of the writes that record a
// delivery's outcome, under its receive span (ctx's); with tracing off it
// is a span that does nothing.
func (s *Subscription) settleSpan(ctx context.Context) trace.Span {
	if !telemetry.Enabled() || s.opts.Process != nil {
		_, span := telemetry.Start(ctx, s.spans.settle) // a span that does nothing
		return span
	}
	_, span := telemetry.Start(ctx, s.spans.settle, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", dbSystemName(s.db))))
	return span
}

// dbSystemName is db's db.system.name, as store.tx spans name it.
func dbSystemName(db *store.DB) string {
	if db.Postgres() {
		return "postgresql"
	}
	return "sqlite"
}

// outcomeName is a record's outcome as a receive span says it.
func outcomeName(k outcome) string {
	switch k {
	case outcomeDone:
		return "done"
	case outcomeRetry:
		return "retry"
	case outcomeDead:
		return "dead"
	case outcomeStale:
		return "stale"
	case outcomeAbandoned:
		return "abandoned"
	default:
		return "skipped"
	}
}
