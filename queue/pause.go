package queue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"switchyard/store"
)

// Pausing. An operator pauses a queue or a topic's consumer group and
// resumes it later; the state is a row of queue_pauses, so it is durable and
// every process and instance on the database honours it:
//
//   - A worker's receive (one statement) takes no message of a queue that has
//     the row: the check is part of the statement's own condition, an
//     uncorrelated NOT EXISTS that the database evaluates once a receive, so
//     it costs one index probe of a tiny table and needs no cache that could
//     be stale. A receive that committed before the pause delivers its
//     messages; their handlers finish. Sends go on and their messages wait.
//   - A subscriber of a paused group starts no records: the transaction of a
//     partition's records (a Handler subscription) checks the row first and
//     ends, committing nothing, when it is there; a Process subscription
//     checks before it calls Process. Either way the subscriber then knows
//     and starts nothing more until it sees the row gone: at the group's
//     wake-up, which a resume sends, and at every poll. Other groups of the
//     topic are not touched.
//   - Resume deletes the row and wakes the queue's workers or the group's
//     subscribers (signal.notify: this process at once, the others on
//     PostgreSQL by the broadcast; on SQLite the other processes find the
//     work at their next poll, as they find sends).

// PauseTarget names what a pause applies to: a queue (Group empty), or a
// topic's consumer group (Queue is the topic's name).
type PauseTarget struct {
	Queue string
	Group string
}

func (t PauseTarget) String() string {
	if t.Group != "" {
		return fmt.Sprintf("consumer group %q of topic %q", t.Group, t.Queue)
	}
	return fmt.Sprintf("queue %q", t.Queue)
}

// PauseOpts say who pauses and why.
type PauseOpts struct {
	// By is who paused, as the surface knows them: "console", "admin API".
	By string
	// Reason is the operator's note; optional.
	Reason string
}

// PauseState is whether a queue or a group is paused, since when, by whom
// and why. The zero value is running.
type PauseState struct {
	Paused bool
	// At is when it was paused, by the store's clock; zero while running.
	At     time.Time
	By     string
	Reason string
}

const (
	// pausedQuery is the check a Handler subscription's transaction makes
	// (on the writer, prepared) and a Process subscription makes before it
	// processes (on the read pool).
	pausedQuery = `select count(*) from queue_pauses where queue = ? and grp = ?`
	pauseQuery  = `
		insert into queue_pauses (queue, grp, paused_at, paused_by, reason) values (?, ?, ?, ?, ?)
		on conflict (queue, grp) do nothing`
	pauseStateQuery = `select paused_at, paused_by, reason from queue_pauses where queue = ? and grp = ?`
	resumeQuery     = `delete from queue_pauses where queue = ? and grp = ?`
	allPausesQuery  = `select queue, grp, paused_at, paused_by, reason from queue_pauses`
)

// errPaused ends the transaction of a paused group's records: nothing of it
// is kept, and no attempt is counted.
const errPaused = Error("queue: the consumer group is paused")

// Pause pauses a queue or a consumer group: its workers or subscribers, in
// every process on the database, take no more messages or records until
// Resume; sends and publishes go on. Pausing what is paused changes nothing
// and returns the state as it stands (who paused it first, and when). It
// fails with ErrNotFound for a queue or a group the database does not know.
func (a *Admin) Pause(ctx context.Context, t PauseTarget, opts PauseOpts) (PauseState, error) {
	if err := a.pauseTargetExists(ctx, t); err != nil {
		return PauseState{}, err
	}
	if opts.By == "" {
		opts.By = "unknown"
	}
	var (
		st      PauseState
		changed bool
	)
	err := a.db.Tx(ctx, func(tx *sql.Tx) error {
		n, err := affected(tx.ExecContext(ctx, pauseQuery, t.Queue, t.Group, store.TS(a.db.Now()), opts.By, opts.Reason))
		if err != nil {
			return err
		}
		changed = n == 1
		st, err = readPause(tx.QueryRowContext(ctx, pauseStateQuery, t.Queue, t.Group))
		return err
	})
	if err != nil {
		return PauseState{}, fmt.Errorf("queue: pause %s: %w", t, err)
	}
	if changed {
		// A group's subscribers learn it now rather than at their next
		// transaction; a queue's receive checks by itself.
		if t.Group != "" {
			groupSignal(a.db, t.Queue, t.Group).notify()
		}
		a.log.Info("queue paused", slog.String("queue", t.Queue), slog.String("group", t.Group),
			slog.String("by", opts.By), slog.String("reason", opts.Reason), slog.String("outcome", "paused"))
	}
	return st, nil
}

