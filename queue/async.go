package queue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"switchyard/telemetry"
)

// RecordProcessFunc processes one record of a topic outside any database
// transaction: the consumer mode for effects that leave the database (a call
// to another service, a hand-off to a client that acknowledges later). The
// subscription records the outcome once it returns, in a short transaction
// of its own: nil finishes the record (the group's offset passes it), an
// error retries it with backoff (holding back the later records of its key
// only), RetryAfter(d, err) retries it after d, and Permanent(err)
// dead-letters it — so however long Process takes, it holds no transaction
// and no other writer of the database waits for it.
//
// Delivery is at least once, as for queue workers. A record whose Process
// returned but whose outcome was not committed — the process died or was
// stopped hard in between, the commit failed, or a stalled subscriber's
// partition lease passed to another one meanwhile — is processed again, by
// this subscriber or by the partition's next owner, with the same Attempt;
// in the last case the two may even overlap. Process must therefore be
// idempotent: key its effects by the record (topic, partition and offset, or
// an id in its value). Each owner processes a key's records one at a time in
// offset order, so after a redelivery a key's records are seen again from
// its first unfinished one (5, 6, then 5, 6 again), never out of order.
//
// ctx is cancelled when the subscription is stopped hard (Stop's context
// ended, or Subscribe's); an error returned after that counts no attempt.
type RecordProcessFunc func(ctx context.Context, r Record) error

// processChunk is runChunk for a subscription with Process. It runs Process
// for the chunk's records one after another in offset order, outside any
// transaction, passing over the later records of a key whose record is to be
// retried (as applyChunk does), and it starts no record once the
// subscription is stopping. Then it commits what became of the records it
// processed in one transaction, through applyChunk, whose call of the
// handler returns what Process returned: the fence against another owner,
// the offset commit, the retry rows and the dead letters are the
// transactional handler's own code. Records it did not process stay
// unfinished and are picked again.
func (s *Subscription) processChunk(p *partState, items []*entry) chunkResult {
	r := chunkResult{part: p, items: items, outs: make([]recOutcome, len(items)), committed: -1}
	for i, e := range items {
		r.outs[i] = recOutcome{kind: outcomeSkipped, attempts: e.attempts + 1}
	}
	if paused, err := s.groupPaused(context.WithoutCancel(s.hctx), nil); err != nil || paused {
		// Paused, or the state could not be read: process nothing now.
		r.err = err
		if paused {
			r.err = errPaused
		}
		return r
	}
	var (
		ran    []*entry // processed, in offset order
		at     []int    // their places in items
		took   []time.Duration
		failed map[string]bool
	)
	for i, e := range items {
		if s.isStopping() {
			break
		}
		if failed[e.rec.Key] {
			continue
		}
		rec := e.rec
		rec.Attempt = e.attempts + 1
		start := time.Now()
		err := s.process(rec)
		d := time.Since(start)
		if err != nil && s.hctx.Err() != nil {
			// Stopped hard: nothing is recorded and no attempt is counted.
			r.outs[i].kind = outcomeAbandoned
			break
		}
		e.processed, e.took = err, d
		ran, at, took = append(ran, e), append(at, i), append(took, d)
		if err != nil && !s.retry.decide(rec.Attempt, err).dead {
			if failed == nil {
				failed = map[string]bool{}
			}
			failed[rec.Key] = true
		}
	}
	if len(ran) == 0 {
		return r
	}
	outs := make([]recOutcome, len(ran))
	ctx := context.WithoutCancel(s.hctx)
	r.err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		r.committed, err = s.applyChunk(ctx, tx, p.id, ran, outs)
		return err
	})
	for j, i := range at {
		outs[j].dur = took[j]
		r.outs[i] = outs[j]
	}
	return r
}

// process runs Process for r, in a consumer span of its own (processSpan);
// a panic is a retryable failure.
func (s *Subscription) process(r Record) (err error) {
	ctx, span := s.processSpan(r)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
		telemetry.End(span, err)
	}()
	return s.opts.Process(ctx, r)
}

// isStopping reports whether Stop (or a hard stop) has begun.
func (s *Subscription) isStopping() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}
