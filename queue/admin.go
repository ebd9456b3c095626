package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"switchyard/store"
)

// AdminOpts configure NewAdmin. Zero values get defaults.
type AdminOpts struct {
	DB *store.DB
	// KeyRetention is how long idempotency keys are remembered (default 7 days).
	KeyRetention time.Duration
	// FailureRetention is how long failure records are kept (default 7 days).
	FailureRetention time.Duration
	// JanitorInterval is how often RunJanitor prunes (default 1 min).
	JanitorInterval time.Duration
	// LeaveRecords makes Prune leave topic records, idempotency keys and
	// failure records alone, for a process whose retention runner prunes
	// them in batches with PruneTopicRecords, PruneKeys and PruneFailures,
	// by its own options (--retention-topic-records, one retention for
	// every topic instead of the retention each topic was declared with;
	// --retention-queue-keys; --retention-queue-failures).
	LeaveRecords bool
	// Logger gets operator actions and janitor results; nil discards.
	Logger *slog.Logger
}

// Admin is the operator's handle on every queue and topic in the database:
// statistics, message listings, redrive and purge, the admin API, and the
// janitor that applies retention.
type Admin struct {
	db   *store.DB
	opts AdminOpts
	log  *slog.Logger
}

// NewAdmin returns the Admin of opts.DB.
func NewAdmin(opts AdminOpts) *Admin {
	if opts.DB == nil {
		panic("queue: nil DB")
	}
	if opts.KeyRetention <= 0 {
		opts.KeyRetention = 7 * 24 * time.Hour
	}
	if opts.FailureRetention <= 0 {
		opts.FailureRetention = 7 * 24 * time.Hour
	}
	if opts.JanitorInterval <= 0 {
		opts.JanitorInterval = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Admin{db: opts.DB, opts: opts, log: opts.Logger}
}

// Stats is a snapshot of every queue and topic.
type Stats struct {
	Queues []QueueStats
	Topics []TopicStats
}

// QueueStats counts a queue's messages by state.
type QueueStats struct {
	Name string
	// Ready messages can be received now.
	Ready int64
	// Delayed messages wait for their send delay or their retry backoff.
	Delayed int64
	// Held messages wait behind an earlier message of their order key.
	Held int64
	// InFlight messages are being handled (received, no result yet).
	InFlight int64
	// Dead messages are in the dead-letter queue.
	Dead int64
	// OldestAt is when the oldest live message was sent; zero when empty.
	OldestAt time.Time
	// OldestAge is the age of the oldest live message.
	OldestAge time.Duration
	// Pause says whether the queue is paused, since when and by whom.
	Pause PauseState
}

// TopicStats describes a topic, its partitions and its groups.
type TopicStats struct {
	Name       string
	Partitions []PartitionStats
	Retention  time.Duration
	Groups     []GroupStats
}

// PartitionStats is a partition's retained range: offsets [Start, End).
type PartitionStats struct {
	Partition int
	Start     int64
	End       int64
}

// GroupStats is a consumer group's progress on a topic.
type GroupStats struct {
	Group string
	// Lag is the sum of the partitions' lag.
	Lag int64
	// Retrying counts records waiting for another attempt (or redriven).
	Retrying int64
	// Dead counts the group's dead letters.
	Dead int64
	// OldestAge is the age of the oldest unprocessed record in any partition.
	OldestAge time.Duration
	// Members are the owner ids (sub/host:pid:random) of the group's live
	// subscribers, in any process, sorted.
	Members    []string
	Partitions []GroupPartitionStats
	// Pause says whether the group is paused, since when and by whom.
	Pause PauseState
}

// GroupPartitionStats is a group's progress on one partition.
type GroupPartitionStats struct {
	Partition int
	// Committed is the group's committed offset: every record below it is
	// finished, except redriven ones.
	Committed int64
	// End is the log-end offset, the next offset to be written.
	End int64
	// Lag is End minus Committed. Records of other keys handled while an
	// earlier record waits for a retry are counted until it finishes.
	Lag int64
	// OldestAt is when the oldest unprocessed record was published; zero
	// when caught up.
	OldestAt  time.Time
	OldestAge time.Duration
	// Owner is the subscriber holding the partition's lease (an owner id
	// as in GroupStats.Members; a seek holds it for a moment too), and
	// LeaseExpiresAt when that lease runs out unless renewed, by the lease
	// clock. Both are zero when nobody holds it.
	Owner          string
	LeaseExpiresAt time.Time
}

const queueStatsQuery = `
	select g.queue,
		coalesce(sum(case when g.timeout <> ? and g.timeout <= ? then 1 else 0 end), 0),
		coalesce(sum(case when g.timeout <> ? and g.timeout > ? and (g.received = 0 or r.attempt = g.received) then 1 else 0 end), 0),
		coalesce(sum(case when g.timeout = ? then 1 else 0 end), 0),
		coalesce(sum(case when g.timeout <> ? and g.timeout > ? and g.received > 0 and (r.attempt is null or r.attempt <> g.received) then 1 else 0 end), 0),
		min(g.created)
	from goqite g left join queue_retries r on r.message_id = g.id
	group by g.queue`

// Stats counts every queue's messages and every group's lag. Queues appear
// when declared in this process or when they hold messages or dead letters.
func (a *Admin) Stats(ctx context.Context) (Stats, error) {
	qs, err := a.queueStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	ts, err := a.topicStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	return Stats{Queues: qs, Topics: ts}, nil
}

func (a *Admin) queueStats(ctx context.Context) ([]QueueStats, error) {
	now := a.db.Now()
	nowText := gqTime(now)
	byName := map[string]*QueueStats{}
	get := func(name string) *QueueStats {
		if s, ok := byName[name]; ok {
			return s
		}
		s := &QueueStats{Name: name}
		byName[name] = s
		return s
	}
	for _, n := range hubFor(a.db).declaredQueues() {
		get(n)
	}
	pauses, err := allPauses(ctx, a.db)
	if err != nil {
		return nil, err
	}
	for t, p := range pauses {
		if t.Group == "" {
			get(t.Queue).Pause = p // a paused queue stays in view, messages or not
		}
	}
	rows, err := a.db.Read.QueryContext(ctx, queueStatsQuery,
		parkedTimeout, nowText, parkedTimeout, nowText, parkedTimeout, parkedTimeout, nowText)
	if err != nil {
		return nil, fmt.Errorf("queue: stats: %w", err)
	}
	for rows.Next() {
		var (
			name   string
			s      QueueStats
			oldest sql.NullString
		)
		if err := rows.Scan(&name, &s.Ready, &s.Delayed, &s.Held, &s.InFlight, &oldest); err != nil {
			rows.Close()
			return nil, err
		}
		q := get(strings.TrimSuffix(name, heldSuffix))
		q.Ready += s.Ready
		q.Delayed += s.Delayed
		q.Held += s.Held
		q.InFlight += s.InFlight
		if oldest.Valid {
			if t, err := parseGQ(oldest.String); err == nil && (q.OldestAt.IsZero() || t.Before(q.OldestAt)) {
				q.OldestAt, q.OldestAge = t, max(now.Sub(t), 0)
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = a.db.Read.QueryContext(ctx, `select queue, count(*) from queue_dead where grp = '' group by queue`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var (
			name string
			n    int64
		)
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return nil, err
		}
		get(name).Dead = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]QueueStats, 0, len(byName))
	for _, s := range byName {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (a *Admin) topicStats(ctx context.Context) ([]TopicStats, error) {
	now := a.db.Now()
	rows, err := a.db.Read.QueryContext(ctx, `select name, partitions, retention_seconds from queue_topics order by name`)
	if err != nil {
		return nil, fmt.Errorf("queue: topic stats: %w", err)
	}
	var topics []TopicStats
	var counts []int
	for rows.Next() {
		var (
			ts   TopicStats
			n    int
			secs int64
		)
		if err := rows.Scan(&ts.Name, &n, &secs); err != nil {
			rows.Close()
			return nil, err
		}
		ts.Retention = time.Duration(secs) * time.Second
		topics = append(topics, ts)
		counts = append(counts, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range topics {
		ts := &topics[i]
		for p := range counts[i] {
			ps := PartitionStats{Partition: p}
			if err := a.db.Read.QueryRowContext(ctx, logBoundsQuery, ts.Name, p, ts.Name, p).Scan(&ps.Start, &ps.End); err != nil {
				return nil, err
			}
			ts.Partitions = append(ts.Partitions, ps)
		}
		groups, err := groupNames(ctx, a.db, ts.Name)
		if err != nil {
			return nil, err
		}
		for _, g := range groups {
			gs, err := groupStats(ctx, a.db, ts.Name, g, counts[i], now)
			if err != nil {
				return nil, err
			}
			ts.Groups = append(ts.Groups, gs)
		}
	}
	return topics, nil
}

func groupNames(ctx context.Context, db *store.DB, topic string) ([]string, error) {
	rows, err := db.Read.QueryContext(ctx, `select grp from queue_groups where topic = ? order by grp`, topic)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

func groupStats(ctx context.Context, db *store.DB, topic, group string, partitions int, now time.Time) (GroupStats, error) {
	gs := GroupStats{Group: group}
	v, err := readGroupView(ctx, db, topic, group, partitions)
	if err != nil {
		return gs, err
	}
	if gs.Pause, err = pauseOf(ctx, db, topic, group); err != nil {
		return gs, err
	}
	gs.Members = v.members
	for p := range partitions {
		ps, err := groupPartitionStats(ctx, db, topic, group, p, now)
		if err != nil {
			return gs, err
		}
		ps.Owner, ps.LeaseExpiresAt = v.owner[p], v.expires[p]
		gs.Lag += ps.Lag
		gs.OldestAge = max(gs.OldestAge, ps.OldestAge)
		gs.Partitions = append(gs.Partitions, ps)
	}
	if err := db.Read.QueryRowContext(ctx, `select count(*) from queue_group_retries where topic = ? and grp = ?`, topic, group).Scan(&gs.Retrying); err != nil {
		return gs, err
	}
	if err := db.Read.QueryRowContext(ctx, `select count(*) from queue_dead where queue = ? and grp = ?`, topic, group).Scan(&gs.Dead); err != nil {
		return gs, err
	}
	return gs, nil
}

const groupPartitionQuery = `
	select o.committed, tp.next_offset,
		(select l.published_at from queue_topic_log l
			where l.topic = o.topic and l.partition_id = o.partition_id and l.log_offset = o.committed),
		(select min(r.published_at) from queue_group_retries r
			where r.topic = o.topic and r.grp = o.grp and r.partition_id = o.partition_id)
	from queue_group_offsets o
	join queue_topic_partitions tp on tp.topic = o.topic and tp.partition_id = o.partition_id
	where o.topic = ? and o.grp = ? and o.partition_id = ?`

func groupPartitionStats(ctx context.Context, db *store.DB, topic, group string, p int, now time.Time) (GroupPartitionStats, error) {
	ps := GroupPartitionStats{Partition: p}
	var atCommitted, retrying store.Timestamp
	err := readRow(ctx, db, groupPartitionQuery, topic, group, p).Scan(&ps.Committed, &ps.End, &atCommitted, &retrying)
	if errors.Is(err, sql.ErrNoRows) {
		return ps, nil
	}
	if err != nil {
		return ps, fmt.Errorf("queue: group %s/%s partition %d: %w", topic, group, p, err)
	}
	ps.Lag = max(ps.End-ps.Committed, 0)
	for _, t := range []store.Timestamp{atCommitted, retrying} {
		if !t.IsZero() && (ps.OldestAt.IsZero() || t.Before(ps.OldestAt)) {
			ps.OldestAt = t.Time
		}
	}
	if !ps.OldestAt.IsZero() {
		ps.OldestAge = max(now.Sub(ps.OldestAt), 0)
	}
	return ps, nil
}

// MessageState is where a live queue message stands.
type MessageState string

// Message states.
const (
	StateReady    MessageState = "ready"
	StateDelayed  MessageState = "delayed"
	StateHeld     MessageState = "held"
	StateInFlight MessageState = "inflight"
)

// MessageFilter selects live messages of a queue.
type MessageFilter struct {
	Queue string
	// State selects one state; empty means every state.
	State MessageState
	// OrderKey, when set, keeps the messages of that order key.
	OrderKey string
	// Search keeps the messages whose id or order key is Search or whose
	// payload holds it (case-sensitive, in its first SearchBytes bytes).
	Search string
	// Before lists the messages sent before this cursor (a MessageInfo's
	// Cursor), newest first; After those sent after it, oldest first; with
	// neither, NewestFirst lists from the newest. With none of the three,
	// the list is in the order the messages are handled: by priority, then
	// oldest first.
	Before, After string
	NewestFirst   bool
	// Limit caps the messages returned (default 100, at most 1001).
	Limit int
}

// MessageInfo is a live message as the operator sees it.
type MessageInfo struct {
	ID       ID
	Queue    string
	State    MessageState
	Body     []byte
	OrderKey string
	Priority int
	// Attempts counts deliveries so far.
	Attempts int
	// LastError is the error of the last failed attempt, if any.
	LastError string
	SentAt    time.Time
	// VisibleAt is when the message can next be received; zero when held.
	VisibleAt time.Time
	// Cursor is the message's place in a newest-first list, for the
	// filter's Before or After.
	Cursor string
}

const listMessagesQuery = `
	select ` + liveColumns + liveFrom + `
	where g.queue in (?, ?) and` + liveState + `
	order by g.priority desc, g.created
	limit ?`

// ListMessages lists a queue's live messages: in the order they are
// handled, or a window of the newest-first list (f's cursors).
func (a *Admin) ListMessages(ctx context.Context, f MessageFilter) ([]MessageInfo, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, maxListLimit)
	if err := checkState(f.State); err != nil {
		return nil, err
	}
	now := gqTime(a.db.Now())
	if f.Before == "" && f.After == "" && !f.NewestFirst {
		args := append([]any{f.Queue, heldQueue(f.Queue)}, liveStateArgs(f, now)...)
		return a.scanMessages(ctx, f.Queue, now, fmt.Sprintf(listMessagesQuery, contains(a.db, "g.body")), append(args, f.Limit)...)
	}
	b, err := boundsOf(f.Before, f.After, f.NewestFirst)
	if err != nil {
		return nil, err
	}
	query := listLiveAscQuery
	if b.desc {
		query = listLiveDescQuery
	}
	query = fmt.Sprintf(query, contains(a.db, "g.body"))
	// The queue and its held twin are two ranges of the index: read a
	// window of each and merge them.
	var out []MessageInfo
	for _, name := range []string{f.Queue, heldQueue(f.Queue)} {
		args := append([]any{name, b.at, b.id}, liveStateArgs(f, now)...)
		msgs, err := a.scanMessages(ctx, f.Queue, now, query, append(args, f.Limit)...)
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
	}
	slices.SortFunc(out, func(x, y MessageInfo) int {
		c := strings.Compare(x.Cursor, y.Cursor)
		if b.desc {
			c = -c
		}
		return c
	})
	if len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

func (a *Admin) scanMessages(ctx context.Context, queue, now, query string, args ...any) ([]MessageInfo, error) {
	rows, err := a.db.Read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("queue: list %s: %w", queue, err)
	}
	defer rows.Close()
	var out []MessageInfo
	for rows.Next() {
		var (
			m                MessageInfo
			created, timeout string
			failed           int
		)
		if err := rows.Scan(&m.ID, &m.Body, &m.Attempts, &created, &timeout, &m.Priority, &failed, &m.LastError, &m.OrderKey); err != nil {
			return nil, err
		}
		m.Queue = queue
		m.Cursor = makeCursor(created, string(m.ID))
		m.SentAt, _ = parseGQ(created)
		switch {
		case timeout == parkedTimeout:
			m.State = StateHeld
		case timeout <= now:
			m.State = StateReady
			m.VisibleAt, _ = parseGQ(timeout)
		case m.Attempts == 0 || failed == m.Attempts:
			m.State = StateDelayed
			m.VisibleAt, _ = parseGQ(timeout)
		default:
			m.State = StateInFlight
			m.VisibleAt, _ = parseGQ(timeout)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// DeadFilter selects dead letters: those of a queue (Group empty) or of a
// topic's consumer group (Queue is the topic).
type DeadFilter struct {
	Queue string
	Group string
	// ID selects one dead letter; empty selects all.
	ID string
	// IDs selects these dead letters of the queue or group, for Redrive and
	// PurgeDead (at most MaxIDs; the other filters do not apply). An id
	// that names no dead letter is skipped.
	IDs []string
	// OrderKey, when set, selects the dead letters of that order key only
	// (queue messages).
	OrderKey string
	// Search keeps the dead letters whose id, order key or record key is
	// Search, or whose payload holds it (case-sensitive, in its first
	// SearchBytes bytes).
	Search string
	// Before lists the dead letters that died before this cursor (a
	// DeadLetter's Cursor), newest first; After those that died after it,
	// oldest first. With neither, the list starts at the oldest, or at the
	// newest when NewestFirst.
	Before, After string
	NewestFirst   bool
	// Limit caps the dead letters listed (default 100, at most 1001).
	Limit int
}

// DeadLetter is a message or record that failed for good.
type DeadLetter struct {
	ID    string
	Queue string
	Group string
	// Partition and Offset locate a topic record; nil for queue messages.
	Partition *int
	Offset    *int64
	// Key is the record's key (topics).
	Key       string
	OrderKey  string
	Body      []byte
	Attempts  int
	LastError string
	// CreatedAt is when the message was sent or the record published.
	CreatedAt     time.Time
	FirstFailedAt time.Time
	DeadAt        time.Time
	// Traceparent is the trace context the message or record carried
	// ("" when none was recorded); a redrive carries it on.
	Traceparent string
	// Cursor is the dead letter's place in the list, for the filter's
	// Before or After.
	Cursor string
}

type deadRow struct {
	DeadLetter
	seq      int64
	priority int
}

func scanDead(rows *sql.Rows) (deadRow, error) {
	var (
		d              deadRow
		part           sql.NullInt64
		off            sql.NullInt64
		created, first store.Timestamp
		deadAt         string // as stored: the cursor compares it as text
	)
	err := rows.Scan(&d.ID, &d.Queue, &d.Group, &part, &off, &d.Key, &d.OrderKey, &d.seq, &d.priority, &d.Body,
		&d.Attempts, &d.LastError, &created, &first, &deadAt, &d.Traceparent)
	if err != nil {
		return d, err
	}
	var dead store.Timestamp
	err = dead.Scan(deadAt)
	d.Cursor = makeCursor(deadAt, d.ID)
	if part.Valid {
		p := int(part.Int64)
		d.Partition = &p
	}
	if off.Valid {
		d.Offset = &off.Int64
	}
	d.CreatedAt, d.FirstFailedAt, d.DeadAt = created.Time, first.Time, dead.Time
	return d, err
}

// ListDead lists dead letters: oldest death first, or a window of the list
// by f's cursors.
func (a *Admin) ListDead(ctx context.Context, f DeadFilter) ([]DeadLetter, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, maxListLimit)
	dead, err := listDead(ctx, a.db, a.db.Read, f)
	if err != nil {
		return nil, fmt.Errorf("queue: list dead letters of %s: %w", f.Queue, err)
	}
	out := make([]DeadLetter, len(dead))
	for i, d := range dead {
		out[i] = d.DeadLetter
	}
	return out, nil
}

// querier is a read pool or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// listDead reads a window of the dead letters f selects, or those of f.IDs.
func listDead(ctx context.Context, db *store.DB, q querier, f DeadFilter) ([]deadRow, error) {
	var dead []deadRow
	read := func(query string, args ...any) error {
		rows, err := q.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			d, err := scanDead(rows)
			if err != nil {
				return err
			}
			dead = append(dead, d)
		}
		return rows.Err()
	}
	if len(f.IDs) > 0 {
		for _, id := range f.IDs[:min(len(f.IDs), MaxIDs)] {
			if err := read(deadByIDQuery, id, f.Queue, f.Group); err != nil {
				return nil, err
			}
		}
		return dead, nil
	}
	b, err := boundsOf(f.Before, f.After, f.NewestFirst)
	if err != nil {
		return nil, err
	}
	query := listDeadAscQuery
	if b.desc {
		query = listDeadDescQuery
	}
	args := append(deadArgs(f), b.at, b.id, f.Limit)
	return dead, read(deadQuery(db, query), args...)
}

// redriveBatch bounds the dead letters moved per transaction.
const redriveBatch = 500

// Redrive moves dead letters back: a queue message to its queue under its
// own id, with attempts reset and its order-key place kept; a topic record
// to its group's partition, ahead of later records of its key that are still
// held back (records of the key already handled stay handled). It returns
// how many moved; ErrNotFound when f.ID names no dead letter. The dead
// letters of f.IDs move in one transaction; those of a filter (its search
// term included, its cursors ignored) in transactions of up to 500.
func (a *Admin) Redrive(ctx context.Context, f DeadFilter) (int, error) {
	total := 0
	for {
		n, err := a.redriveSome(ctx, f)
		total += n
		if err != nil {
			return total, err
		}
		if f.ID != "" && total == 0 {
			return 0, fmt.Errorf("queue: dead letter %s of %s: %w", f.ID, f.Queue, ErrNotFound)
		}
		if f.ID != "" || len(f.IDs) > 0 || n < redriveBatch {
			break
		}
	}
	if total > 0 {
		a.log.Info("queue dead letters redriven", slog.String("queue", f.Queue), slog.String("group", f.Group),
			slog.Int("count", total), slog.String("outcome", "redriven"))
	}
	return total, nil
}

func (a *Admin) redriveSome(ctx context.Context, f DeadFilter) (int, error) {
	var n int
	err := a.db.Tx(ctx, func(tx *sql.Tx) error {
		n = 0
		batch := f
		batch.Before, batch.After, batch.NewestFirst, batch.Limit = "", "", false, redriveBatch
		if batch.ID != "" && len(batch.IDs) == 0 {
			batch.IDs = []string{batch.ID} // found by its key, not by a scan of the queue's
		}
		dead, err := listDead(ctx, a.db, tx, batch)
		if err != nil {
			return err
		}
		now := a.db.Now()
		if f.Group == "" {
			keys := make([]string, len(dead))
			for i, d := range dead {
				keys[i] = d.OrderKey
			}
			if err := lockOrderKeys(newWriter(ctx, tx, a.db), f.Queue, keys...); err != nil {
				return err
			}
		}
		for _, d := range dead {
			// The listing is a snapshot: a concurrent redrive or purge may
			// have taken the dead letter since. Only the transaction whose
			// delete removed it moves it.
			gone, err := affected(tx.ExecContext(ctx, `delete from queue_dead where id = ?`, d.ID))
			if err != nil {
				return err
			}
			if gone == 0 {
				continue
			}
			if d.Group == "" {
				err = redriveMessage(ctx, tx, d, now)
			} else {
				err = redriveRecord(ctx, tx, d, now)
			}
			if err != nil {
				return fmt.Errorf("redrive %s: %w", d.ID, err)
			}
			// The history goes on under the same id: the redrive is a line of
			// it, and the attempts after it count from 1 again.
			if err := recordAttempt(newWriter(ctx, tx, a.db), d.Queue, d.Group, d.AttemptsID(), 0, OutcomeRedriven, "", unknownDuration, now); err != nil {
				return err
			}
			n++
		}
		if n > 0 {
			// Each batch wakes the consumers as it commits, even when a later
			// one fails.
			a.db.AfterCommit(tx, func() {
				if f.Group == "" {
					queueSignal(a.db, f.Queue).notify()
				} else {
					groupSignal(a.db, f.Queue, f.Group).notify()
				}
			})
		}
		return nil
	})
	return n, err
}

const redriveOrderQuery = `
	insert into queue_order (seq, queue, order_key, message_id, parked, not_before)
	values (?, ?, ?, ?, ?, ?)`

func redriveMessage(ctx context.Context, tx *sql.Tx, d deadRow, now time.Time) error {
	visible := gqTime(now)
	if d.OrderKey != "" {
		var queued int64
		if err := tx.QueryRowContext(ctx, orderQueuedQuery, d.Queue, d.OrderKey).Scan(&queued); err != nil {
			return err
		}
		var seq any = d.seq
		if d.seq == 0 {
			seq = nil
		}
		if _, err := tx.ExecContext(ctx, redriveOrderQuery, seq, d.Queue, d.OrderKey, d.ID, store.Flag(queued > 0), visible); err != nil {
			return err
		}
		if queued > 0 {
			visible = parkedTimeout
		}
	}
	queue := d.Queue
	if visible == parkedTimeout {
		queue = heldQueue(d.Queue)
	}
	_, err := tx.ExecContext(ctx, insertMessageQuery, d.ID, gqTime(d.CreatedAt), queue, d.Body, visible, d.priority, d.Traceparent)
	return err
}

const redriveRecordQuery = `
	insert into queue_group_retries (topic, grp, partition_id, log_offset, key, value, published_at, attempts, not_before, last_error, first_failed_at, traceparent)
	values (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, null, ?)
	on conflict (topic, grp, partition_id, log_offset) do update set
		attempts = 0, value = excluded.value, not_before = excluded.not_before, last_error = excluded.last_error, first_failed_at = null,
		traceparent = excluded.traceparent`

func redriveRecord(ctx context.Context, tx *sql.Tx, d deadRow, now time.Time) error {
	if d.Partition == nil || d.Offset == nil {
		return errors.New("dead letter of a group without partition and offset")
	}
	if _, err := tx.ExecContext(ctx, redriveRecordQuery, d.Queue, d.Group, *d.Partition, *d.Offset, d.Key, d.Body,
		store.TS(d.CreatedAt), store.TS(now), "redriven after: "+d.LastError, d.Traceparent); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `delete from queue_group_done where topic = ? and grp = ? and partition_id = ? and log_offset = ?`,
		d.Queue, d.Group, *d.Partition, *d.Offset)
	return err
}

// PurgeDead deletes dead letters for good and returns how many: those of
// f.IDs, or every one f selects (its search term included, its cursors
// ignored), in one transaction.
func (a *Admin) PurgeDead(ctx context.Context, f DeadFilter) (int, error) {
	if f.ID != "" && len(f.IDs) == 0 {
		f.IDs = []string{f.ID} // found by its key, not by a scan of the queue's
	}
	var n int64
	err := a.db.Tx(ctx, func(tx *sql.Tx) error {
		n = 0
		if len(f.IDs) == 0 {
			var err error
			n, err = affected(tx.ExecContext(ctx, deadQuery(a.db, purgeDeadQuery), deadArgs(f)...))
			return err
		}
		for _, id := range f.IDs[:min(len(f.IDs), MaxIDs)] {
			gone, err := affected(tx.ExecContext(ctx, `delete from queue_dead where id = ? and queue = ? and grp = ?`, id, f.Queue, f.Group))
			if err != nil {
				return err
			}
			n += gone
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("queue: purge dead letters of %s: %w", f.Queue, err)
	}
	a.log.Info("queue dead letters purged", slog.String("queue", f.Queue), slog.String("group", f.Group),
		slog.Int64("count", n), slog.String("outcome", "purged"))
	return int(n), nil
}

// Purge deletes every live message of a queue — ready, delayed, held and in
// flight (the results of handlers still running are dropped) — and returns
// how many. Idempotency keys stay, so purged messages are not sent again by
// a retried send.
func (a *Admin) Purge(ctx context.Context, queue string) (int, error) {
	var n int64
	err := a.db.Tx(ctx, func(tx *sql.Tx) error {
		// No send, acknowledgement or redrive of an order key runs meanwhile:
		// one that read the key's slots before they go would park a message
		// behind a slot that is no longer there.
		if err := lockQueue(newWriter(ctx, tx, a.db), queue); err != nil {
			return err
		}
		var err error
		if n, err = affected(tx.ExecContext(ctx, `delete from goqite where queue in (?, ?)`, queue, heldQueue(queue))); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `delete from queue_order where queue = ?`, queue); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `delete from queue_retries where queue = ?`, queue)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("queue: purge %s: %w", queue, err)
	}
	a.log.Info("queue purged", slog.String("queue", queue), slog.Int64("count", n), slog.String("outcome", "purged"))
	return int(n), nil
}

// Publish appends a record to the named topic, declared by any process.
func (a *Admin) Publish(ctx context.Context, topic, key string, value []byte) (Position, error) {
	ti, err := loadTopic(ctx, a.db, topic)
	if err != nil {
		return Position{}, err
	}
	pos, err := publishBatch(ctx, a.db, topic, ti.partitions, []KeyValue{{Key: key, Value: value}})
	if err != nil {
		return Position{}, err
	}
	return pos[0], nil
}

// Read reads the named topic's retained log.
func (a *Admin) Read(ctx context.Context, topic string, f ReadFilter) ([]Record, error) {
	ti, err := loadTopic(ctx, a.db, topic)
	if err != nil {
		return nil, err
	}
	if f.Partition != nil && (*f.Partition < 0 || *f.Partition >= ti.partitions) {
		return nil, fmt.Errorf("queue: topic %s has no partition %d", topic, *f.Partition)
	}
	return readLog(ctx, a.db, topic, f)
}

// PruneResult counts what a Prune removed.
type PruneResult struct {
	Records  int64
	Keys     int64
	Failures int64
	// Members counts the member leases removed: those of subscribers that
	// died without stopping, expired for an hour.
	Members int64
}

// pruneBatch bounds the rows one prune transaction deletes, so the writer
// is never held for long.
const pruneBatch = 5000

// Prune applies retention once: topic records older than their topic's
// retention that every group has finished, idempotency keys older than
// KeyRetention, failure records older than FailureRetention, and the
// member leases that subscribers which died left behind, an hour after they
// expired. Dead letters are kept until an operator redrives or purges them.
func (a *Admin) Prune(ctx context.Context) (PruneResult, error) {
	var res PruneResult
	now := a.db.Now()
	topics, err := a.topicStats(ctx)
	if err != nil {
		return res, err
	}
	if a.opts.LeaveRecords {
		topics = nil
	}
	for _, t := range topics {
		cutoff := store.TS(now.Add(-t.Retention))
		for _, p := range t.Partitions {
			bound := p.End
			for _, g := range t.Groups {
				bound = min(bound, g.Partitions[p.Partition].Committed)
			}
			for from := p.Start; from < bound; {
				upTo := min(bound, from+pruneBatch)
				var n int64
				err := a.db.Tx(ctx, func(tx *sql.Tx) error {
					var err error
					n, err = affected(tx.ExecContext(ctx, `
						delete from queue_topic_log
						where topic = ? and partition_id = ? and log_offset < ? and published_at < ?`,
						t.Name, p.Partition, upTo, cutoff))
					return err
				})
				if err != nil {
					return res, fmt.Errorf("queue: prune %s: %w", t.Name, err)
				}
				res.Records += n
				if n < upTo-from {
					break // the rest is younger than the retention
				}
				from = upTo
			}
		}
	}
	jobs := []struct {
		query string
		age   time.Duration
		count *int64
	}{
		{`delete from queue_keys where created_at < ?`, a.opts.KeyRetention, &res.Keys},
		{`delete from queue_failures where failed_at < ?`, a.opts.FailureRetention, &res.Failures},
	}
	if a.opts.LeaveRecords {
		jobs = nil
	}
	for _, job := range jobs {
		err := a.db.Tx(ctx, func(tx *sql.Tx) error {
			var err error
			*job.count, err = affected(tx.ExecContext(ctx, job.query, store.TS(now.Add(-job.age))))
			return err
		})
		if err != nil {
			return res, fmt.Errorf("queue: prune: %w", err)
		}
	}
	// Member lease names carry their owner, so each run of a process adds
	// one; a PruneLeases prefix of "queue.member/" holds them all. The hour
	// leaves any clock skew between the store and the lease clock behind.
	n, err := a.db.PruneLeases(ctx, memberLeasesPrefix, now.Add(-time.Hour))
	if err != nil {
		return res, fmt.Errorf("queue: prune: %w", err)
	}
	res.Members = n
	return res, nil
}

// RunJanitor prunes every JanitorInterval until ctx ends. Among processes
// on the same file, one prunes at a time (a lease).
func (a *Admin) RunJanitor(ctx context.Context) {
	owner := "janitor/" + string(newID())
	t := time.NewTicker(a.opts.JanitorInterval)
	defer t.Stop()
	// A clock moved by hand (a test's) prunes by the new time at once.
	moved := make(chan struct{}, 1)
	defer a.db.OnClockMove(func() {
		select {
		case moved <- struct{}{}:
		default:
		}
	})()
	for {
		held, err := a.db.AcquireLease(ctx, "queue.janitor", owner, 2*a.opts.JanitorInterval)
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.Error("queue janitor lease failed", slog.Any("err", err))
		case held:
			res, err := a.Prune(ctx)
			if err != nil && ctx.Err() == nil {
				a.log.Error("queue prune failed", slog.Any("err", err))
			} else if res.Records+res.Keys+res.Failures+res.Members > 0 {
				a.log.Info("queue pruned", slog.Int64("records", res.Records), slog.Int64("keys", res.Keys), slog.Int64("failures", res.Failures),
					slog.Int64("members", res.Members))
			}
		}
		select {
		case <-ctx.Done():
			_ = a.db.ReleaseLease(context.WithoutCancel(ctx), "queue.janitor", owner)
			return
		case <-t.C:
		case <-moved:
		}
	}
}
