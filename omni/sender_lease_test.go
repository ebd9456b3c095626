package omni

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

// TestOutboundAsTwoProcesses runs the outbound role twice for one bot, on
// two handles of one database file as two processes would, against one
// fake Bot API that enforces Telegram's limits (30 a second per bot, 1 a
// second per chat). 300 replies over 100 chats — more chats than one
// process takes at once, so both find work — could go out at 60 a second
// if both sent; the bot's sender lease keeps them to one sender at a time.
// A third of the way the holder stops, and the other delivers the rest.
//
// The fake forgives 250 ms of timing jitter: on a loaded two-core machine
// under -race its own goroutines stall now and then and serve a few paced
// sends within a millisecond of each other, which says nothing about the
// lease. The combined rate is checked over one and five seconds.
func TestOutboundAsTwoProcesses(t *testing.T) {
	t.Parallel()
	const (
		chats, perChat = 100, 3
		slack          = 250 * time.Millisecond
	)
	limits := telegram.DefaultLimits()
	p := newPlatform(t, platformOpts{
		fake:     fakebot.Opts{Limits: &limits, LimitSlack: slack, MaxCalls: 100_000},
		outbound: OutboundOpts{Limits: limits},
	})
	other := NewOutbound(OutboundOpts{
		DB: openProcessDB(t, p.db.Path()), Token: inboxToken, APIURL: p.apiURL, Limits: limits,
		MinBackoff: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	})
	stopOther := runWorker(t, other)
	leaseName := telegram.SenderLeaseName(inboxBotID)

	conn := p.connect(t, 900, true)
	threads := make([]ThreadID, chats)
	for i := range threads {
		threads[i] = p.customerWrites(t, conn.ID, int64(2000+i), "hello")
	}
	// The replies are queued at once (concurrent callers share commits), so
	// that both processes find a backlog.
	var (
		mu  sync.Mutex
		ids []MessageID
		wg  sync.WaitGroup
	)
	for _, th := range threads {
		wg.Go(func() {
			for round := range perChat {
				m, err := p.admin.Reply(context.Background(), th, fmt.Sprintf("reply %d", round))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, m.ID)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(ids) != chats*perChat {
		t.Fatalf("%d replies queued, want %d", len(ids), chats*perChat)
	}

	// A third of the way, the holder stops; the standby takes over.
	testwait.Until(t, 30*time.Second, "", func() bool { return len(p.sends()) >= len(ids)/3 }, func() string { return fmt.Sprintf("%d of %d replies sent", len(p.sends()), len(ids)) })
	holder, _, err := p.db.Lease(context.Background(), leaseName)
	if err != nil {
		t.Fatal(err)
	}
	standby, stoppedAt := other.owner, time.Now()
	switch holder.Owner {
	case other.owner:
		standby = p.out.owner
		stopOther()
	default:
		if holder.Owner != p.out.owner {
			t.Errorf("lease %s held by %q, neither outbound process", leaseName, holder.Owner)
		}
		p.stopOut()
	}
	sentByHolder := len(p.sends())

	testwait.Until(t, 60*time.Second, "", func() bool { return len(p.sends()) >= len(ids) }, func() string { return fmt.Sprintf("%d of %d replies sent", len(p.sends()), len(ids)) })
	if l, _, err := p.db.Lease(context.Background(), leaseName); err != nil || l.Owner != standby {
		t.Errorf("lease after the holder stopped = %+v (%v), want the standby %s", l, err, standby)
	}
	if sentByHolder >= len(ids) {
		t.Fatalf("the holder sent all %d replies before it stopped: the takeover was not tested", sentByHolder)
	}

	if n := p.fake.RateLimited(); n != 0 {
		t.Errorf("the fake Bot API answered %d sends with 429", n)
	}
	calls := p.fake.CallsTo("sendMessage")
	perMessage := map[string]int{}
	for _, c := range calls {
		if !c.OK {
			t.Errorf("sendMessage to %s %s after the holder was told to stop failed: %d %s", c.Params["chat_id"], c.At.Sub(stoppedAt), c.ErrorCode, c.Description)
			continue
		}
		perMessage[c.Params["chat_id"]+"/"+c.Params["text"]]++
	}
	if len(perMessage) != len(ids) {
		t.Errorf("%d distinct replies delivered, want %d", len(perMessage), len(ids))
	}
	for k, n := range perMessage {
		if n != 1 {
			t.Errorf("reply %s sent %d times", k, n)
		}
	}
	for _, id := range ids {
		if m := p.message(t, id); m.Status != StatusSent {
			t.Errorf("message %d is %s (%s), want sent", id, m.Status, m.FailureReason)
		}
	}

	// The combined rate, every call counted, in any window of one and of
	// five seconds: the bot's 30 a second, plus what the fake's slack lets
	// through (its bucket of one goes up to slack into debt).
	for _, window := range []time.Duration{time.Second, 5 * time.Second} {
		allowed := int(float64(limits.Bot.Rate)*(window+slack).Seconds()) + 1
		if peak, at := fakebot.PeakCalls(calls, window); peak > allowed {
			t.Errorf("%d sendMessage calls in the %s from %s, want at most %d", peak, window, at.Format(time.StampMilli), allowed)
		}
	}
}

// TestOutboundHandover stops the process that holds the bot's sender lease
// right after a send to a chat, and has the other send to the same chat at
// once: the new holder must wait until the old one's send has left the
// chat's one-second window, which only the old process's limiter saw.
func TestOutboundHandover(t *testing.T) {
	t.Parallel()
	const slack = 50 * time.Millisecond
	limits := telegram.DefaultLimits()
	p := newPlatform(t, platformOpts{
		fake:     fakebot.Opts{Limits: &limits, LimitSlack: slack},
		outbound: OutboundOpts{Limits: limits, LeaseTTL: time.Second}, // a standby polls every 50 ms
	})
	other := NewOutbound(OutboundOpts{
		DB: openProcessDB(t, p.db.Path()), Token: inboxToken, APIURL: p.apiURL, Limits: limits, LeaseTTL: time.Second,
		MinBackoff: 10 * time.Millisecond, PollInterval: 50 * time.Millisecond,
	})
	stopOther := runWorker(t, other)
	leaseName := telegram.SenderLeaseName(inboxBotID)
	var holder string
	testwait.Until(t, 10*time.Second, "", func() bool {
		l, _, err := p.db.Lease(context.Background(), leaseName)
		holder = l.Owner
		return err == nil && l.HeldAt(p.db.Now())
	}, func() string { return "nobody took the sender lease" })
	stopHolder, standby := p.stopOut, other.owner
	if holder == other.owner {
		stopHolder, standby = stopOther, p.out.owner
	}

	conn := p.connect(t, 900, true)
	thread := p.customerWrites(t, conn.ID, 3000, "hello")
	first := p.reply(t, thread, "before the handover")
	p.waitStatus(t, first, StatusSent, 10*time.Second)
	stopHolder()
	second := p.reply(t, thread, "after the handover")
	p.waitStatus(t, second, StatusSent, 20*time.Second)
	if l, _, _ := p.db.Lease(context.Background(), leaseName); l.Owner != standby {
		t.Errorf("lease = %+v, want the standby %s", l, standby)
	}

	if n := p.fake.RateLimited(); n != 0 {
		t.Errorf("the fake Bot API answered %d sends with 429", n)
	}
	calls := p.fake.CallsTo("sendMessage")
	if len(calls) != 2 {
		var got []string
		for _, c := range calls {
			got = append(got, fmt.Sprintf("%s at %s: ok %t %d", c.Params["text"], c.At.Format(time.StampMilli), c.OK, c.ErrorCode))
		}
		t.Fatalf("sendMessage calls = %q, want two", got)
	}
	if gap := calls[1].At.Sub(calls[0].At); gap < time.Second {
		t.Errorf("the new holder sent to the chat %s after the old one, want at least a second", gap)
	}
}