// Resume resumes a paused queue or consumer group and wakes its workers or
// subscribers at once. Resuming what runs changes nothing. It fails with
// ErrNotFound for a queue or a group the database does not know.
func (a *Admin) Resume(ctx context.Context, t PauseTarget) (PauseState, error) {
	if err := a.pauseTargetExists(ctx, t); err != nil {
		return PauseState{}, err
	}
	var changed bool
	err := a.db.Tx(ctx, func(tx *sql.Tx) error {
		n, err := affected(tx.ExecContext(ctx, resumeQuery, t.Queue, t.Group))
		changed = n == 1
		return err
	})
	if err != nil {
		return PauseState{}, fmt.Errorf("queue: resume %s: %w", t, err)
	}
	if changed {
		if t.Group != "" {
			groupSignal(a.db, t.Queue, t.Group).notify()
		} else {
			queueSignal(a.db, t.Queue).notify()
		}
		a.log.Info("queue resumed", slog.String("queue", t.Queue), slog.String("group", t.Group), slog.String("outcome", "resumed"))
	}
	return PauseState{}, nil
}

// PauseOf reads whether a queue or a group is paused.
func (a *Admin) PauseOf(ctx context.Context, t PauseTarget) (PauseState, error) {
	return pauseOf(ctx, a.db, t.Queue, t.Group)
}

func pauseOf(ctx context.Context, db *store.DB, queue, group string) (PauseState, error) {
	st, err := readPause(db.Read.QueryRowContext(ctx, pauseStateQuery, queue, group))
	if err != nil {
		return PauseState{}, fmt.Errorf("queue: pause state of %s: %w", PauseTarget{Queue: queue, Group: group}, err)
	}
	return st, nil
}

// readPause reads a pauseStateQuery row: no row is running.
func readPause(row *sql.Row) (PauseState, error) {
	var (
		st PauseState
		at store.Timestamp
	)
	err := row.Scan(&at, &st.By, &st.Reason)
	if errors.Is(err, sql.ErrNoRows) {
		return PauseState{}, nil
	}
	if err != nil {
		return PauseState{}, err
	}
	st.Paused, st.At = true, at.Time
	return st, nil
}

// allPauses reads every paused queue and group, by PauseTarget.
func allPauses(ctx context.Context, db *store.DB) (map[PauseTarget]PauseState, error) {
	rows, err := db.Read.QueryContext(ctx, allPausesQuery)
	if err != nil {
		return nil, fmt.Errorf("queue: pauses: %w", err)
	}
	defer rows.Close()
	out := map[PauseTarget]PauseState{}
	for rows.Next() {
		var (
			t  PauseTarget
			st PauseState
			at store.Timestamp
		)
		if err := rows.Scan(&t.Queue, &t.Group, &at, &st.By, &st.Reason); err != nil {
			return nil, err
		}
		st.Paused, st.At = true, at.Time
		out[t] = st
	}
	return out, rows.Err()
}

// pauseTargetExists fails with ErrNotFound for a queue the database does not
// know (knownQueue) or a group that does not exist.
func (a *Admin) pauseTargetExists(ctx context.Context, t PauseTarget) error {
	if t.Group != "" {
		var one int
		err := a.db.Read.QueryRowContext(ctx, `select 1 from queue_groups where topic = ? and grp = ?`, t.Queue, t.Group).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("queue: no consumer group %q on topic %q: %w", t.Group, t.Queue, ErrNotFound)
		}
		return err
	}
	ok, err := a.knownQueue(ctx, t.Queue)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("queue: no queue %q: %w", t.Queue, ErrNotFound)
	}
	return nil
}

// groupPaused reports whether the subscription's group is paused, as the
// transaction of its records (w) or the read pool (w nil) sees it.
func (s *Subscription) groupPaused(ctx context.Context, w *writer) (bool, error) {
	var n int
	var err error
	if w != nil {
		err = w.queryRow(pausedQuery, s.t.name, s.group).Scan(&n)
	} else {
		err = readRow(ctx, s.db, pausedQuery, s.t.name, s.group).Scan(&n)
	}
	return n > 0, err
}
