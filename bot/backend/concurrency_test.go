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

// These tests are about write transactions that run side by side, which only
// PostgreSQL does: each holds a row lock in a transaction of the test, starts
// the calls under test, waits until each of them waits for a lock (or has
// returned), and only then commits. Every call has then read the rows before
// the holder's commit and writes after it — the interleaving in which a
// decision taken from a stale read does harm.

func TestConcurrentAcks(t *testing.T) {
	t.Parallel()
	const why = "an ack that reads before another ack commits"
	ctx := context.Background()

	t.Run("a retry ack that read the event before a processed ack committed leaves it processed", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		id := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 1})[0]
		processed := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			_, err := tx.Exec(ackProcessedSQL, store.TS(e.clock.Now()), id)
			return err
		})
		var res contract.AckResult
		processed.Start(func() error {
			var err error
			res, err = e.b.Outbox().Ack(ctx, contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{itoa(id): "late"}})
			return err
		})
		if err := processed.Release()[0]; err != nil {
			t.Fatal(err)
		}
		rec := e.event(t, id)
		if rec.ProcessedAt == nil || rec.Attempts != 0 || rec.LastError != nil || res.Retried != 0 {
			t.Fatalf("event %+v after the race, retry ack %+v: want it processed, never retried", rec, res)
		}
		if got := e.pending(t, ""); len(got) != 0 {
			t.Fatalf("pending %v: a processed event is handed out again", eventIDs(got))
		}
	})

	t.Run("two retry acks of one due event count one attempt", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		id := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 1})[0]
		// The test's transaction holds the row as an ack would; both acks
		// read the event due and wait.
		held := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			_, err := tx.Exec(`update bot_event_outbox set last_error = last_error where id = ?`, id)
			return err
		})
		results := make([]contract.AckResult, 2)
		for i := range results {
			held.Start(func() error {
				var err error
				results[i], err = e.b.Outbox().Ack(ctx, contract.AckRequest{RetryIDs: []contract.EventID{id}})
				return err
			})
		}
		if err := errors.Join(held.Release()...); err != nil {
			t.Fatal(err)
		}
		if rec := e.event(t, id); rec.Attempts != 1 || results[0].Retried+results[1].Retried != 1 {
			t.Fatalf("attempts %d, acks %+v: want one attempt counted by one ack", rec.Attempts, results)
		}
	})

	t.Run("a redrive that read the event before a processed ack committed answers ErrEventProcessed and keeps it", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		id := emitMany(t, e.b.Outbox(), 1, Target{MagnetUID: 1})[0]
		e.ack(t, contract.AckRequest{RetryIDs: []contract.EventID{id}, Errors: map[string]string{itoa(id): "boom"}})
		processed := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			_, err := tx.Exec(ackProcessedSQL, store.TS(e.clock.Now()), id)
			return err
		})
		processed.Start(func() error {
			_, err := e.b.Outbox().Redrive(ctx, id)
			return err
		})
		if err := processed.Release()[0]; !errors.Is(err, contract.ErrEventProcessed) {
			t.Fatalf("redrive: %v, want ErrEventProcessed", err)
		}
		if rec := e.event(t, id); rec.ProcessedAt == nil || rec.Attempts != 1 || rec.NextRetryAt == nil {
			t.Fatalf("event %+v: the processed event's retry history was reset", rec)
		}
	})
}

func TestConcurrentEmitOrder(t *testing.T) {
	t.Parallel()
	t.Run("a user's later event is not handed out before an earlier one that has not committed", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "transactions that emit for one user side by side")
		e := newBackendEnv(t)
		ctx := context.Background()
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
			second, err = e.b.Outbox().Emit(ctx, NewEvent{Type: contract.EventRegistered, Target: target})
			return err
		})
		if got := e.pending(t, ""); len(got) != 0 {
			t.Fatalf("pending %v while event %d of the same user is not committed: the user's order breaks", eventIDs(got), first)
		}
		if err := earlier.Release()[0]; err != nil {
			t.Fatal(err)
		}
		if got := eventIDs(e.pending(t, "")); fmt.Sprint(got) != fmt.Sprint([]contract.EventID{first, second}) {
			t.Fatalf("pending %v, want [%d %d]", got, first, second)
		}
	})
}

