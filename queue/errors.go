package queue

import (
	"errors"
	"fmt"
	"time"
)

// Error is a queue error that callers compare with errors.Is.
type Error string

func (e Error) Error() string { return string(e) }

// Errors the package returns.
const (
	// ErrNotFound means the queue, topic, group or dead letter does not exist.
	ErrNotFound = Error("queue: not found")
	// ErrGroupActive means a subscriber holds the group's partitions, so its
	// offsets cannot be moved now.
	ErrGroupActive = Error("queue: consumer group is active")
	// ErrTopicMismatch means a topic was declared again with another
	// partition count; partitions are fixed at creation so keys keep their order.
	ErrTopicMismatch = Error("queue: topic already exists with another partition count")
	// errStale means another owner finished the record first; the record's
	// transaction is rolled back so its effects happen once.
	errStale = Error("queue: record already finished by another owner")
)

// Permanent marks err as not worth retrying: the message goes straight to the
// dead-letter queue with err as its last error, which reads
// "permanent: <err>". An err marked permanent already is returned as it is,
// so the class is never said twice.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	var perm *permanentError
	if errors.As(err, &perm) {
		return err
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryAfter marks err as retryable after exactly d (a provider's
// retry_after), instead of the queue's backoff. It still counts as an attempt.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{delay: max(d, 0), err: err}
}

type retryAfterError struct {
	delay time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %s", e.delay, e.err.Error())
}
func (e *retryAfterError) Unwrap() error { return e.err }

// decision is what happens to a message after its handler failed.
type decision struct {
	dead  bool
	delay time.Duration
}

// decide applies policy p to the failure err of the given attempt (1-based).
func (p RetryPolicy) decide(attempt int, err error) decision {
	var perm *permanentError
	if errors.As(err, &perm) {
		return decision{dead: true}
	}
	if attempt >= p.MaxAttempts {
		return decision{dead: true}
	}
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return decision{delay: ra.delay}
	}
	return decision{delay: p.Backoff(attempt)}
}

// errorText is err's message, cut to a size an operator can read.
func errorText(err error) string {
	const maxLen = 2000
	s := err.Error()
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return s
}
