package omni

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

func TestBusinessRoundTrip(t *testing.T) {
	t.Parallel()

	t.Run("a business message in, an operator reply out with its connection id, queued then sent", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{})
		conn := p.connect(t, 900, true)
		thread := p.customerWrites(t, conn.ID, 55, "do you deliver on sundays?")

		var list struct {
			Threads []Thread `json:"threads"`
		}
		if status := p.api(t, http.MethodGet, "/omni/threads", nil, &list); status != http.StatusOK || len(list.Threads) != 1 {
			t.Fatalf("threads: %d %+v", status, list)
		}
		th := list.Threads[0]
		if th.ID != thread || th.BusinessConnectionID != conn.ID || th.Channel != ChannelTelegramBusiness || th.Unread != 1 ||
			th.Contact.ProviderUserID != "55" || !th.Contact.Reachable || th.LastMessageAt == nil {
			t.Errorf("thread = %+v", th)
		}

		id := p.reply(t, thread, "yes, from 10 to 18")
		m := p.waitStatus(t, id, StatusSent, 10*time.Second)
		if m.ProviderMessageID == nil || m.SentAt == nil || m.Attempts != 1 {
			t.Errorf("sent message = %+v, want the provider's id, a send time and one attempt", m)
		}
		calls := p.sends()
		if len(calls) != 1 {
			t.Fatalf("sendMessage calls = %d, want 1", len(calls))
		}
		params := calls[0].Params
		if params["business_connection_id"] != conn.ID || params["text"] != "yes, from 10 to 18" || params["chat_id"] != "55" {
			t.Errorf("sendMessage params = %v", params)
		}
		var sent struct {
			MessageID int `json:"message_id"`
		}
		if err := calls[0].Decode(&sent); err != nil || strconv.Itoa(sent.MessageID) != *m.ProviderMessageID {
			t.Errorf("provider message id %s, Telegram answered %d (%v)", *m.ProviderMessageID, sent.MessageID, err)
		}

		var msgs struct {
			Messages []OmniMessage `json:"messages"`
		}
		p.api(t, http.MethodGet, fmt.Sprintf("/omni/threads/%d/messages", thread), nil, &msgs)
		if len(msgs.Messages) != 2 || msgs.Messages[0].Direction != DirectionInbound || msgs.Messages[1].ID != id {
			t.Errorf("thread messages = %+v, want the question then the reply", msgs.Messages)
		}
		p.api(t, http.MethodGet, "/omni/threads", nil, &list)
		if list.Threads[0].Unread != 0 {
			t.Errorf("unread after the reply = %d, want 0", list.Threads[0].Unread)
		}
	})

	t.Run("a duplicate webhook delivery stores one message", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{})
		body := update(9001, "message", privateMessage(42, 1, "only once", t0))
		for range 3 {
			if status, answer := postUpdate(t, p.base, testSecret, body); status != http.StatusOK {
				t.Fatalf("webhook: %d %s", status, answer)
			}
		}
		postUpdate(t, p.base, testSecret, update(9002, "message", privateMessage(42, 2, "and then", t0+1)))
		testwait.Until(t, 10*time.Second, "", func() bool {
			return count(t, p.db, `select count(*) from omni_messages where text = 'and then'`) == 1
		}, func() string { return "the later update was never applied" })
		if n := count(t, p.db, `select count(*) from omni_messages where text = 'only once'`); n != 1 {
			t.Errorf("%d messages from one update delivered three times, want 1", n)
		}
	})

	t.Run("the acknowledgement rule answers a new thread once", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{chat: ChatOpts{AutoAckText: "Спасибо, скоро ответим"}})
		conn := p.connect(t, 900, true)
		p.customerWrites(t, conn.ID, 56, "first")
		p.customerWrites(t, conn.ID, 56, "second")
		calls, err := p.fake.WaitCalls(ctxTimeout(t, 10*time.Second), "sendMessage", 1)
		if err != nil {
			t.Fatal(err)
		}
		if calls[0].Params["text"] != "Спасибо, скоро ответим" || calls[0].Params["business_connection_id"] != conn.ID {
			t.Errorf("acknowledgement call = %v", calls[0].Params)
		}
		testwait.Until(t, 5*time.Second, "", func() bool {
			return count(t, p.db, `select count(*) from omni_messages where origin = 'rule' and status = 'sent'`) == 1
		}, func() string { return "the acknowledgement never became sent" })
		if n := count(t, p.db, `select count(*) from omni_messages where origin = 'rule'`); n != 1 {
			t.Errorf("%d acknowledgements, want 1", n)
		}
	})
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func deadLetters(t testing.TB, p *platform) []queue.DeadLetter {
	t.Helper()
	qa := queue.NewAdmin(queue.AdminOpts{DB: p.db})
	var all []queue.DeadLetter
	for _, name := range []string{QueueSenderFlow, QueueSenderRetry} {
		dead, err := qa.ListDead(context.Background(), queue.DeadFilter{Queue: name, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, dead...)
	}
	return all
}

func TestOutboundFaults(t *testing.T) {
	t.Parallel()

	t.Run("a 429 with retry_after 2 is not resent before 2 seconds, then sent, and other chats keep going", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{})
		conn := p.connect(t, 900, true)
		thread := p.customerWrites(t, conn.ID, 55, "hello")
		other := p.customerWrites(t, conn.ID, 66, "hello")
		p.fake.AddFault(fakebot.Fault{Kind: fakebot.FaultTooManyRequests, Method: "sendMessage", ChatID: 55, RetryAfter: 2 * time.Second, Times: 1})
		id := p.reply(t, thread, "answer")

		retrying := p.waitStatus(t, id, StatusRetrying, 5*time.Second)
		if retrying.NextAttemptAt == nil || !strings.Contains(retrying.FailureReason, "429") {
			t.Errorf("while throttled: %+v, want the next attempt's time and the 429", retrying)
		}
		unaffected := p.reply(t, other, "meanwhile")
		p.waitStatus(t, unaffected, StatusSent, 5*time.Second)
		p.waitStatus(t, id, StatusSent, 10*time.Second)

		var throttled []fakebot.Call
		for _, c := range p.fake.CallsTo("sendMessage") {
			if c.Params["chat_id"] == "55" {
				throttled = append(throttled, c)
			}
		}
		if len(throttled) != 2 || throttled[0].OK || !throttled[1].OK {
			t.Fatalf("calls to chat 55 = %+v, want a 429 then a success", throttled)
		}
		if gap := throttled[1].At.Sub(throttled[0].At); gap < 2*time.Second {
			t.Errorf("resent %s after the 429, want at least 2s", gap)
		}
		if m := p.message(t, unaffected); m.SentAt == nil || !m.SentAt.Before(throttled[1].At) {
			t.Errorf("the other chat's reply was sent at %v, want before the throttled chat's resend at %v", m.SentAt, throttled[1].At)
		}
	})

	t.Run("429s on several chats at once pause the whole bot", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{})
		conn := p.connect(t, 900, true)
		var threads []ThreadID
		for chat := int64(55); chat < 59; chat++ {
			threads = append(threads, p.customerWrites(t, conn.ID, chat, "hello"))
		}
		for chat := int64(55); chat < 58; chat++ {
			p.fake.AddFault(fakebot.Fault{Kind: fakebot.FaultTooManyRequests, Method: "sendMessage", ChatID: chat, RetryAfter: 2 * time.Second, Times: 1})
		}
		var answers []MessageID
		for _, th := range threads[:3] {
			answers = append(answers, p.reply(t, th, "answer"))
		}
		calls, err := p.fake.WaitCalls(ctxTimeout(t, 5*time.Second), "sendMessage", 3)
		if err != nil {
			t.Fatal(err)
		}
		lastThrottle := calls[2].At
		// The fake records a call when it answers; the outbound pauses the
		// bot only once it has read the third 429, just before it marks that
		// reply retrying. A reply queued in between went out unpaused (CI
		// saw one sent 28 ms after the third 429).
		for _, a := range answers {
			var m OmniMessage
			testwait.Until(t, 5*time.Second, "the throttled reply marked for a retry", func() bool {
				m = p.message(t, a)
				return m.Status == StatusRetrying || m.Status == StatusSent && m.Attempts >= 2
			}, func() string { return fmt.Sprintf("message %d is %s after %d attempts", a, m.Status, m.Attempts) })
		}
		id := p.reply(t, threads[3], "to a chat that was never throttled")
		m := p.waitStatus(t, id, StatusSent, 10*time.Second)
		if m.SentAt.Sub(lastThrottle) < 1900*time.Millisecond {
			t.Errorf("sent %s after the third chat's 429, want the bot paused for about 2s", m.SentAt.Sub(lastThrottle))
		}
	})

	t.Run("three 500s are retried through sender.retry, and later replies to the chat wait behind", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{})
		conn := p.connect(t, 900, true)
		thread := p.customerWrites(t, conn.ID, 55, "hello")
		other := p.customerWrites(t, conn.ID, 66, "hello too")
		p.fake.AddFault(fakebot.Fault{Kind: fakebot.FaultServerError, Method: "sendMessage", ChatID: 55, Times: 3})
		a, b, c := p.reply(t, thread, "A"), p.reply(t, thread, "B"), p.reply(t, thread, "C")
		elsewhere := p.reply(t, other, "to another chat")

		for _, id := range []MessageID{a, b, c, elsewhere} {
			p.waitStatus(t, id, StatusSent, 15*time.Second)
		}
		if m := p.message(t, a); m.Attempts != 4 {
			t.Errorf("A took %d attempts, want 4", m.Attempts)
		}
		var order []string
		for _, call := range p.sends() {
			if call.Params["chat_id"] == "55" {
				order = append(order, call.Params["text"])
			}
		}
		if strings.Join(order, ",") != "A,B,C" {
			t.Errorf("chat 55 got %v, want A,B,C", order)
		}
		if n := count(t, p.db, `select count(*) from omni_parked`); n != 0 {
			t.Errorf("%d keys still parked after the retry lane drained", n)
		}
		if dead := deadLetters(t, p); len(dead) != 0 {
			t.Errorf("dead letters = %+v, want none", dead)
		}
	})

	t.Run("a 403 fails the message with its reason and makes the contact unreachable", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{})
		conn := p.connect(t, 900, true)
		thread := p.customerWrites(t, conn.ID, 55, "hello")
		p.fake.AddFault(fakebot.Fault{Kind: fakebot.FaultBlocked, Method: "sendMessage", Times: 1})
		id := p.reply(t, thread, "answer")

		m := p.waitStatus(t, id, StatusFailed, 10*time.Second)
		if !strings.Contains(m.FailureReason, "403") || !strings.Contains(m.FailureReason, "blocked") {
			t.Errorf("failure reason = %q", m.FailureReason)
		}
		var list struct {
			Threads []Thread `json:"threads"`
		}
		p.api(t, http.MethodGet, "/omni/threads", nil, &list)
		if len(list.Threads) != 1 || list.Threads[0].Contact.Reachable {
			t.Errorf("contact = %+v, want unreachable", list.Threads[0].Contact)
		}
		testwait.Until(t, 5*time.Second, "", func() bool { return len(deadLetters(t, p)) == 1 }, func() string { return "the failed send never reached the dead letters" })
		if n := len(p.fake.CallsTo("sendMessage")); n != 1 {
			t.Errorf("%d calls, want 1 (a 403 is not retried)", n)
		}
		if e := deadLetters(t, p)[0].LastError; !strings.HasPrefix(e, "permanent: telego: sendMessage: ") || strings.Count(e, "permanent") != 1 {
			t.Errorf("the dead letter's error reads %q, want its class once: permanent: telego: sendMessage: …", e)
		}
	})

	t.Run("exhausted attempts end in the dead letters, and a redrive delivers", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{outbound: OutboundOpts{MaxAttempts: 3}})
		conn := p.connect(t, 900, true)
		thread := p.customerWrites(t, conn.ID, 55, "hello")
		p.fake.AddFault(fakebot.Fault{Kind: fakebot.FaultServerError, Method: "sendMessage", Times: 3})
		id := p.reply(t, thread, "answer")

		m := p.waitStatus(t, id, StatusFailed, 10*time.Second)
		if !strings.Contains(m.FailureReason, "gave up after 3 attempts") {
			t.Errorf("failure reason = %q", m.FailureReason)
		}
		var dead []queue.DeadLetter
		testwait.Until(t, 5*time.Second, "", func() bool { dead = deadLetters(t, p); return len(dead) == 1 }, func() string { return fmt.Sprintf("dead letters = %d, want 1", len(dead)) })
		if dead[0].Queue != QueueSenderRetry {
			t.Errorf("dead letter of %s, want %s", dead[0].Queue, QueueSenderRetry)
		}
		n, err := queue.NewAdmin(queue.AdminOpts{DB: p.db}).Redrive(context.Background(), queue.DeadFilter{Queue: dead[0].Queue, ID: dead[0].ID})
		if err != nil || n != 1 {
			t.Fatalf("redrive: %d, %v", n, err)
		}
		sent := p.waitStatus(t, id, StatusSent, 10*time.Second)
		if sent.Attempts != 1 || sent.FailureReason != "" {
			t.Errorf("after the redrive: %+v, want a fresh count of 1 attempt and no reason", sent)
		}
		if n := len(p.sends()); n != 1 {
			t.Errorf("%d successful sends, want 1", n)
		}
	})

	t.Run("a business reply on a connection that cannot reply is refused before Telegram is called", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{})
		conn := p.connect(t, 900, false)
		thread := p.customerWrites(t, conn.ID, 55, "hello")
		id := p.reply(t, thread, "answer")
		m := p.waitStatus(t, id, StatusFailed, 10*time.Second)
		if !strings.Contains(m.FailureReason, "cannot reply") || m.Attempts != 0 {
			t.Errorf("message = %+v, want refused with no attempt", m)
		}
		if n := len(p.fake.CallsTo("sendMessage")); n != 0 {
			t.Errorf("%d sendMessage calls, want none", n)
		}
	})

	t.Run("a reply through another bot than the thread's is refused and says why", func(t *testing.T) {
		t.Parallel()
		p := newPlatform(t, platformOpts{})
		conn := p.connect(t, 900, true)
		thread := p.customerWrites(t, conn.ID, 55, "hello")
		if _, err := p.db.Write.Exec(`update omni_threads set bot_id = '777' where id = ?`, int64(thread)); err != nil {
			t.Fatal(err)
		}
		id := p.reply(t, thread, "answer")
		m := p.waitStatus(t, id, StatusFailed, 10*time.Second)
		if !strings.Contains(m.FailureReason, "another bot") {
			t.Errorf("failure reason = %q", m.FailureReason)
		}
		if n := len(p.fake.CallsTo("sendMessage")); n != 0 {
			t.Errorf("%d sendMessage calls, want none", n)
		}
	})
}

