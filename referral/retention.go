package referral

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"switchyard/store"
)

// MarksTable is the table PruneMarks prunes, for the retention console.
const MarksTable = "referral_processed_messages"

// forgettable are the outcomes whose message, applied again without its
// mark, does nothing whatever happened since: the version guard refuses its
// replica change (a replica's version only grows), and its referral is
// refused by the event's own content (G2: not an Investor, G4: blocked or
// archived, no or an invalid ReferrerUrl) or by the user's Initial entry,
// which exists for good once written (R1, race-lost, first-seen-skip).
// The others were decided by a state that may change: G1 (the link was
// missing — one may be created with that slug), G3 (the link was the
// user's — a slug freed by a deletion can be taken by another owner), G5
// (an active bond) and no-replica (a user-blocked before the user's first
// upsert: applied again, it would block a replica that exists now). Their
// marks are kept until the user has an Initial entry, after which no event
// of the user binds again.
var forgettable = []Outcome{
	OutcomeR1, OutcomeRaceLost, OutcomeFirstSeenSkip, OutcomeReplicaOnly, OutcomeInvalidSlug,
	OutcomeG2, OutcomeG4, OutcomeBlocked, OutcomeStale,
}

// pruneMarksQuery takes forgettable's values after the cutoff.
var pruneMarksQuery = `
	delete from referral_processed_messages
	where id in (
		select m.id from referral_processed_messages m
		where m.processed_at < ?
		  and (m.outcome in (` + strings.TrimSuffix(strings.Repeat("?, ", len(forgettable)), ", ") + `)
		    or exists (select 1 from referral_registrations r where r.referred_user_id = m.user_id))
		order by m.processed_at limit ?)`

// PruneMarks deletes at most limit idempotency marks written before cutoff,
// oldest first, in one transaction, and returns how many; the retention
// runner (retention/) calls it. A mark makes a message that comes again a
// no-op by itself; PruneMarks deletes only the marks whose message would be
// a no-op anyway (see forgettable): the replica takes an event only with a
// larger Version (the version guard), a user with an Initial entry is
// never bound again (INV-REF-R1: first-seen), and a referral refused by the
// event's own content is refused again. So a replay from offset 0 after
// pruning leaves the replicas, bonds, journal and outgoing events as they
// were (retention_test.go proves it with the model test); it only writes
// the pruned marks again.
func (s *Service) PruneMarks(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	args := []any{store.TS(cutoff)}
	for _, o := range forgettable {
		args = append(args, string(o))
	}
	args = append(args, limit)
	var n int64
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, pruneMarksQuery, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("referral: prune marks: %w", err)
	}
	return n, nil
}
