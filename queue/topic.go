package queue

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/bits"
	"slices"
	"strings"
	"time"

	"switchyard/store"
	"switchyard/telemetry"
)

// TopicOpts configure NewTopic. Zero values get defaults.
type TopicOpts struct {
	DB *store.DB
	// Name of the topic, e.g. "pin.identity.users.v1".
	Name string
	// Partitions is fixed when the topic is first declared (default 6).
	Partitions int
	// Retention is how long records are kept (default 7 days). A record that
	// some group has not finished yet is kept regardless.
	Retention time.Duration
	// Logger gets consumer events; nil discards.
	Logger *slog.Logger
}

// Topic defaults.
const (
	DefaultPartitions = 6
	DefaultRetention  = 7 * 24 * time.Hour
)

// Topic is a Kafka-style topic: keyed records in N partitions, each an
// append-only log with dense offsets, read by consumer groups.
type Topic struct {
	db         *store.DB
	name       string
	partitions int
	log        *slog.Logger
	sig        *signal
}

// Position is where a record was written.
type Position struct {
	Partition int   `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Record is one record of a topic's log.
type Record struct {
	Topic       string
	Partition   int
	Offset      int64
	Key         string
	Value       []byte
	PublishedAt time.Time
	// Attempt is set for consumers: 1 on the first delivery to the group.
	Attempt int
	// Traceparent is the W3C trace context the record carries (package
	// telemetry): the span that published it, kept through retries, dead
	// letters and redrives; "" when none was recorded. A consumer gets the
	// publisher's, as stored: its own receipt is a span of a new trace that
	// links to it (Topic.Subscribe).
	Traceparent string
}

// NewTopic declares the topic (persisting its name, partition count and
// retention so other processes see it) and returns it. Declaring an existing
// topic with another partition count fails with ErrTopicMismatch; a new
// retention replaces the old one.
func NewTopic(ctx context.Context, opts TopicOpts) (*Topic, error) {
	if opts.DB == nil {
		panic("queue: nil DB")
	}
	if opts.Name == "" {
		panic("queue: empty topic name")
	}
	if opts.Partitions <= 0 {
		opts.Partitions = DefaultPartitions
	}
	if opts.Partitions > 1024 {
		return nil, fmt.Errorf("queue: topic %s: %d partitions is more than 1024", opts.Name, opts.Partitions)
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	db := opts.DB
	hubFor(db).stmts.prepare(ctx, db)
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `
			insert into queue_topics (name, partitions, retention_seconds, created_at) values (?, ?, ?, ?)
			on conflict (name) do update set retention_seconds = excluded.retention_seconds`,
			opts.Name, opts.Partitions, int64(opts.Retention/time.Second), store.TS(db.Now())); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `select partitions from queue_topics where name = ?`, opts.Name).Scan(&n); err != nil {
			return err
		}
		if n != opts.Partitions {
			return fmt.Errorf("%w: %s has %d, declared with %d", ErrTopicMismatch, opts.Name, n, opts.Partitions)
		}
		for p := range n {
			if _, err := tx.ExecContext(ctx, `
				insert into queue_topic_partitions (topic, partition_id, next_offset) values (?, ?, 0)
				on conflict (topic, partition_id) do nothing`, opts.Name, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: declare topic %s: %w", opts.Name, err)
	}
	declareQueueMetrics(opts.Name, false)
	return &Topic{
		db:         db,
		name:       opts.Name,
		partitions: opts.Partitions,
		log:        opts.Logger.With(slog.String("topic", opts.Name)),
		sig:        topicSignal(db, opts.Name),
	}, nil
}

// Name returns the topic's name.
func (t *Topic) Name() string { return t.name }

// Partitions returns the topic's partition count.
func (t *Topic) Partitions() int { return t.partitions }

// PartitionFor is the partition of key among n: FNV-1a (32-bit) of the key's
// bytes, modulo n. It never changes, so a key's records stay in one partition.
func PartitionFor(key string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// KeyValue is a record to publish: its key chooses the partition.
type KeyValue struct {
	Key   string
	Value []byte
	// Traceparent is the W3C trace context the record is to carry; empty
	// takes the publishing context's span (telemetry.Traceparent), as for
	// Publish and PublishTx. A batch that forwards records of several
	// traces (a relay, an import) gives each its own.
	Traceparent string
}

// Publish appends a record in its own transaction (grouped with concurrent
// writers) and returns where it was written, once it is committed. The
// record carries ctx's span as its traceparent.
func (t *Topic) Publish(ctx context.Context, key string, value []byte) (Position, error) {
	pos, err := t.PublishBatch(ctx, []KeyValue{{Key: key, Value: value}})
	if err != nil {
		return Position{}, err
	}
	return pos[0], nil
}

// PublishBatch appends records in one transaction of their own, all or none,
// and returns where each was written (in the order of recs) once they are
// committed. The records of one key keep the order of recs. Each record
// carries its own Traceparent, or else ctx's span.
func (t *Topic) PublishBatch(ctx context.Context, recs []KeyValue) ([]Position, error) {
	return publishBatch(ctx, t.db, t.name, t.partitions, recs)
}

func publishBatch(ctx context.Context, db *store.DB, topic string, partitions int, recs []KeyValue) ([]Position, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	positions := make([]Position, len(recs))
	st, err := stagedRecords(ctx, topic, partitions, recs, positions)
	if err != nil {
		return nil, err
	}
	// The records are written at the transaction's pre-commit, which fills
	// positions in; on PostgreSQL a run that is retried fills them again.
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return stageTx(ctx, db, tx, st) }); err != nil {
		return nil, err
	}
	return positions, nil
}

// PublishTx appends a record inside the caller's transaction: it exists, and
// its offset is taken, if and only if the transaction commits. Once it has
// committed, subscribers in this process are woken and the publish is
// counted; a transaction that rolls back (or, on PostgreSQL, is run again),
// or the savepoint of a record handler that fails, writes nothing, wakes
// nobody and counts nothing. tx must be a transaction of db.Tx (see
// Queue.SendTx).
//
// The record is not written at once: the transaction's records are written
// together just before it commits (store.DB.BeforeCommit), grouped by topic
// and partition in one fixed order, each partition's offsets taken with one
// statement. A partition's row is locked from its offsets until the commit,
// so that records commit in offset order; taking the rows in one order, and
// only for the tail of the transaction, is what keeps transactions that
// publish to several partitions from deadlocking each other. Hence no
// Position: it is known at the commit (Publish and PublishBatch return it).
// The records of one key keep the order of their PublishTx calls. For a
// transaction that db.Tx did not begin, the record is written at once.
// The record carries ctx's span as its traceparent, taken at the call: a
// caller that starts a span for the publish (a producer span) gives its
// context here.
func (t *Topic) PublishTx(ctx context.Context, tx *sql.Tx, key string, value []byte) error {
	st, err := stagedRecords(ctx, t.name, t.partitions, []KeyValue{{Key: key, Value: value}}, nil)
	if err != nil {
		return err
	}
	if hubFor(t.db).stageInScope(tx, st) {
		return nil // a record handler's: kept if its savepoint is (keepScope)
	}
	return stageTx(ctx, t.db, tx, st)
}

// staged is a record published in a transaction and not yet written.
type staged struct {
	topic     string
	partition int
	key       string
	value     []byte
	// traceparent is the record's trace context, taken when it was
	// published (the record is written later, at the pre-commit).
	traceparent string
	offset      int64     // set when written
	pos         *Position // when not nil, set to where it was written
}

// stagedRecords checks recs and makes them staged records of topic, each
// carrying its own traceparent or else ctx's span; positions, when not nil,
// get where each is written.
func stagedRecords(ctx context.Context, topic string, partitions int, recs []KeyValue, positions []Position) ([]*staged, error) {
	out := make([]*staged, len(recs))
	ctxParent := telemetry.Traceparent(ctx) // "" without a span: no allocation with tracing off
	for i, r := range recs {
		if r.Key == "" {
			if len(recs) == 1 {
				return nil, fmt.Errorf("queue: publish to %s: empty key", topic)
			}
			return nil, fmt.Errorf("queue: publish to %s: record %d: empty key", topic, i)
		}
		// A copy: the caller may reuse its buffer before the record is written.
		value := bytes.Clone(r.Value)
		if value == nil {
			value = []byte{}
		}
		tp := r.Traceparent
		if tp == "" {
			tp = ctxParent
		}
		out[i] = &staged{topic: topic, partition: PartitionFor(r.Key, partitions), key: r.Key, value: value, traceparent: tp}
		if positions != nil {
			out[i].pos = &positions[i]
		}
	}
	return out, nil
}

// pendingLog is what one run of a transaction function published outside
// any record handler's scope, in call order, kept by the store for that run
// (store.DB.TxValue) until its pre-commit writes it.
type pendingLog struct {
	recs    []*staged
	written bool // the pre-commit has run: later records are written at once
}

type pendingLogKey struct{}

// stageTx adds recs to tx's pending records, to be written just before tx
// commits; in a transaction db.Tx did not begin, it writes them at once.
func stageTx(ctx context.Context, db *store.DB, tx *sql.Tx, recs []*staged) error {
	if len(recs) == 0 {
		return nil
	}
	v, ok := db.TxValue(tx, pendingLogKey{}, func() any {
		p := new(pendingLog)
		db.BeforeCommit(tx, func(ctx context.Context) error {
			p.written = true
			return writeRecords(ctx, db, tx, p.recs)
		})
		return p
	})
	if !ok || v.(*pendingLog).written {
		// Not a transaction of db.Tx, or published by another before-commit
		// function after the records were written.
		return writeRecords(ctx, db, tx, recs)
	}
	p := v.(*pendingLog)
	p.recs = append(p.recs, recs...)
	return nil
}

const (
	// takeOffsetsQuery takes a partition's next n offsets and returns the
	// offset after them. Its row stays locked until the commit: another
	// transaction's offsets of the partition are taken after this one's
	// records are committed (or rolled back, returning the offsets).
	takeOffsetsQuery = `
		update queue_topic_partitions set next_offset = next_offset + ?
		where topic = ? and partition_id = ?
		returning next_offset`
	appendQueryHead = `
		insert into queue_topic_log (topic, partition_id, log_offset, key, value, published_at, traceparent)
		values `
	// maxAppendRows is the most records one insert writes.
	maxAppendRows = 128
	// appendColumns is the columns (and placeholders) of a row of appendQueryHead.
	appendColumns = 7
)

// appendQueries[i] appends 1<<i records in one statement. A transaction's
// records are written in chunks of these sizes (500 records take 7
// statements), so that the writer prepares a handful of texts rather than
// one for every count.
var appendQueries = func() []string {
	var qs []string
	for n := 1; n <= maxAppendRows; n *= 2 {
		row := "(" + strings.TrimSuffix(strings.Repeat("?, ", appendColumns), ", ") + "), "
		qs = append(qs, appendQueryHead+strings.TrimSuffix(strings.Repeat(row, n), ", "))
	}
	return qs
}()

// writeRecords writes the records a transaction published: grouped by topic
// and partition in sorted order (call order within each), one offset update
// per partition, then multi-row inserts.
func writeRecords(ctx context.Context, db *store.DB, tx *sql.Tx, recs []*staged) error {
	if len(recs) == 0 {
		return nil
	}
	recs = slices.Clone(recs)
	slices.SortStableFunc(recs, func(a, b *staged) int {
		return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	w := newWriter(ctx, tx, db)
	type partition struct {
		topic string
		id    int
	}
	var parts []partition
	counts := map[string]int{}
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && recs[j].topic == recs[i].topic && recs[j].partition == recs[i].partition {
			j++
		}
		r, n := recs[i], j-i
		var end int64
		if err := w.queryRow(takeOffsetsQuery, n, r.topic, r.partition).Scan(&end); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("queue: publish to %s: %w", r.topic, ErrNotFound)
			}
			return fmt.Errorf("queue: publish to %s: %w", r.topic, err)
		}
		for k, rec := range recs[i:j] {
			rec.offset = end - int64(n) + int64(k)
		}
		parts = append(parts, partition{r.topic, r.partition})
		counts[r.topic] += n
		i = j
	}
	now := store.TS(db.Now())
	for rest := recs; len(rest) > 0; {
		size := bits.Len(uint(min(len(rest), maxAppendRows))) - 1 // the largest power of two that fits
		chunk := rest[:1<<size]
		args := make([]any, 0, appendColumns*len(chunk))
		for _, r := range chunk {
			args = append(args, r.topic, r.partition, r.offset, r.key, r.value, now, r.traceparent)
		}
		if _, err := w.exec(appendQueries[size], args...); err != nil {
			return fmt.Errorf("queue: publish to %s: %w", chunk[0].topic, err)
		}
		rest = rest[len(chunk):]
	}
	for _, r := range recs {
		if r.pos != nil {
			*r.pos = Position{Partition: r.partition, Offset: r.offset}
		}
	}
	afterCommit(db, tx, func() {
		for topic, n := range counts {
			metricSent.WithLabelValues(topic).Add(float64(n))
		}
		for _, p := range parts {
			topicSignal(db, p.topic).published(p.id)
		}
	})
	return nil
}

// ReadFilter selects records of a topic's retained log.
type ReadFilter struct {
	// Partition to read; nil reads every partition.
	Partition *int
	// FromOffset is the first offset read in each partition.
	FromOffset int64
	// Limit caps the records returned (default 100, at most 1000).
	Limit int
}

const (
	readLogQuery = `
		select partition_id, log_offset, key, value, published_at, traceparent from queue_topic_log
		where topic = ? and log_offset >= ?
		order by partition_id, log_offset
		limit ?`
	readPartitionQuery = `
		select partition_id, log_offset, key, value, published_at, traceparent from queue_topic_log
		where topic = ? and partition_id = ? and log_offset >= ?
		order by log_offset
		limit ?`
)

// Read returns retained records in partition and offset order, without
// touching any group's offsets.
func (t *Topic) Read(ctx context.Context, f ReadFilter) ([]Record, error) {
	return readLog(ctx, t.db, t.name, f)
}

func readLog(ctx context.Context, db *store.DB, topic string, f ReadFilter) ([]Record, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 1000)
	var (
		rows *sql.Rows
		err  error
	)
	if f.Partition != nil {
		rows, err = readQuery(ctx, db, readPartitionQuery, topic, *f.Partition, f.FromOffset, f.Limit)
	} else {
		rows, err = readQuery(ctx, db, readLogQuery, topic, f.FromOffset, f.Limit)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: read %s: %w", topic, err)
	}
	defer rows.Close()
	var recs []Record
	for rows.Next() {
		r := Record{Topic: topic}
		var at store.Timestamp
		if err := rows.Scan(&r.Partition, &r.Offset, &r.Key, &r.Value, &at, &r.Traceparent); err != nil {
			return nil, err
		}
		r.PublishedAt = at.Time
		recs = append(recs, r)
	}
	return recs, rows.Err()
}

// topicInfo is a topic as declared in the database.
type topicInfo struct {
	name       string
	partitions int
	retention  time.Duration
}

func loadTopic(ctx context.Context, db *store.DB, name string) (topicInfo, error) {
	ti := topicInfo{name: name}
	var secs int64
	err := db.Read.QueryRowContext(ctx, `select partitions, retention_seconds from queue_topics where name = ?`, name).Scan(&ti.partitions, &secs)
	if errors.Is(err, sql.ErrNoRows) {
		return ti, fmt.Errorf("queue: topic %s: %w", name, ErrNotFound)
	}
	ti.retention = time.Duration(secs) * time.Second
	return ti, err
}

// SeekGroup moves a group's committed offsets, so that it replays (or
// skips) records: offsets maps a partition to the next offset to handle;
// partitions not in the map keep theirs. An offset below the retained log is
// moved to its first record, one past the end to the end. The partitions'
// retry state is cleared; dead letters stay. It fails with ErrGroupActive
// while a subscriber holds any of the group's partitions.
func (t *Topic) SeekGroup(ctx context.Context, group string, offsets map[int]int64) error {
	owner := "seek/" + string(newID())
	var held []int
	defer func() {
		for _, p := range held {
			_ = t.db.ReleaseLease(context.WithoutCancel(ctx), leaseName(t.name, group, p), owner)
		}
	}()
	for p := range offsets {
		if p < 0 || p >= t.partitions {
			return fmt.Errorf("queue: seek %s/%s: no partition %d", t.name, group, p)
		}
		ok, err := t.db.AcquireLease(ctx, leaseName(t.name, group, p), owner, time.Minute)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("queue: seek %s/%s: %w", t.name, group, ErrGroupActive)
		}
		held = append(held, p)
	}
	return t.db.Tx(ctx, func(tx *sql.Tx) error {
		var exists int
		if err := tx.QueryRowContext(ctx, `select count(*) from queue_groups where topic = ? and grp = ?`, t.name, group).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return fmt.Errorf("queue: seek %s/%s: %w", t.name, group, ErrNotFound)
		}
		for p, off := range offsets {
			var first, end int64
			if err := tx.QueryRowContext(ctx, logBoundsQuery, t.name, p, t.name, p).Scan(&first, &end); err != nil {
				return err
			}
			off = min(max(off, first), end)
			if _, err := tx.ExecContext(ctx, `update queue_group_offsets set committed = ? where topic = ? and grp = ? and partition_id = ?`,
				off, t.name, group, p); err != nil {
				return err
			}
			for _, q := range []string{
				`delete from queue_group_done where topic = ? and grp = ? and partition_id = ?`,
				`delete from queue_group_retries where topic = ? and grp = ? and partition_id = ?`,
			} {
				if _, err := tx.ExecContext(ctx, q, t.name, group, p); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// logBoundsQuery reads a partition's first retained offset and its end
// (the next offset to be written).
const logBoundsQuery = `
	select coalesce((select min(log_offset) from queue_topic_log where topic = ? and partition_id = ?), p.next_offset), p.next_offset
	from queue_topic_partitions p where p.topic = ? and p.partition_id = ?`

func leaseName(topic, group string, partition int) string {
	return fmt.Sprintf("queue.group/%s/%s/%d", topic, group, partition)
}