func TestOutboundUnderRandomFaults(t *testing.T) {
	t.Parallel()
	// The 429s here are each chat's own: the bot as a whole is never paused.
	p := newPlatform(t, platformOpts{fake: fakebot.Opts{Seed: 7, MaxCalls: 100_000}, outbound: OutboundOpts{BotPauseChats: -1}})
	for _, f := range []fakebot.Fault{
		{Kind: fakebot.FaultServerError, Method: "sendMessage", Probability: 0.12},
		{Kind: fakebot.FaultDisconnect, Method: "sendMessage", Probability: 0.08},
		{Kind: fakebot.FaultTooManyRequests, Method: "sendMessage", Probability: 0.06, RetryAfter: time.Second},
		{Kind: fakebot.FaultBlocked, Method: "sendMessage", Probability: 0.05},
	} {
		p.fake.AddFault(f)
	}
	conn := p.connect(t, 900, true)
	const chats, replies = 20, 500
	threads := make([]ThreadID, chats)
	for i := range threads {
		threads[i] = p.customerWrites(t, conn.ID, int64(1000+i), "hello")
	}

	// Replies are queued concurrently from several operators; each chat's
	// replies are numbered in the order they were queued.
	var (
		mu     sync.Mutex
		queued = map[string][]string{} // chat id → texts in queue order
		ids    []MessageID
		wg     sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < replies; i += 4 {
				chat := i % chats
				mu.Lock()
				text := fmt.Sprintf("chat %d reply %d", chat, len(queued[strconv.Itoa(1000+chat)]))
				m, err := p.admin.Reply(context.Background(), threads[chat], text)
				if err == nil {
					queued[strconv.Itoa(1000+chat)] = append(queued[strconv.Itoa(1000+chat)], text)
					ids = append(ids, m.ID)
				}
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	testwait.Until(t, 45*time.Second, "", func() bool {
		return count(t, p.db, `select count(*) from omni_messages where direction = 'outbound' and status in ('sent', 'failed')`) == replies
	}, func() string {
		return fmt.Sprintf("%d of %d replies settled", count(t, p.db, `select count(*) from omni_messages where direction = 'outbound' and status in ('sent', 'failed')`), replies)
	})

	delivered := map[string]int{}
	perChat := map[string][]string{}
	for _, c := range p.sends() {
		delivered[c.Params["text"]]++
		perChat[c.Params["chat_id"]] = append(perChat[c.Params["chat_id"]], c.Params["text"])
	}
	sent := 0
	for _, id := range ids {
		m, err := p.admin.Message(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.Status == StatusSent && delivered[m.Text] != 1:
			t.Errorf("%q is sent but Telegram got it %d times", m.Text, delivered[m.Text])
		case m.Status == StatusFailed && delivered[m.Text] != 0:
			t.Errorf("%q is failed but Telegram got it %d times", m.Text, delivered[m.Text])
		}
		if m.Status == StatusSent {
			sent++
		}
	}
	for text, n := range delivered {
		if n > 1 {
			t.Errorf("%q delivered %d times", text, n)
		}
	}
	for chat, got := range perChat {
		want := slices.DeleteFunc(slices.Clone(queued[chat]), func(text string) bool { return delivered[text] == 0 })
		if !slices.Equal(got, want) {
			t.Errorf("chat %s received %v, want the queue order %v", chat, got, want)
		}
	}
	failed := replies - sent
	testwait.Until(t, 10*time.Second, "", func() bool { return len(deadLetters(t, p)) == failed }, func() string {
		return fmt.Sprintf("%d dead letters for %d failed replies", len(deadLetters(t, p)), failed)
	})
	if failed == 0 || sent < replies/2 {
		t.Errorf("%d sent, %d failed: the faults did not bite as configured", sent, failed)
	}
	t.Logf("%d replies: %d sent, %d failed into the dead letters; %d calls to Telegram", replies, sent, failed, len(p.fake.CallsTo("sendMessage")))
}

// TestSentWhoseProviderIDTheThreadHolds: a reply Telegram accepted is
// recorded sent even when its thread already holds a message with the
// provider id Telegram gave it (Telegram echoed the reply back as an update
// and the chat role stored it first): the reply keeps no provider id then.
func TestSentWhoseProviderIDTheThreadHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	domain := newChatDomain(db, AutoAckRule{})
	env := envelopeOf(t, update(1, "message", privateMessage(42, 7, "the echo", t0)), db.Now())
	var res applied
	if err := db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		res, err = domain.applyTx(ctx, tx, env)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	admin := NewAdmin(AdminOpts{DB: db})
	reply, err := admin.Reply(ctx, res.Thread, "answer")
	if err != nil {
		t.Fatal(err)
	}
	out := NewOutbound(OutboundOpts{DB: db, Token: inboxToken})
	if err := out.markSent(ctx, reply.ID, "reply key", "7"); err != nil {
		t.Fatalf("markSent: %v", err)
	}
	m, err := admin.Message(ctx, reply.ID)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != StatusSent || m.SentAt == nil || m.ProviderMessageID != nil {
		t.Fatalf("reply = %+v, want sent, with no provider id", m)
	}
	var echo string
	if err := db.Read.QueryRow(`select text from omni_messages where thread_id = ? and provider_message_id = '7'`, int64(res.Thread)).Scan(&echo); err != nil || echo != "the echo" {
		t.Fatalf("the message holding provider id 7: %q, %v", echo, err)
	}
}
