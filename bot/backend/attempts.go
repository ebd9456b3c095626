package backend

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode"

	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/store"
)

// The attempt history of the outbox's events (issue 20): every ack that
// changed an event — a retry, the retry that closes or dead-letters it after
// the last attempt, the processed ack of an event that failed before or was
// redriven — and every redrive, is a row of bot_event_attempts, written in
// the transaction of the ack or the redrive. A first-try success adds no
// row: the event's own processed_at tells it, and a row per event would
// double the ack's writes. The rows go with their event when retention
// prunes it (PruneProcessed).

// Attempt outcomes, as the history spells them.
const (
	AttemptProcessed  = "processed"
	AttemptRetry      = "retry"
	AttemptDeadLetter = "dead_letter"
	AttemptClosed     = "closed"
	AttemptRedriven   = "redriven"
)

// EventAttempt is one line of an event's attempt history.
type EventAttempt struct {
	// Attempt is the delivery's number (1 for the first, 1 again after a
	// redrive); 0 for a redrive.
	Attempt int    `json:"attempt"`
	Outcome string `json:"outcome"`
	// Error is the reason the consumer gave for a retry.
	Error string    `json:"error,omitempty"`
	At    time.Time `json:"at"`
	// Instance is the consumer's (its X-Switchyard-Instance header), else
	// the instance that took the ack or ran the redrive.
	Instance string `json:"instance"`
}

const (
	insertAttemptSQL = `
		insert into bot_event_attempts (event_id, attempt, outcome, error, at, instance)
		values (?, ?, ?, ?, ?, ?)`
	// insertProcessedAttemptsSQL records the processed acks of the events
	// (the list's placeholders follow) that have a history: failed attempts
	// (attempts > 0, or rows from before a redrive). One statement for an
	// ack's processed ids, which writes nothing for first-try successes.
	insertProcessedAttemptsSQL = `
		insert into bot_event_attempts (event_id, attempt, outcome, error, at, instance)
		select o.id, o.attempts + 1, 'processed', '', ?, ? from bot_event_outbox o
		where (o.attempts > 0 or exists (select 1 from bot_event_attempts a where a.event_id = o.id))
		  and o.id in `
	listAttemptsSQL = `
		select attempt, outcome, error, at, instance from bot_event_attempts
		where event_id = ? order by id desc limit ?`
)

// MaxEventAttemptsListed caps EventAttempts: the latest ones.
const MaxEventAttemptsListed = 200

// EventAttempts returns event id's attempt history, oldest first (at most
// the latest MaxEventAttemptsListed).
func (o *Outbox) EventAttempts(ctx context.Context, id contract.EventID) ([]EventAttempt, error) {
	rows, err := o.db.Read.QueryContext(ctx, listAttemptsSQL, id, MaxEventAttemptsListed)
	if err != nil {
		return nil, fmt.Errorf("attempts of event %d: %w", id, err)
	}
	defer rows.Close()
	out := []EventAttempt{}
	for rows.Next() {
		var (
			a  EventAttempt
			at store.Timestamp
		)
		if err := rows.Scan(&a.Attempt, &a.Outcome, &a.Error, &at, &a.Instance); err != nil {
			return nil, fmt.Errorf("attempts of event %d: %w", id, err)
		}
		a.At = at.Time
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("attempts of event %d: %w", id, err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// consumerInstance is the instance an ack's attempts are recorded under:
// the header's value when it is a short printable name, else this process.
func consumerInstance(header string) string {
	header = strings.TrimSpace(header)
	if header == "" || len(header) > 128 || strings.IndexFunc(header, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return queue.Instance()
	}
	return header
}

// retryOutcome is how the history names a retry decision.
func retryOutcome(d retryDecision) string {
	switch {
	case d.DeadLetter:
		return AttemptDeadLetter
	case d.Close:
		return AttemptClosed
	}
	return AttemptRetry
}

// recordProcessed records the processed acks of ids (those the ack
// processed just now) that end a history, in the ack's transaction.
func recordProcessed(ctx context.Context, tx *sql.Tx, ids []contract.EventID, instance string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, len(ids)+2)
	args = append(args, store.TS(now), instance)
	for _, id := range ids {
		args = append(args, id)
	}
	q := insertProcessedAttemptsSQL + "(" + strings.Repeat("?, ", len(ids)-1) + "?)"
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("record the attempts of %d processed events: %w", len(ids), err)
	}
	return nil
}

func recordAttempt(ctx context.Context, tx *sql.Tx, id contract.EventID, attempt int, outcome, text, instance string, now time.Time) error {
	if _, err := tx.ExecContext(ctx, insertAttemptSQL, id, attempt, outcome, text, store.TS(now), instance); err != nil {
		return fmt.Errorf("record attempt %d of event %d: %w", attempt, id, err)
	}
	return nil
}
