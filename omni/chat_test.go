package omni

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

// chatFixture applies envelopes straight through the chat transaction, with
// the outgoing commands captured.
type chatFixture struct {
	t      *testing.T
	db     *store.DB
	clock  *store.ManualClock
	domain *chatDomain
	sends  *capturedSends
	admin  *Admin
}

func newChatFixture(t *testing.T, autoAck AutoAckRule) *chatFixture {
	t.Helper()
	db, clock := storetest.NewWithClock(t)
	sends := &capturedSends{}
	return &chatFixture{
		t: t, db: db, clock: clock, sends: sends,
		domain: &chatDomain{now: db.Now, autoAck: autoAck, send: sends.send, lockThread: threadLockQuery(db)},
		admin:  NewAdmin(AdminOpts{DB: db}),
	}
}

func (f *chatFixture) apply(body []byte) applied {
	f.t.Helper()
	env := envelopeOf(f.t, body, f.db.Now())
	var res applied
	err := f.db.Tx(context.Background(), func(tx *sql.Tx) error {
		var err error
		res, err = f.domain.applyTx(context.Background(), tx, env)
		return err
	})
	if err != nil {
		f.t.Fatalf("apply %s: %v", body, err)
	}
	return res
}

func (f *chatFixture) thread(id ThreadID) Thread {
	f.t.Helper()
	threads, err := f.admin.ListThreads(context.Background(), ThreadFilter{})
	if err != nil {
		f.t.Fatal(err)
	}
	for _, th := range threads {
		if th.ID == id {
			return th
		}
	}
	f.t.Fatalf("thread %d not listed among %d threads", id, len(threads))
	return Thread{}
}

func (f *chatFixture) messages(id ThreadID) []OmniMessage {
	f.t.Helper()
	msgs, err := f.admin.ListMessages(context.Background(), id, MessageFilter{})
	if err != nil {
		f.t.Fatal(err)
	}
	return msgs
}

const t0 = 1771668000 // 2026-02-21 10:00:00 UTC, as Telegram's unix dates

