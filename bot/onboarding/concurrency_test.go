package onboarding

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/store"
	"switchyard/store/storetest"
)

// These tests are about write transactions that run side by side, or run
// again, which only PostgreSQL does. The interleaving ones hold a row lock
// in a transaction of the test, start the calls under test, wait until each
// of them waits for a lock, and only then commit: every call has then read
// the row before the holder's commit and writes after it.

func TestConcurrentFunnelChanges(t *testing.T) {
	t.Parallel()
	t.Run("two changes of one funnel at once both apply and the stage never moves back", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "the outbox consumer and the updates worker changing one funnel side by side")
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		ctx := context.Background()
		apply := func(cause string, ch funnelChange) error {
			return e.db.Tx(ctx, func(tx *sql.Tx) error {
				_, _, _, err := b.applyFunnel(ctx, tx, e.db.Now(), "6001", cause, ch)
				return err
			})
		}
		if err := apply("update:777:1", funnelChange{Stage: StageAccountLinked}); err != nil {
			t.Fatal(err)
		}
		// The consumer raises the stage for wallet_connected; the updates
		// worker, deciding from the same row, asks for the step before it and
		// records the prompt it showed.
		held := holdStatement(t, e.db, `select telegram_id from bot_funnel where telegram_id = '6001' for update`)
		held.Start(func() error { return apply("event:1", funnelChange{Stage: StageWalletConnected}) })
		held.Start(func() error {
			return apply("update:777:2", funnelChange{Stage: StageWalletRequested, Bind: BindPrompted})
		})
		if err := errors.Join(held.Release()...); err != nil {
			t.Fatal(err)
		}
		f := e.funnel("6001")
		if f.Stage != StageWalletConnected || f.BindState != BindPrompted {
			t.Fatalf("funnel at %s, bind %s: want wallet_connected (the stage only grows) and prompted", f.Stage, f.BindState)
		}
		_, hist, err := b.GetFunnel(ctx, "6001")
		if err != nil {
			t.Fatal(err)
		}
		var changes []string
		for _, h := range hist {
			changes = append(changes, h.Cause+" "+h.Change+" "+*h.NewValue)
		}
		want := "[update:777:1 stage account_linked event:1 stage wallet_connected update:777:2 bind prompted]"
		if fmt.Sprint(changes) != want {
			t.Fatalf("history %v, want %s", changes, want)
		}
	})
}

func TestBatchRunAgain(t *testing.T) {
	t.Parallel()
	t.Run("a batch whose transaction PostgreSQL rolls back for a serialization failure runs again: each event once, none retried", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "Tx runs a transaction again only on PostgreSQL")
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		ctx := context.Background()
		// The second mark of the ledger fails once, as a serialization
		// failure would: the first event is handled by then.
		for _, q := range []string{
			`create sequence test_marks`,
			`create function test_fail_second_mark() returns trigger language plpgsql as $$
			begin
				if nextval('test_marks') = 2 then
					raise exception 'injected serialization failure' using errcode = 'serialization_failure';
				end if;
				return new;
			end $$`,
			`create trigger test_fail_second_mark before insert on bot_processed_events
				for each row execute function test_fail_second_mark()`,
		} {
			if _, err := e.db.Write.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		ids := []contract.EventID{
			e.emitPartner(0, "5001", "Борис"),
			e.emitNft(backend.Target{TelegramID: "5002"}),
			e.emitPartner(0, "5003", "Вера"),
		}
		b.poll(ctx)
		if n := e.unprocessed(); n != 0 {
			t.Fatalf("%d events unprocessed after the poll: an event paid for the transaction's failure", n)
		}
		for _, id := range ids {
			if r, err := e.be.Outbox().GetEvent(ctx, id); err != nil || r.Attempts != 0 {
				t.Fatalf("event %d: %+v, %v; want handled at the first attempt", id, r, err)
			}
		}
		if n := b.handled.Load(); n != int64(len(ids)) {
			t.Fatalf("handled %d, want %d: a run that rolled back was counted", n, len(ids))
		}
		if n := e.count(`select count(*) from bot_processed_events`); n != len(ids) {
			t.Fatalf("%d ledger rows, want %d", n, len(ids))
		}
		if n := e.dms(); n != 2 {
			t.Fatalf("%d DMs recorded, want the two new_partner DMs once each", n)
		}
	})
}

// holdStatement holds the locks q takes, run with args in a transaction of
// the test, until Release.
func holdStatement(t testing.TB, db *store.DB, q string, args ...any) *storetest.LockRace {
	t.Helper()
	return storetest.HoldLocks(t, db, func(tx *sql.Tx) error {
		_, err := tx.Exec(q, args...)
		return err
	})
}
