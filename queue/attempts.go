package queue

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/store"
)

// The attempt history (issue 20). Every failed attempt of a queue message
// or a topic record is a row of queue_failures — its attempt number, the
// outcome the queue gave it (retry or dead), the error, when it was
// settled, how long the handler ran and the instance that ran it — written
// in the transaction that settles it, so a row exists exactly when the
// retry or the dead letter was committed. The success that ends a run of
// failures is a row too (outcome done): a message that failed twice and
// then succeeded has three. A first-try success is recorded only for a
// queue or group that asks for it (NewOpts.RecordSuccesses,
// SubscribeOpts.RecordSuccesses): a row per handled message costs the
// send→handle→ack loop a write per message and, at thousands of messages a
// second, a table that grows by hundreds of millions of rows a day
// (docs/benchmarks.md, "Attempt history cost"). The history outlives its
// message — an acknowledged message's rows, a dead letter's after a redrive
// or a purge — until retention removes them
// (--retention-queue-failures, PruneFailures).

// Outcome is what the queue made of one attempt.
type Outcome string

// Outcomes of an attempt.
const (
	// OutcomeDone: the handler succeeded and the message or record is finished.
	OutcomeDone Outcome = "done"
	// OutcomeRetry: the attempt failed and another was scheduled.
	OutcomeRetry Outcome = "retry"
	// OutcomeDead: the attempt failed and the message or record went to the
	// dead-letter queue.
	OutcomeDead Outcome = "dead"
	// OutcomeRedriven is no delivery but an operator's redrive of the dead
	// letter (Attempt 0): the attempts after it count from 1 again.
	OutcomeRedriven Outcome = "redriven"
)

// Attempt is one delivery attempt of a queue message or a topic record.
type Attempt struct {
	// Attempt is the delivery's number: 1 for the first, and again 1 for the
	// first after a redrive.
	Attempt int
	Outcome Outcome
	// Error is the handler's error ("" for done).
	Error string
	// At is when the attempt's outcome was committed.
	At time.Time
	// Duration is how long the handler ran; DurationKnown is false when
	// nobody knows (a delivery whose handler outlived its timeout, or whose
	// process stopped).
	Duration      time.Duration
	DurationKnown bool
	// Instance is the process that ran the attempt (hostname:pid, see
	// Instance); "" for attempts recorded before the history kept it.
	Instance string
}

// Instance names this process in the attempt history: hostname:pid, the
// prefix of its lease owner ids (store.NewOwnerID).
func Instance() string { return instanceName() }

var instanceName = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
})

// durationArg is the duration_us column of an attempt: microseconds, or
// NULL for a negative (unknown) duration.
func durationArg(d time.Duration) any {
	if d < 0 {
		return nil
	}
	return d.Microseconds()
}

// unknownDuration marks an attempt whose handler's running time is unknown.
const unknownDuration = time.Duration(-1)

// recordAttempt writes one attempt of message id (a queue message, grp "",
// or a record of group grp, id "<partition>:<offset>") in w's transaction.
func recordAttempt(w writer, queue, grp, id string, attempt int, outcome Outcome, text string, dur time.Duration, now time.Time) error {
	_, err := w.exec(insertFailureQuery, queue, grp, id, attempt, text, string(outcome), store.TS(now), durationArg(dur), instanceName())
	if err != nil {
		return fmt.Errorf("queue %s: record attempt %d of %s: %w", queue, attempt, id, err)
	}
	return nil
}

// insertDoneIfKnownQuery records a success only for a message that has a
// history already: a first try after a redrive, whose attempt number is 1
// again. One index probe, no write, for every other first try.
const insertDoneIfKnownQuery = `
	insert into queue_failures (queue, grp, message_id, attempt, error, outcome, failed_at, duration_us, instance)
	select ?, '', ?, ?, '', 'done', ?, ?, ?
	where exists (select 1 from queue_failures where queue = ? and grp = '' and message_id = ?)`

// recordSuccess records the successful delivery attempt of queue message
// id when the history wants it: always after failed attempts (attempt > 1)
// or when the queue records every success, else only when the message has
// a history (it was redriven).
func (q *Queue) recordSuccess(w writer, id ID, attempt int, dur time.Duration, now time.Time) error {
	if attempt > 1 || q.recordSuccesses {
		return recordAttempt(w, q.name, "", string(id), attempt, OutcomeDone, "", dur, now)
	}
	if _, err := w.exec(insertDoneIfKnownQuery, q.name, string(id), attempt, store.TS(now), durationArg(dur), instanceName(), q.name, string(id)); err != nil {
		return fmt.Errorf("queue %s: record attempt %d of %s: %w", q.name, attempt, id, err)
	}
	return nil
}

// MaxAttemptsListed caps the attempts Attempts returns: the latest ones.
const MaxAttemptsListed = 200

const listAttemptsQuery = `
	select attempt, outcome, error, failed_at, duration_us, instance from queue_failures
	where queue = ? and grp = ? and message_id = ?
	order by id desc
	limit ?`