func TestChatApply(t *testing.T) {
	t.Parallel()
	ack := AutoAckRule{Enabled: true, Text: "thanks, we will answer soon"}

	t.Run("a business message makes a contact, a thread, an unread message and an acknowledgement", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, ack)
		f.apply(update(1, "business_connection", businessConnection("bc-1", 900, true, true, t0)))
		res := f.apply(update(2, "business_message", businessMessage("bc-1", 55, 55, 10, "do you deliver?", t0+5)))
		if res.Outcome != outcomeApplied || res.Thread == 0 || len(res.Queued) != 1 {
			t.Fatalf("applied = %+v, want a thread and one queued acknowledgement", res)
		}
		th := f.thread(res.Thread)
		if th.Channel != ChannelTelegramBusiness || th.BusinessConnectionID != "bc-1" || th.State != ThreadOpen || th.Unread != 1 {
			t.Errorf("thread = %+v", th)
		}
		if th.Contact.ProviderUserID != "55" || th.Contact.Name != "Customer 55" || !th.Contact.Reachable || th.Contact.Provider != ProviderTelegram {
			t.Errorf("contact = %+v", th.Contact)
		}
		if want := time.Unix(t0+5, 0).UTC(); th.LastMessageAt == nil || !th.LastMessageAt.Equal(want) {
			t.Errorf("lastMessageAt = %v, want %v", th.LastMessageAt, want)
		}
		msgs := f.messages(res.Thread)
		if len(msgs) != 2 {
			t.Fatalf("messages = %+v, want the customer's and the acknowledgement", msgs)
		}
		in, out := msgs[0], msgs[1]
		if in.Direction != DirectionInbound || in.Text != "do you deliver?" || in.Status != StatusReceived || in.ProviderMessageID == nil || *in.ProviderMessageID != "10" {
			t.Errorf("inbound message = %+v", in)
		}
		if out.Direction != DirectionOutbound || out.Origin != OriginRule || out.Text != ack.Text || out.Status != StatusQueued || out.Seq != in.Seq+1 {
			t.Errorf("acknowledgement = %+v", out)
		}
		cmds := f.sends.all()
		if len(cmds) != 1 {
			t.Fatalf("send commands = %+v", cmds)
		}
		c := cmds[0]
		if c.MessageID != out.ID || c.BusinessConnectionID != "bc-1" || c.ChatID != "55" || c.Text != ack.Text ||
			c.Channel != ChannelTelegramBusiness || c.AccountID != "5550001" {
			t.Errorf("command = %+v", c)
		}
	})

	t.Run("a second message in the thread is not acknowledged again", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, ack)
		f.apply(update(1, "message", privateMessage(42, 1, "hi", t0)))
		res := f.apply(update(2, "message", privateMessage(42, 2, "anyone?", t0+1)))
		if len(res.Queued) != 0 || len(f.sends.all()) != 1 {
			t.Errorf("queued %v, commands %d; want one acknowledgement in all", res.Queued, len(f.sends.all()))
		}
		if th := f.thread(res.Thread); th.Unread != 2 || th.Channel != ChannelTelegramBot {
			t.Errorf("thread = %+v, want 2 unread on the bot channel", th)
		}
	})

	t.Run("no acknowledgement on a connection that cannot reply, or when the rule is off", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, ack)
		f.apply(update(1, "business_connection", businessConnection("bc-ro", 900, true, false, t0)))
		if res := f.apply(update(2, "business_message", businessMessage("bc-ro", 55, 55, 10, "hello", t0))); len(res.Queued) != 0 {
			t.Errorf("acknowledged on a read-only connection: %+v", res)
		}
		off := newChatFixture(t, AutoAckRule{Enabled: false, Text: "x"})
		if res := off.apply(update(1, "message", privateMessage(42, 1, "hi", t0))); len(res.Queued) != 0 {
			t.Errorf("acknowledged with the rule off: %+v", res)
		}
	})

	t.Run("a rule stored by an operator wins over the default", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, ack)
		if err := f.admin.SetAutoAck(context.Background(), AutoAckRule{Enabled: true, Text: "operator text"}); err != nil {
			t.Fatal(err)
		}
		f.apply(update(1, "message", privateMessage(42, 1, "hi", t0)))
		if cmds := f.sends.all(); len(cmds) != 1 || cmds[0].Text != "operator text" {
			t.Errorf("commands = %+v, want the operator's text", cmds)
		}
	})

	t.Run("a duplicate envelope changes nothing", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, ack)
		body := update(7, "message", privateMessage(42, 1, "hi", t0))
		first := f.apply(body)
		second := f.apply(body)
		if second.Outcome != outcomeDuplicate {
			t.Errorf("second apply = %+v, want duplicate", second)
		}
		if msgs := f.messages(first.Thread); len(msgs) != 2 || len(f.sends.all()) != 1 {
			t.Errorf("messages %d commands %d after a duplicate, want 2 and 1", len(msgs), len(f.sends.all()))
		}
		if th := f.thread(first.Thread); th.Unread != 1 {
			t.Errorf("unread = %d, want 1", th.Unread)
		}
	})

	t.Run("the same provider message in another update is stored once", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		first := f.apply(update(7, "message", privateMessage(42, 1, "hi", t0)))
		f.apply(update(8, "message", privateMessage(42, 1, "hi", t0)))
		if msgs := f.messages(first.Thread); len(msgs) != 1 {
			t.Errorf("messages = %+v, want one", msgs)
		}
	})

	t.Run("edits replace the text in provider order, and deletions mark the message", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		f.apply(update(1, "business_connection", businessConnection("bc-1", 900, true, true, t0)))
		res := f.apply(update(2, "business_message", businessMessage("bc-1", 55, 55, 10, "v1", t0)))
		edit := func(id int, text string, at int64) []byte {
			m := businessMessage("bc-1", 55, 55, 10, text, t0)
			m["edit_date"] = at
			return update(id, "edited_business_message", m)
		}
		f.apply(edit(3, "v3", t0+30))
		if r := f.apply(edit(4, "v2", t0+20)); r.Outcome != outcomeIgnored {
			t.Errorf("an older edit delivered late: %+v, want ignored", r)
		}
		msgs := f.messages(res.Thread)
		if len(msgs) != 1 || msgs[0].Text != "v3" || msgs[0].EditedAt == nil || !msgs[0].EditedAt.Equal(time.Unix(t0+30, 0).UTC()) {
			t.Fatalf("messages = %+v, want v3 edited at +30s", msgs)
		}
		f.apply(update(5, "deleted_business_messages", map[string]any{
			"business_connection_id": "bc-1", "chat": map[string]any{"id": 55, "type": "private"}, "message_ids": []int{10, 11},
		}))
		if msgs := f.messages(res.Thread); msgs[0].DeletedAt == nil || msgs[0].Text != "v3" {
			t.Errorf("after deletion: %+v, want the message kept and marked deleted", msgs[0])
		}
	})

	t.Run("an edit of a message the thread never had stores it", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		m := privateMessage(42, 99, "edited before we saw it", t0)
		m["edit_date"] = t0 + 60
		res := f.apply(update(1, "edited_message", m))
		msgs := f.messages(res.Thread)
		if len(msgs) != 1 || msgs[0].Text != "edited before we saw it" || msgs[0].EditedAt == nil {
			t.Errorf("messages = %+v", msgs)
		}
	})

	t.Run("deletions in a chat the platform never saw are ignored", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		res := f.apply(update(1, "deleted_business_messages", map[string]any{
			"business_connection_id": "bc-9", "chat": map[string]any{"id": 77, "type": "private"}, "message_ids": []int{1},
		}))
		if res.Outcome != outcomeIgnored || count(t, f.db, `select count(*) from omni_threads`) != 0 {
			t.Errorf("applied = %+v; threads = %d", res, count(t, f.db, `select count(*) from omni_threads`))
		}
	})

	t.Run("a business connection keeps its newest state", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		f.apply(update(1, "business_connection", businessConnection("bc-1", 900, true, true, t0)))
		f.apply(update(2, "business_connection", businessConnection("bc-1", 900, false, false, t0+10)))
		if r := f.apply(update(3, "business_connection", businessConnection("bc-1", 900, true, true, t0+5))); r.Outcome != outcomeIgnored {
			t.Errorf("an older connection update: %+v, want ignored", r)
		}
		conn, err := connectionTx(context.Background(), f.db.Read, "bc-1")
		if err != nil {
			t.Fatal(err)
		}
		if conn == nil || conn.Enabled || conn.CanReply || conn.UserID != "900" || conn.BotID != "5550001" {
			t.Errorf("connection = %+v, want the disabled state of +10s", conn)
		}
	})

	t.Run("what the business owner writes from their own app is outbound and sent", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, ack)
		f.apply(update(1, "business_connection", businessConnection("bc-1", 900, true, true, t0)))
		res := f.apply(update(2, "business_message", businessMessage("bc-1", 900, 55, 11, "hello from the owner", t0)))
		msgs := f.messages(res.Thread)
		if len(msgs) != 1 || msgs[0].Direction != DirectionOutbound || msgs[0].Status != StatusSent || msgs[0].Origin != OriginProvider {
			t.Errorf("messages = %+v", msgs)
		}
		if th := f.thread(res.Thread); th.Unread != 0 || len(f.sends.all()) != 0 {
			t.Errorf("unread %d, commands %d; want neither", th.Unread, len(f.sends.all()))
		}
	})

	t.Run("a user who blocks the bot becomes unreachable, and reachable when they restart it", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		res := f.apply(update(1, "message", privateMessage(42, 1, "hi", t0)))
		member := func(id int, old, new string) []byte {
			return update(id, "my_chat_member", map[string]any{
				"chat": map[string]any{"id": 42, "type": "private"}, "from": map[string]any{"id": 42, "is_bot": false, "first_name": "Ann"},
				"date": t0, "old_chat_member": map[string]any{"status": old}, "new_chat_member": map[string]any{"status": new},
			})
		}
		f.apply(member(2, "member", "kicked"))
		if c := f.thread(res.Thread).Contact; c.Reachable || c.UnreachableReason == "" {
			t.Errorf("after kicked: %+v, want unreachable with a reason", c)
		}
		f.apply(member(3, "kicked", "member"))
		if c := f.thread(res.Thread).Contact; !c.Reachable {
			t.Errorf("after member: %+v, want reachable", c)
		}
	})

	t.Run("a pressed button is recorded in its chat's thread", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		res := f.apply(update(1, "callback_query", map[string]any{
			"id": "cb", "from": map[string]any{"id": 42, "is_bot": false, "first_name": "Ann"}, "chat_instance": "x", "data": "yes",
			"message": map[string]any{"message_id": 3, "date": t0, "chat": map[string]any{"id": 42, "type": "private"}},
		}))
		msgs := f.messages(res.Thread)
		if len(msgs) != 1 || msgs[0].Kind != KindCallback || msgs[0].Text != "yes" {
			t.Errorf("messages = %+v", msgs)
		}
	})

	t.Run("an unknown update is recorded and changes nothing else", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		res := f.apply(update(1, "chat_boost", map[string]any{"chat": map[string]any{"id": 1}}))
		if res.Outcome != outcomeIgnored {
			t.Errorf("applied = %+v", res)
		}
		if n := count(t, f.db, `select count(*) from omni_inbound_events where outcome = 'ignored' and event_type = 'unknown'`); n != 1 {
			t.Errorf("ledger rows = %d, want 1", n)
		}
	})

	t.Run("a closed thread opens again when its contact writes", func(t *testing.T) {
		t.Parallel()
		f := newChatFixture(t, AutoAckRule{})
		res := f.apply(update(1, "message", privateMessage(42, 1, "hi", t0)))
		if err := f.admin.CloseThread(context.Background(), res.Thread); err != nil {
			t.Fatal(err)
		}
		if th := f.thread(res.Thread); th.State != ThreadClosed {
			t.Fatalf("state = %s after close", th.State)
		}
		f.apply(update(2, "message", privateMessage(42, 2, "me again", t0+1)))
		if th := f.thread(res.Thread); th.State != ThreadOpen {
			t.Errorf("state = %s, want open", th.State)
		}
	})
}

