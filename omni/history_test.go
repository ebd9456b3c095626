package omni

import (
	"context"
	"database/sql"
	"slices"
	"strconv"
	"strings"
	"testing"

	"switchyard/history"
	"switchyard/store"
	"switchyard/store/storetest"
)

func TestHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	admin := NewAdmin(AdminOpts{DB: db})
	domain := newChatDomain(db, AutoAckRule{})
	apply := func(body []byte) ThreadID {
		t.Helper()
		env := envelopeOf(t, body, db.Now())
		var thread ThreadID
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			res, err := domain.applyTx(ctx, tx, env)
			thread = res.Thread
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return thread
	}
	// Ann (42) writes her phone number and gets two replies: one sent, one
	// failed for good; Bob (43) writes once.
	ann := apply(update(1, "message", privateMessage(42, 1, "call me at +79991234567", t0)))
	sent, err := admin.Reply(ctx, ann, "yes, Ann")
	if err != nil {
		t.Fatal(err)
	}
	failed, err := admin.Reply(ctx, ann, "and again")
	if err != nil {
		t.Fatal(err)
	}
	now := store.TS(db.Now())
	if err := db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.Exec(`update omni_messages set status = 'sent', sent_at = ?, attempts = 1 where id = ?`, now, int64(sent.ID)); err != nil {
			return err
		}
		_, err := tx.Exec(`update omni_messages set status = 'failed', attempts = 5, failure_reason = 'Forbidden: call +79991234567' where id = ?`, int64(failed.ID))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	apply(update(2, "message", privateMessage(43, 1, "hi", t0+60)))

	kinds := func(term string) []string {
		t.Helper()
		f, err := admin.History(ctx, term, 50)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range f.Items {
			if strings.Contains(it.Summary, "Ann") || strings.Contains(it.Summary, "1234567") ||
				it.Flow != history.FlowChat || it.At.IsZero() || it.Link != "/admin/chat/threads/"+strconv.FormatInt(int64(ann), 10) {
				t.Errorf("item %+v", it)
			}
			out = append(out, it.Kind+" "+it.IDs[0].Value)
		}
		slices.Sort(out)
		return out
	}
	msg := func(id MessageID) string { return strconv.FormatInt(int64(id), 10) }

	t.Run("a Telegram user id finds the user's updates, messages and deliveries", func(t *testing.T) {
		got := kinds("42")
		want := []string{"delivery attempt " + msg(failed.ID), "delivery attempt " + msg(sent.ID),
			"inbound update telegram:" + strconv.Itoa(inboxBotID) + ":1",
			"thread message " + got[3][len("thread message "):], "thread message " + msg(failed.ID), "thread message " + msg(sent.ID)}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("items\n%q\nwant\n%q", got, want)
		}
	})

	t.Run("a delivery says how it ended", func(t *testing.T) {
		f, err := admin.History(ctx, msg(failed.ID), 50)
		if err != nil || len(f.Items) != 2 {
			t.Fatalf("%+v, %v", f, err)
		}
		if d := f.Items[1]; d.Kind != "delivery attempt" || !strings.Contains(d.Summary, "failed for good after 5 attempts: Forbidden: call +7***4567") {
			t.Fatalf("delivery %+v", d)
		}
	})

	t.Run("an idempotency key finds its update", func(t *testing.T) {
		key := "telegram:" + strconv.Itoa(inboxBotID) + ":1"
		if got := kinds(key); !slices.Equal(got, []string{"inbound update " + key}) {
			t.Fatalf("items %q", got)
		}
	})

	t.Run("an unknown or an empty term finds nothing", func(t *testing.T) {
		for _, term := range []string{"", "999999", "telegram:1:999"} {
			if f, err := admin.History(ctx, term, 50); err != nil || len(f.Items) != 0 {
				t.Errorf("%q: %+v, %v", term, f, err)
			}
		}
	})

	t.Run("the reads search indexes", func(t *testing.T) {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{historyThreadsSQL, []any{"42", 10}},
			{historyMessagesSQL, []any{1, 10}},
			{historyInboundSQL, []any{1, 10}},
			{historyInboundKeySQL, []any{"k"}},
		} {
			if plan := storetest.SQLitePlan(t, db, q.sql, q.args...); strings.Contains(plan, "SCAN ") {
				t.Errorf("%s: plan %s", q.sql, plan)
			}
		}
	})
}