func TestConcurrentActions(t *testing.T) {
	t.Parallel()
	const why = "two transactions deciding from one user row side by side"
	ctx := context.Background()

	// holdUser locks uid's row as a concurrent change to the account would;
	// the lock (for update) also holds back an insert that references the
	// row, such as a connect token's.
	holdUser := func(t *testing.T, e *backendEnv, uid contract.UID) *storetest.LockRace {
		return storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			_, err := tx.Exec(`select uid from users where uid = ? for update`, uid)
			return err
		})
	}

	for _, tc := range []struct {
		name   string
		action func(b *Service, uid, leader contract.UID) (ActionResult, error)
		types  []contract.EventType
	}{
		{"a registration twice at once registers once and tells the leader once",
			func(b *Service, uid, leader contract.UID) (ActionResult, error) { return b.Register(ctx, uid, &leader) },
			[]contract.EventType{contract.EventRegistered, contract.EventNewPartner}},
		{"the same wallet twice at once emits wallet_connected once",
			func(b *Service, uid, _ contract.UID) (ActionResult, error) {
				return b.ConnectWallet(ctx, uid, "EQsame")
			},
			[]contract.EventType{contract.EventWalletConnected}},
		{"the same NFT level twice at once emits status_nft_activated once",
			func(b *Service, uid, _ contract.UID) (ActionResult, error) {
				return b.ActivateNFT(ctx, uid, contract.NftLP1)
			},
			[]contract.EventType{contract.EventStatusNftActivated}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			storetest.PostgresOnly(t, why)
			e := newBackendEnv(t)
			leader := e.createUser(t, "leader", "5001")
			u := e.createUser(t, "partner", "5002")
			held := holdUser(t, e, u.UID)
			for range 2 {
				held.Start(func() error {
					_, err := tc.action(e.b, u.UID, leader.UID)
					return err
				})
			}
			if err := errors.Join(held.Release()...); err != nil {
				t.Fatal(err)
			}
			events, err := e.b.Outbox().ListEvents(ctx, EventFilter{})
			if err != nil {
				t.Fatal(err)
			}
			var got []contract.EventType
			for i := len(events) - 1; i >= 0; i-- {
				got = append(got, events[i].EventType)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.types) {
				t.Fatalf("events %v, want %v once each", got, tc.types)
			}
		})
	}

	t.Run("an account created meanwhile with the same link is ErrLinkTaken, not a failure", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		for _, tc := range []struct {
			link string
			tg   contract.TelegramID
			want error
		}{
			{"taken", "", contract.ErrLinkTaken},
			{"free", "6001", contract.ErrTelegramTaken},
		} {
			held := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
				_, err := tx.Exec(`insert into users (link, name, telegram_id, created_at) values (?, 'First', '6001', ?)`,
					"taken", store.TS(e.clock.Now()))
				return err
			})
			held.Start(func() error {
				_, err := e.b.CreateUser(ctx, NewUser{Link: tc.link, Name: "Second", TelegramID: tc.tg})
				return err
			})
			if err := held.Release()[0]; !errors.Is(err, tc.want) {
				t.Fatalf("create %s/%s: %v, want %v", tc.link, tc.tg, err, tc.want)
			}
			if _, err := e.db.Write.Exec(`delete from users`); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("a notification stored meanwhile under the same dedup key is returned, not a failure", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		u := e.createUser(t, "user", "5001")
		held := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			_, err := tx.Exec(`insert into web_notifications (uid, kind, text, dedup_key, created_at) values (?, 'dm', 'first', 'k', ?)`,
				u.UID, store.TS(e.clock.Now()))
			return err
		})
		var (
			note    contract.Notification
			created bool
		)
		held.Start(func() error {
			var err error
			note, created, err = e.b.AddNotification(ctx, contract.NewNotification{UID: u.UID, Kind: "dm", Text: "second", DedupKey: "k"})
			return err
		})
		if err := held.Release()[0]; err != nil {
			t.Fatal(err)
		}
		if created || note.Text != "first" {
			t.Fatalf("notification %+v, created %v: want the first one, not created", note, created)
		}
	})

	t.Run("one connect token redeemed twice at once by two Telegram ids: one wins, the other is ErrTokenUsed", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		u := e.createUser(t, "user", "")
		link, err := e.b.MintConnectLink(ctx, u.UID)
		if err != nil {
			t.Fatal(err)
		}
		token, _ := contract.ParseConnectPayload(link.StartParam)
		held := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			_, err := tx.Exec(`update telegram_connect_tokens set created_at = created_at where token = ?`, token)
			return err
		})
		for _, tg := range []contract.TelegramID{"7001", "7002"} {
			held.Start(func() error {
				_, err := e.b.RedeemConnect(ctx, link.StartParam, tg)
				return err
			})
		}
		errs := held.Release()
		if errs[0] != nil || !errors.Is(errs[1], contract.ErrTokenUsed) {
			t.Fatalf("redemptions: %v; want the first to win and the second ErrTokenUsed", errs)
		}
		after, err := e.b.GetUser(ctx, u.UID)
		if err != nil {
			t.Fatal(err)
		}
		if after.PreviewTelegramID == nil || *after.PreviewTelegramID != "7001" {
			t.Fatalf("preview %v, want the winner's 7001", after.PreviewTelegramID)
		}
	})

	t.Run("two connect links minted at once are one token", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		u := e.createUser(t, "user", "")
		held := holdUser(t, e, u.UID)
		links := make([]contract.ConnectLink, 2)
		for i := range links {
			held.Start(func() error {
				var err error
				links[i], err = e.b.MintConnectLink(ctx, u.UID)
				return err
			})
		}
		if err := errors.Join(held.Release()...); err != nil {
			t.Fatal(err)
		}
		var tokens int
		if err := e.db.Read.QueryRow(`select count(*) from telegram_connect_tokens where uid = ?`, u.UID).Scan(&tokens); err != nil {
			t.Fatal(err)
		}
		if links[0].Token != links[1].Token || tokens != 1 {
			t.Fatalf("links %s and %s, %d tokens stored: want one token", links[0].Token, links[1].Token, tokens)
		}
	})

	t.Run("an action's lock on the account does not hold back a notification that only references it", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		u := e.createUser(t, "user", "5001")
		held := storetest.HoldLocks(t, e.db, func(tx *sql.Tx) error {
			_, err := tx.Exec(`select uid from users where uid = ?`+e.b.forUpdate(), u.UID)
			return err
		})
		held.Start(func() error {
			_, _, err := e.b.AddNotification(ctx, contract.NewNotification{UID: u.UID, Kind: "dm", Text: "hi", DedupKey: "k"})
			return err
		})
		if held.Returned() != 1 {
			t.Fatal("a notification waited for the lock an action holds on its account")
		}
		if err := held.Release()[0]; err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a binding and a redemption of another Telegram id at once do not both succeed", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, why)
		e := newBackendEnv(t)
		u := e.createUser(t, "user", "")
		e.preview(t, u.UID, "7001")
		link, err := e.b.MintConnectLink(ctx, u.UID)
		if err != nil {
			t.Fatal(err)
		}
		held := holdUser(t, e, u.UID)
		held.Start(func() error {
			_, err := e.b.BindTelegram(ctx, u.UID, "7001")
			return err
		})
		held.Start(func() error {
			_, err := e.b.RedeemConnect(ctx, link.StartParam, "7002")
			return err
		})
		errs := held.Release()
		if errs[0] != nil || !errors.Is(errs[1], contract.ErrAccountBound) {
			t.Fatalf("bind, redeem: %v; want the bind to win and the redemption ErrAccountBound", errs)
		}
	})
}