// TestThreadSeqWithConcurrentWriters: messages written into one thread at
// once — operators' replies beside the chat role's inbound messages — all
// commit, and take distinct seqs in the order they were written, on both
// backends (PostgreSQL runs the transactions side by side).
func TestThreadSeqWithConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	domain := newChatDomain(db, AutoAckRule{})
	admin := NewAdmin(AdminOpts{DB: db})
	apply := func(body []byte) (applied, error) {
		env := envelopeOf(t, body, db.Now())
		var res applied
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			var err error
			res, err = domain.applyTx(ctx, tx, env)
			return err
		})
		return res, err
	}
	first, err := apply(update(1, "message", privateMessage(42, 1, "hello", t0)))
	if err != nil {
		t.Fatal(err)
	}
	thread := first.Thread

	const replies, inbound = 24, 8
	errs := make(chan error, replies+inbound)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() {
			_, err := admin.Reply(ctx, thread, fmt.Sprintf("reply %d", i))
			errs <- err
		})
	}
	for i := range inbound {
		wg.Go(func() {
			_, err := apply(update(100+i, "message", privateMessage(42, 100+i, fmt.Sprintf("inbound %d", i), t0+1)))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a concurrent write into the thread failed: %v", err)
		}
	}

	rows, err := db.Read.QueryContext(ctx, `select id, seq from omni_messages where thread_id = ? order by seq`, int64(thread))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seqs []int64
	lastID := int64(0)
	for rows.Next() {
		var id, seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			t.Fatal(err)
		}
		if id <= lastID {
			t.Errorf("message %d has seq %d after message %d: seq order is not the order the messages were written", id, seq, lastID)
		}
		lastID = id
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != 1+replies+inbound {
		t.Fatalf("%d messages in the thread, want %d", len(seqs), 1+replies+inbound)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("seqs %v, want 1 to %d with no gap", seqs, len(seqs))
		}
	}
}