// Attempts returns the attempt history of a queue message (group "") or of
// a consumer group's record (queue is the topic, id "<partition>:<offset>",
// see RecordAttemptsID), oldest first: at most the latest
// MaxAttemptsListed of them, within retention.
func (a *Admin) Attempts(ctx context.Context, queue, group, id string) ([]Attempt, error) {
	rows, err := a.db.Read.QueryContext(ctx, listAttemptsQuery, queue, group, id, MaxAttemptsListed)
	if err != nil {
		return nil, fmt.Errorf("queue: attempts of %s in %s: %w", id, queue, err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var (
			at      Attempt
			outcome string
			ts      store.Timestamp
			dur     sql.NullInt64
		)
		if err := rows.Scan(&at.Attempt, &outcome, &at.Error, &ts, &dur, &at.Instance); err != nil {
			return nil, fmt.Errorf("queue: attempts of %s in %s: %w", id, queue, err)
		}
		at.Outcome, at.At = Outcome(outcome), ts.Time
		if dur.Valid {
			at.Duration, at.DurationKnown = time.Duration(dur.Int64)*time.Microsecond, true
		}
		out = append(out, at)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: attempts of %s in %s: %w", id, queue, err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// RecordAttemptsID is the id under which a topic record's attempts are kept
// for its consumer group: "<partition>:<offset>".
func RecordAttemptsID(partition int, offset int64) string { return recordID(partition, offset) }

// AttemptsID is the id under which d's attempts are kept: the message's id,
// or for a topic record its partition and offset.
func (d DeadLetter) AttemptsID() string {
	if d.Partition != nil && d.Offset != nil {
		return recordID(*d.Partition, *d.Offset)
	}
	return d.ID
}

// DeadLetterDetail returns one dead letter (f.Queue, f.Group, f.ID) with its
// attempt history; ErrNotFound when there is none by that id.
func (a *Admin) DeadLetterDetail(ctx context.Context, f DeadFilter) (DeadLetter, []Attempt, error) {
	if f.ID == "" {
		return DeadLetter{}, nil, fmt.Errorf("queue: dead letter of %s: no id: %w", f.Queue, ErrNotFound)
	}
	dead, err := a.ListDead(ctx, DeadFilter{Queue: f.Queue, Group: f.Group, ID: f.ID, Limit: 1})
	if err != nil {
		return DeadLetter{}, nil, err
	}
	if len(dead) == 0 {
		return DeadLetter{}, nil, fmt.Errorf("queue: dead letter %s of %s: %w", f.ID, f.Queue, ErrNotFound)
	}
	attempts, err := a.Attempts(ctx, f.Queue, f.Group, dead[0].AttemptsID())
	if err != nil {
		return DeadLetter{}, nil, err
	}
	return dead[0], attempts, nil
}

// validAttemptsID reports whether id can name a queue message or a topic
// record in the attempt history (the admin API refuses anything else).
func validAttemptsID(id string) bool {
	return id != "" && len(id) <= 200 && !strings.ContainsAny(id, "\x00\n\r")
}

// attemptRoutes adds the attempt history to the admin API (AdminRoutes):
// a dead letter with its attempts, and the attempts of a live (or handled)
// queue message or topic record.
func (a *Admin) attemptRoutes(r *mux.Router) {
	r.Handle("/queues/{name}/dlq/{id}", httpjson.HandlerFunc(a.handleDeadDetail)).Methods(http.MethodGet)
	r.Handle("/queues/{name}/messages/{id}/attempts", httpjson.HandlerFunc(a.handleAttempts)).Methods(http.MethodGet)
	r.Handle("/topics/{topic}/groups/{group}/dlq/{id}", httpjson.HandlerFunc(a.handleDeadDetail)).Methods(http.MethodGet)
	r.Handle("/topics/{topic}/groups/{group}/records/{partition:[0-9]+}/{offset:[0-9]+}/attempts",
		httpjson.HandlerFunc(a.handleAttempts)).Methods(http.MethodGet)
}

type attemptJSON struct {
	Attempt int       `json:"attempt"`
	Outcome Outcome   `json:"outcome"`
	Error   string    `json:"error,omitempty"`
	At      time.Time `json:"at"`
	// DurationMs is how long the handler ran; null when unknown.
	DurationMs *float64 `json:"durationMs"`
	Instance   string   `json:"instance,omitempty"`
}

func attemptsView(attempts []Attempt) []attemptJSON {
	out := make([]attemptJSON, 0, len(attempts))
	for _, at := range attempts {
		j := attemptJSON{Attempt: at.Attempt, Outcome: at.Outcome, Error: at.Error, At: at.At, Instance: at.Instance}
		if at.DurationKnown {
			ms := float64(at.Duration.Microseconds()) / 1000
			j.DurationMs = &ms
		}
		out = append(out, j)
	}
	return out
}

// handleDeadDetail answers one dead letter with its attempt history.
func (a *Admin) handleDeadDetail(w http.ResponseWriter, r *http.Request) error {
	f, err := a.deadFilterOf(r)
	if err != nil {
		return err
	}
	d, attempts, err := a.DeadLetterDetail(r.Context(), f)
	if err != nil {
		return notFound(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"deadLetter": deadView([]DeadLetter{d})[0], "attempts": attemptsView(attempts)})
	return nil
}

// handleAttempts answers the attempt history of a queue message or of a
// group's record, whether it still waits, was handled or died: an empty
// list when nothing is recorded (a message handled at its first try).
func (a *Admin) handleAttempts(w http.ResponseWriter, r *http.Request) error {
	v := mux.Vars(r)
	queue, group, id := v["name"], "", v["id"]
	if topic, ok := v["topic"]; ok {
		queue, group = topic, v["group"]
		if err := a.groupExists(r.Context(), topic, group); err != nil {
			return err
		}
		p, perr := strconv.Atoi(v["partition"])
		off, oerr := strconv.ParseInt(v["offset"], 10, 64)
		if perr != nil || oerr != nil {
			return httpjson.BadRequest("partition and offset must be numbers")
		}
		id = recordID(p, off)
	} else if err := a.queueExists(r.Context(), queue); err != nil {
		return err
	}
	if !validAttemptsID(id) {
		return httpjson.BadRequest("not a message id: %q", id)
	}
	attempts, err := a.Attempts(r.Context(), queue, group, id)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"attempts": attemptsView(attempts)})
	return nil
}
