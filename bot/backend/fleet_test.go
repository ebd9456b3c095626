package backend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"switchyard/bot/contract"
	"switchyard/store"
	"switchyard/store/storetest"
)

// These tests emit from two instances: two handles of one database, each
// with an Outbox of its own, as two processes behind a load balancer have.
// An identity id is assigned when a row is inserted, not when it commits,
// so across concurrent transactions ids do not come in commit order; the
// outbox's delivery must not assume they do.

// otherInstance is an Outbox on a second handle of e's database, on e's clock.
func (e *backendEnv) otherInstance(t *testing.T) *Outbox {
	t.Helper()
	return NewOutbox(OutboxOpts{DB: storetest.NewWith(t, store.Options{Path: e.db.Path(), Clock: e.clock})})
}

func TestOutboxAcrossInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a user's event emitted by another instance waits for the user's earlier event that has not committed", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "transactions of two instances that emit for one user side by side")
		e := newBackendEnv(t)
		other := e.otherInstance(t)
		target := Target{MagnetUID: 7}
		var first contract.EventID
		earlier := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			var err error
			first, err = e.b.Outbox().EmitTx(ctx, tx, NewEvent{Type: contract.EventWalletConnected, Target: target})
			return err
		})
		var second contract.EventID
		earlier.Start(func() error {
			var err error
			second, err = other.Emit(ctx, NewEvent{Type: contract.EventRegistered, Target: target})
			return err
		})
		if got := e.pending(t, ""); len(got) != 0 {
			t.Fatalf("pending %v while the user's event %d is not committed: the user's order breaks", eventIDs(got), first)
		}
		if err := earlier.Release()[0]; err != nil {
			t.Fatal(err)
		}
		if got := eventIDs(e.pending(t, "")); fmt.Sprint(got) != fmt.Sprint([]contract.EventID{first, second}) {
			t.Fatalf("pending %v, want [%d %d]", got, first, second)
		}
	})

	t.Run("an event that commits after a higher id was delivered and acked is still delivered: no id cursor", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "ids committed out of order need transactions side by side")
		e := newBackendEnv(t)
		other := e.otherInstance(t)
		late := Target{MagnetUID: 7}
		// Another user whose events do not share the late one's emit lock
		// (users share 256 of them), so that its emit commits at once.
		bucket := func(tg Target) int {
			var b int
			uid, tgID := tg.ptrs()
			if err := e.db.Read.QueryRow(`select hashtext(cast(? as text)) & 255`, userKey(uid, tgID)).Scan(&b); err != nil {
				t.Fatal(err)
			}
			return b
		}
		early := Target{MagnetUID: 8}
		for bucket(early) == bucket(late) {
			early.MagnetUID++
		}
		var lower contract.EventID
		held := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			var err error
			lower, err = e.b.Outbox().EmitTx(ctx, tx, NewEvent{Type: contract.EventWalletConnected, Target: late})
			return err
		})
		higher, err := other.Emit(ctx, NewEvent{Type: contract.EventWalletConnected, Target: early})
		if err != nil {
			t.Fatal(err)
		}
		if higher <= lower {
			t.Fatalf("ids %d then %d: the test needs the uncommitted event to hold the lower id", lower, higher)
		}
		if got := eventIDs(e.pending(t, "")); fmt.Sprint(got) != fmt.Sprint([]contract.EventID{higher}) {
			t.Fatalf("pending %v, want [%d]", got, higher)
		}
		e.ack(t, contract.AckRequest{ProcessedIDs: []contract.EventID{higher}})
		if err := errors.Join(held.Release()...); err != nil {
			t.Fatal(err)
		}
		if got := eventIDs(e.pending(t, "")); fmt.Sprint(got) != fmt.Sprint([]contract.EventID{lower}) {
			t.Fatalf("pending %v after the lower id committed, want [%d]: an event committed late was skipped", got, lower)
		}
	})
}
