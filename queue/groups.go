package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"switchyard/store"
)

// The lifecycle of consumer groups. A group exists from its creation — by
// CreateGroup, or by the first Subscribe — until DeleteGroup; while it
// exists, retention keeps every record it has not finished, so a group
// nobody consumes any more pins its topic's log until it is deleted.

// GroupInfo is a consumer group as Groups lists it.
type GroupInfo struct {
	GroupStats
	CreatedAt time.Time
	// Active reports whether a subscriber (or a seek or delete in
	// progress) held any of the group's partitions when it was read:
	// DeleteGroup and SeekGroup refuse an active group.
	Active bool
}

// MaxGroupName is the longest group name CreateGroup accepts.
const MaxGroupName = 200

// CheckGroupName reports whether name may name a group created by
// CreateGroup: 1 to MaxGroupName letters, digits, '.', '_' or '-' (Kafka's
// alphabet), so that a name never needs escaping in a lease name, a URL or
// a metric label.
func CheckGroupName(name string) error {
	if name == "" || len(name) > MaxGroupName {
		return fmt.Errorf("queue: a group name has 1 to %d characters, not %d", MaxGroupName, len(name))
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("queue: group name %q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}

// CreateGroup creates the consumer group without subscribing: its committed
// offsets start at start (every retained record, or the end of each
// partition), and from then on retention keeps the records it has not
// finished. It reports whether it created the group. An existing group is
// left as it is — start does not move its offsets (SeekGroup does) — so
// creating a group twice is harmless.
func (t *Topic) CreateGroup(ctx context.Context, group string, start StartPosition) (bool, error) {
	if err := CheckGroupName(group); err != nil {
		return false, err
	}
	return createGroup(ctx, t.db, t.name, t.partitions, group, start)
}

// Groups lists the topic's consumer groups with their progress.
func (t *Topic) Groups(ctx context.Context) ([]GroupInfo, error) {
	return listGroups(ctx, t.db, t.name, t.partitions)
}

// DeleteGroup deletes the consumer group and everything kept for it — its
// committed offsets, its records finished ahead, its records in retry, its
// dead letters and its failure history — in one transaction, so that
// retention no longer keeps the topic's records for it. It fails with
// ErrGroupActive while a subscriber holds any of the group's partitions
// (stop the group's subscribers in every process first) and with
// ErrNotFound when there is no such group. A subscriber started later
// creates the group again, at its Start position.
func (t *Topic) DeleteGroup(ctx context.Context, group string) error {
	return deleteGroup(ctx, t.db, t.name, t.partitions, group)
}

// createGroup is Subscribe's: it creates the group if it is new.
func (t *Topic) createGroup(ctx context.Context, group string, start StartPosition) error {
	_, err := createGroup(ctx, t.db, t.name, t.partitions, group, start)
	return err
}

func createGroup(ctx context.Context, db *store.DB, topic string, partitions int, group string, start StartPosition) (bool, error) {
	var created bool
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		n, err := affected(tx.ExecContext(ctx, `
			insert into queue_groups (topic, grp, created_at) values (?, ?, ?)
			on conflict (topic, grp) do nothing`, topic, group, store.TS(db.Now())))
		if err != nil {
			return err
		}
		created = n > 0
		for p := range partitions {
			var first, end int64
			if err := tx.QueryRowContext(ctx, logBoundsQuery, topic, p, topic, p).Scan(&first, &end); err != nil {
				return err
			}
			committed := first
			if start == StartLatest {
				committed = end
			}
			if _, err := tx.ExecContext(ctx, `
				insert into queue_group_offsets (topic, grp, partition_id, committed) values (?, ?, ?, ?)
				on conflict (topic, grp, partition_id) do nothing`, topic, group, p, committed); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("queue: create group %s/%s: %w", topic, group, err)
	}
	return created, nil
}

const groupCreatedQuery = `select created_at from queue_groups where topic = ? and grp = ?`

// groupInfo reads one group; ErrNotFound when it does not exist.
func groupInfo(ctx context.Context, db *store.DB, topic string, partitions int, group string) (GroupInfo, error) {
	var created store.Timestamp
	err := db.Read.QueryRowContext(ctx, groupCreatedQuery, topic, group).Scan(&created)
	if errors.Is(err, sql.ErrNoRows) {
		return GroupInfo{}, fmt.Errorf("queue: group %s/%s: %w", topic, group, ErrNotFound)
	}
	if err != nil {
		return GroupInfo{}, fmt.Errorf("queue: group %s/%s: %w", topic, group, err)
	}
	now := db.Now()
	gs, err := groupStats(ctx, db, topic, group, partitions, now)
	if err != nil {
		return GroupInfo{}, err
	}
	g := GroupInfo{GroupStats: gs, CreatedAt: created.Time}
	for p := range partitions {
		l, ok, err := db.Lease(ctx, leaseName(topic, group, p))
		if err != nil {
			return GroupInfo{}, err
		}
		if ok && l.HeldAt(now) {
			g.Active = true
			break
		}
	}
	return g, nil
}

func listGroups(ctx context.Context, db *store.DB, topic string, partitions int) ([]GroupInfo, error) {
	names, err := groupNames(ctx, db, topic)
	if err != nil {
		return nil, fmt.Errorf("queue: groups of %s: %w", topic, err)
	}
	out := make([]GroupInfo, 0, len(names))
	for _, n := range names {
		g, err := groupInfo(ctx, db, topic, partitions, n)
		if errors.Is(err, ErrNotFound) {
			continue // deleted since the names were read
		}
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// deleteGroupQueries remove what is kept for a group, in an order that
// matters on PostgreSQL, where a transaction of the group's records or a
// redrive may be committing meanwhile (one whose owner's lease ran out): the
// offset rows first, which such a transaction locks before it writes, so
// the delete waits for it and the statements after see its rows; the dead
// letters next, which a redrive deletes before it writes a retry row, so a
// redrive either finishes first (and its retry row is deleted below) or
// finds nothing to move. Every statement reads what was committed before
// it began (READ COMMITTED), so nothing written for the group survives.
var deleteGroupQueries = []string{
	`delete from queue_group_offsets where topic = ? and grp = ?`,
	`delete from queue_dead where queue = ? and grp = ?`,
	`delete from queue_group_retries where topic = ? and grp = ?`,
	`delete from queue_group_done where topic = ? and grp = ?`,
	`delete from queue_failures where queue = ? and grp = ?`,
	`delete from queue_pauses where queue = ? and grp = ?`,
}

func deleteGroup(ctx context.Context, db *store.DB, topic string, partitions int, group string) error {
	fail := func(err error) error { return fmt.Errorf("queue: delete group %s/%s: %w", topic, group, err) }
	if _, err := groupInfo(ctx, db, topic, partitions, group); err != nil {
		return err
	}
	// Holding every partition's lease keeps subscribers (and seeks) out
	// until the rows are gone; one held by someone else means the group is
	// in use.
	owner := "delete/" + string(newID())
	var held []int
	defer func() {
		for _, p := range held {
			_ = db.ReleaseLease(context.WithoutCancel(ctx), leaseName(topic, group, p), owner)
		}
	}()
	for p := range partitions {
		ok, err := db.AcquireLease(ctx, leaseName(topic, group, p), owner, time.Minute)
		if err != nil {
			return fail(err)
		}
		if !ok {
			return fail(ErrGroupActive)
		}
		held = append(held, p)
	}
	// A member that holds no partition (one that has just joined, or one
	// waiting for its share) uses the group too.
	members, now, err := db.LeasesByPrefix(ctx, memberLeasePrefix(topic, group))
	if err != nil {
		return fail(err)
	}
	for _, m := range members {
		if m.HeldAt(now) {
			return fail(ErrGroupActive)
		}
	}
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		for _, q := range deleteGroupQueries {
			if _, err := tx.ExecContext(ctx, q, topic, group); err != nil {
				return err
			}
		}
		n, err := affected(tx.ExecContext(ctx, `delete from queue_groups where topic = ? and grp = ?`, topic, group))
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound // deleted meanwhile by another call
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	forgetConsumerMetrics(topic, group)
	return nil
}

// forgetConsumerMetrics drops this process's series of a deleted group, so
// that its last lag does not linger for alerts to fire on. Other processes
// drop theirs when they restart.
func forgetConsumerMetrics(topic, group string) {
	for _, v := range []*prometheus.CounterVec{metricReceived, metricSucceeded, metricRetried, metricDead} {
		v.DeleteLabelValues(topic, group)
	}
	metricDuration.DeleteLabelValues(topic, group)
	labels := prometheus.Labels{"topic": topic, "group": group}
	metricLag.DeletePartialMatch(labels)
	metricOldest.DeletePartialMatch(labels)
}
