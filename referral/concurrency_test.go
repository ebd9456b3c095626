package referral

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// TestConcurrentWriters runs the consumer's transaction beside other
// transactions that change the rows it reads: an operator deleting the
// link, the owner's own events, another consumer writing the same replica.
// Each case stops the consumer's transaction at its last statement (the
// mark's insert waits behind an uncommitted insert of the same mark, made
// by the test) while the other write is tried, so the interleaving is the
// same on every run. On SQLite the one writer runs transactions one after
// another, so these interleavings cannot happen there.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	if !storetest.Postgres() {
		t.Skip("PostgreSQL only: SQLite's one writer never runs two transactions at once")
	}
	ctx := context.Background()

	t.Run("a link deleted while a referral through it is bound is deleted after the bond", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		owner := newUser()
		h.publish(upsert(owner, 1).set("Type", "Agent").json())
		h.waitIdle()
		link := h.link("held-link", owner)
		user := newUser()
		ev := upsert(user, 1).referrer("held-link")
		release := holdMark(t, h.db, TypeUserUpserted, ev.MessageID, user)
		h.publish(ev.json())
		waitLocked(t, h.db, "insert into referral_processed_messages", 1)

		// DeleteLink either waits for the referral's transaction or returns
		// at once; the bond is looked for the moment it returns.
		type deletion struct {
			err       error
			bondsSeen int
		}
		done := make(chan deletion, 1)
		go func() {
			var d deletion
			if d.err = h.svc.DeleteLink(ctx, link.ID); d.err == nil {
				d.err = h.db.Read.QueryRowContext(ctx, `select count(*) from referral_bonds where referred_user_id = ?`, string(user)).Scan(&d.bondsSeen)
			}
			done <- d
		}()
		testwait.Until(t, 30*time.Second, "the deletion to wait for the referral or to return", func() bool {
			return len(done) == 1 || locked(t, h.db, "update referral_links") == 1
		})
		release()
		d := <-done
		if d.err != nil {
			t.Fatal(d.err)
		}
		h.waitIdle()
		if got := h.markOutcome(TypeUserUpserted, ev.MessageID); got != OutcomeR1 {
			t.Fatalf("outcome %q, want R1: the link was live when the referral read it", got)
		}
		if d.bondsSeen != 1 {
			t.Fatalf("DeleteLink returned with no bond through the link, and a bond through it committed afterwards")
		}
		if n := h.count(`select count(*) from referral_links where id = ? and deleted_at is not null`, string(link.ID)); n != 1 {
			t.Fatalf("the link is not deleted")
		}
	})

	t.Run("an owner blocked while a referral reads them active is blocked after the bond and its lead request", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		owner, user := newUser(), newUser()
		for queue.PartitionFor(string(user), IdentityPartitions) == queue.PartitionFor(string(owner), IdentityPartitions) {
			user = newUser() // the two must be handled side by side
		}
		h.publish(upsert(owner, 1).set("Type", "Agent").json())
		h.waitIdle()
		h.link("owner-link", owner)
		ev := upsert(user, 1).referrer("owner-link")
		release := holdMark(t, h.db, TypeUserUpserted, ev.MessageID, user)
		h.publish(ev.json())
		waitLocked(t, h.db, "insert into referral_processed_messages", 1)

		block := blocked(owner, 2)
		h.publish(block.json())
		testwait.Until(t, 30*time.Second, "the owner's block to wait for the referral or to take effect", func() bool {
			return h.markOutcome(TypeUserBlocked, block.MessageID) != "" || locked(t, h.db, "update referral_users") == 1
		})
		blockedFirst := h.markOutcome(TypeUserBlocked, block.MessageID) != ""
		release()
		h.waitIdle()
		if got := h.markOutcome(TypeUserUpserted, ev.MessageID); got != OutcomeR1 {
			t.Fatalf("outcome %q, want R1", got)
		}
		if n := h.count(`select count(*) from referral_registrations where referred_user_id = ? and lead_requested = 1`, string(user)); n != 1 {
			t.Fatalf("no lead requested: the owner was an active agent when the referral read them")
		}
		if blockedFirst {
			t.Fatalf("the owner's block committed while the referral's transaction, which read the owner active, was open: the lead request was committed after the block")
		}
		if r := h.replica(owner); r.Status != StatusBlocked {
			t.Fatalf("owner %s, want blocked", r.Status)
		}
	})

	t.Run("a replica another transaction inserted while the consumer waited keeps its registration time", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		user := newUser()
		registered := baseTime.Add(time.Minute)
		// Another consumer's transaction writes version 1, and stays open.
		other, err := h.db.Write.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Rollback() })
		v1 := Replica{ID: user, Type: UserInvestor, Status: StatusActive, Name: FullName{FirstName: "Ann"}, PhoneNumber: "+79990000000",
			IsNameFilled: true, RegisteredAt: registered, ReplicaVersion: 1, UpdatedAt: h.db.Now()}
		if err := putReplica(ctx, other, v1); err != nil {
			t.Fatal(err)
		}
		// Version 2 reads no replica, and its insert waits on the key.
		h.publish(upsert(user, 2).json())
		waitLocked(t, h.db, "insert into referral_users", 1)
		if err := other.Commit(); err != nil {
			t.Fatal(err)
		}
		h.waitIdle()
		r := h.replica(user)
		if r.ReplicaVersion != 2 || !r.RegisteredAt.Equal(registered) {
			t.Fatalf("replica version %d registered %v, want version 2 registered %v (version 1's time)", r.ReplicaVersion, r.RegisteredAt, registered)
		}
	})
}

// holdMark inserts the idempotency mark of a message in a transaction left
// open until release rolls it back: the consumer's transaction for that
// message runs up to its own insert of the mark, its last statement, and
// waits there.
func holdMark(t *testing.T, db *store.DB, typ MessageType, msgID string, user UserID) (release func()) {
	t.Helper()
	tx, err := db.Write.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := putMark(context.Background(), tx, string(typ)+":"+msgID, user, "held by the test", db.Now()); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	release = func() {
		if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
			t.Error(err)
		}
	}
	t.Cleanup(release)
	return release
}

// locked counts the sessions of db's database that wait for a lock in a
// statement containing fragment.
func locked(t *testing.T, db *store.DB, fragment string) int {
	t.Helper()
	var n int
	err := db.Read.QueryRow(`select count(*) from pg_stat_activity
		where datname = current_database() and wait_event_type = 'Lock' and strpos(query, ?) > 0`, fragment).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func waitLocked(t *testing.T, db *store.DB, fragment string, n int) {
	t.Helper()
	testwait.Until(t, 30*time.Second, fmt.Sprintf("%d sessions to wait for a lock in %q", n, fragment), func() bool {
		return locked(t, db, fragment) >= n
	}, func() string {
		var b strings.Builder
		rows, err := db.Read.Query(`select coalesce(wait_event_type, ''), coalesce(wait_event, ''), left(query, 80)
			from pg_stat_activity where datname = current_database() and state = 'active'`)
		if err != nil {
			return err.Error()
		}
		defer rows.Close()
		for rows.Next() {
			var typ, ev, q string
			_ = rows.Scan(&typ, &ev, &q)
			fmt.Fprintf(&b, "%s/%s %s\n", typ, ev, strings.Join(strings.Fields(q), " "))
		}
		return b.String()
	})
}
