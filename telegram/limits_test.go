package telegram_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"switchyard/telegram"
)

var t0 = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

func TestLimiter(t *testing.T) {
	t.Parallel()

	t.Run("a chat gets one message a second and says when the next may go", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		alice := telegram.Chat{Bot: 1, ID: 100}
		if at, ok := l.Take(alice, t0); !ok || !at.Equal(t0) {
			t.Fatalf("first take = %s, %t", at, ok)
		}
		at, ok := l.Take(alice, t0.Add(400*time.Millisecond))
		if ok || !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("take 400 ms later = %s, %t; want refused until %s", at, ok, t0.Add(time.Second))
		}
		if when := l.When(alice, t0.Add(400*time.Millisecond)); !when.Equal(at) {
			t.Fatalf("When = %s, want %s", when, at)
		}
		if _, ok := l.Take(alice, at); !ok {
			t.Fatal("refused at the time it named")
		}
	})

	t.Run("When takes nothing", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		c := telegram.Chat{Bot: 1, ID: 100}
		for range 5 {
			if when := l.When(c, t0); !when.Equal(t0) {
				t.Fatalf("When = %s", when)
			}
		}
		if _, ok := l.Take(c, t0); !ok {
			t.Fatal("When used up the token")
		}
	})

	t.Run("a group gets 20 messages a minute on top of the chat limit", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		group := telegram.Chat{Bot: 1, ID: -500}
		sent := 0
		for now := t0; now.Before(t0.Add(time.Minute)); now = now.Add(100 * time.Millisecond) {
			if _, ok := l.Take(group, now); ok {
				sent++
			}
		}
		if sent != 20 {
			t.Fatalf("%d group messages in a minute, want 20", sent)
		}
	})

	t.Run("the bot limit spans all its chats and no other bot's", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{Bot: telegram.Limit{Rate: 30, Burst: 1}})
		sent := 0
		for i := range 1000 {
			if _, ok := l.Take(telegram.Chat{Bot: 1, ID: int64(i + 1)}, t0.Add(time.Duration(i)*time.Millisecond)); ok {
				sent++
			}
		}
		if sent < 29 || sent > 31 {
			t.Fatalf("%d sends to distinct chats in a second, want about 30", sent)
		}
		if _, ok := l.Take(telegram.Chat{Bot: 2, ID: 1}, t0.Add(999*time.Millisecond)); !ok {
			t.Fatal("another bot was held back")
		}
	})

	t.Run("a chat pause holds only that chat and a bot pause holds only that bot", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		a, b := telegram.Chat{Bot: 1, ID: 10}, telegram.Chat{Bot: 1, ID: 11}
		other := telegram.Chat{Bot: 2, ID: 10}
		l.PauseChat(a, t0.Add(7*time.Second))
		if at, ok := l.Take(a, t0); ok || !at.Equal(t0.Add(7*time.Second)) {
			t.Fatalf("paused chat: %s, %t", at, ok)
		}
		if _, ok := l.Take(b, t0); !ok {
			t.Fatal("the pause spilled over to another chat")
		}
		l.PauseChat(a, t0.Add(time.Second)) // shorter: ignored
		if at := l.When(a, t0.Add(2*time.Second)); !at.Equal(t0.Add(7 * time.Second)) {
			t.Fatalf("a shorter pause shortened the first: %s", at)
		}
		l.PauseBot(1, t0.Add(30*time.Second))
		if at, ok := l.Take(b, t0.Add(10*time.Second)); ok || !at.Equal(t0.Add(30*time.Second)) {
			t.Fatalf("paused bot: %s, %t", at, ok)
		}
		if _, ok := l.Take(other, t0.Add(10*time.Second)); !ok {
			t.Fatal("the bot pause spilled over to another bot")
		}
		if _, ok := l.Take(a, t0.Add(30*time.Second)); !ok {
			t.Fatal("still held after both pauses ended")
		}
	})

	t.Run("an infinite rate switches a bucket off", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{Chat: telegram.Limit{Rate: rate.Inf}, Bot: telegram.Limit{Rate: rate.Inf}})
		for range 100 {
			if _, ok := l.Take(telegram.Chat{Bot: 1, ID: 1}, t0); !ok {
				t.Fatal("refused with every bucket off")
			}
		}
	})

	t.Run("slack lets a send through a little early and the debt is repaid", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		c := telegram.Chat{Bot: 1, ID: 1}
		l.Take(c, t0)
		if _, ok := l.TakeWithin(c, t0.Add(950*time.Millisecond), 100*time.Millisecond); !ok {
			t.Fatal("50 ms early was refused with 100 ms slack")
		}
		if at, ok := l.Take(c, t0.Add(1950*time.Millisecond)); ok || !at.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("the debt was not repaid: %s, %t", at, ok)
		}
	})

	t.Run("no slack sends inside a 429's pause", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		c := telegram.Chat{Bot: 1, ID: 1}
		g := telegram.Chat{Bot: 1, ID: -2}
		l.PauseChat(c, t0.Add(2*time.Second))
		if at, ok := l.TakeWithin(c, t0.Add(2*time.Second-time.Millisecond), 100*time.Millisecond); ok || !at.Equal(t0.Add(2*time.Second)) {
			t.Errorf("TakeWithin 1 ms before the chat's pause ends = %s, %t; want refused until it ends", at, ok)
		}
		l.PauseBot(1, t0.Add(3*time.Second))
		if at, ok := l.Reserve(g, t0.Add(3*time.Second-time.Millisecond), time.Second); ok || !at.Equal(t0.Add(3*time.Second)) {
			t.Errorf("Reserve 1 ms before the bot's pause ends = %s, %t; want refused until it ends", at, ok)
		}
		if _, ok := l.TakeWithin(c, t0.Add(3*time.Second), 100*time.Millisecond); !ok {
			t.Error("refused once both pauses ended")
		}
	})

	t.Run("a handover pauses the bot until another process's buckets would have refilled", func(t *testing.T) {
		t.Parallel()
		if d := telegram.DefaultLimits().Refill(); d != 3*time.Second {
			t.Fatalf("Refill of the default limits = %s, want a group's 3 s", d)
		}
		l := telegram.NewLimiter(telegram.Limits{})
		ended := t0.Add(-time.Second) // the previous sender's last send
		l.Handover(1, ended)
		for _, c := range []telegram.Chat{{Bot: 1, ID: 100}, {Bot: 1, ID: -500}} {
			if at, ok := l.Take(c, t0); ok || !at.Equal(ended.Add(3*time.Second)) {
				t.Errorf("take to %+v during the handover = %s, %t; want refused until %s", c, at, ok, ended.Add(3*time.Second))
			}
		}
		if _, ok := l.Take(telegram.Chat{Bot: 2, ID: 100}, t0); !ok {
			t.Error("another bot was paused by the handover")
		}
		if _, ok := l.Take(telegram.Chat{Bot: 1, ID: 100}, ended.Add(3*time.Second)); !ok {
			t.Error("refused once the handover was over")
		}
		l.Handover(1, t0.Add(-time.Hour)) // a sender that stopped long ago: no pause
		if _, ok := l.Take(telegram.Chat{Bot: 1, ID: 101}, ended.Add(4*time.Second)); !ok {
			t.Error("an old handover paused the bot")
		}
	})

	t.Run("random traffic never beats the limits and a named time is always honoured", func(t *testing.T) {
		t.Parallel()
		rng := rand.New(rand.NewPCG(1, 2))
		limits := telegram.DefaultLimits()
		l := telegram.NewLimiter(limits)
		// The model: the last accepted send per chat and per bot.
		lastChat := map[telegram.Chat]time.Time{}
		lastBot := map[int64]time.Time{}
		now := t0
		accepted := 0
		for range 20_000 {
			now = now.Add(time.Duration(rng.IntN(40)) * time.Millisecond)
			c := telegram.Chat{Bot: int64(rng.IntN(2) + 1), ID: int64(rng.IntN(10) - 2)}
			at, ok := l.Take(c, now)
			if !ok {
				if !at.After(now) {
					t.Fatalf("refused at %s but told to retry at %s", now, at)
				}
				if when := l.When(c, at); !when.Equal(at) {
					t.Fatalf("told to retry at %s, but at that time When says %s", at, when)
				}
				continue
			}
			accepted++
			gap := time.Second
			if c.IsGroup() {
				gap = 3 * time.Second
			}
			if last, seen := lastChat[c]; seen && now.Sub(last) < gap-time.Microsecond {
				t.Fatalf("chat %+v: sends %s apart", c, now.Sub(last))
			}
			if last, seen := lastBot[c.Bot]; seen && now.Sub(last) < time.Second/30-time.Microsecond {
				t.Fatalf("bot %d: sends %s apart", c.Bot, now.Sub(last))
			}
			lastChat[c], lastBot[c.Bot] = now, now
		}
		if accepted < 1000 {
			t.Fatalf("only %d sends accepted: the limiter is too strict", accepted)
		}
	})
}

func TestLimiterReserve(t *testing.T) {
	t.Parallel()

	t.Run("reservations at one instant get one bot interval after another", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		interval := time.Second / 30
		for i := range 8 {
			at, ok := l.Reserve(telegram.Chat{Bot: 1, ID: int64(100 + i)}, t0, 500*time.Millisecond)
			if want := t0.Add(time.Duration(i) * interval); !ok || at.Sub(want).Abs() > time.Millisecond {
				t.Fatalf("reservation %d = %s, %t; want %s", i, at, ok, want)
			}
		}
	})

	t.Run("a slot further off than ahead, or held back by the chat, is refused and spends nothing", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		alice, bob := telegram.Chat{Bot: 1, ID: 100}, telegram.Chat{Bot: 1, ID: 101}
		if _, ok := l.Reserve(alice, t0, 0); !ok {
			t.Fatal("the first reservation was refused")
		}
		next := t0.Add(time.Second / 30)
		if at, ok := l.Reserve(bob, t0, 10*time.Millisecond); ok || at.Sub(next).Abs() > time.Millisecond {
			t.Fatalf("a reservation 33 ms off with 10 ms ahead = %s, %t; want refused until %s", at, ok, next)
		}
		at, ok := l.Reserve(alice, t0, 2*time.Second)
		if ok || !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("a second message to the chat = %s, %t; want refused until %s (its own interval)", at, ok, t0.Add(time.Second))
		}
		if at, ok := l.Reserve(bob, t0, 500*time.Millisecond); !ok || at.Sub(next).Abs() > time.Millisecond {
			t.Fatalf("the refusals spent the bot's slot: %s, %t", at, ok)
		}
		if at, ok := l.Reserve(alice, t0.Add(time.Second), 500*time.Millisecond); !ok || !at.Equal(t0.Add(time.Second)) {
			t.Fatalf("at the time it named = %s, %t", at, ok)
		}
	})

	t.Run("a chat's next message counts from its reserved slot", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		for i := range 5 { // the bot's next slot is 5 intervals off
			l.Reserve(telegram.Chat{Bot: 1, ID: int64(200 + i)}, t0, time.Second)
		}
		alice := telegram.Chat{Bot: 1, ID: 100}
		slot, ok := l.Reserve(alice, t0, time.Second)
		if !ok || !slot.After(t0) {
			t.Fatalf("reservation = %s, %t", slot, ok)
		}
		if at := l.When(alice, t0.Add(time.Second)); !at.Equal(slot.Add(time.Second)) {
			t.Fatalf("the chat's next message may go at %s, want a second after its slot %s", at, slot)
		}
		if _, ok := l.Take(alice, t0.Add(time.Second)); ok {
			t.Fatal("a Take a second after the reservation was made, before a second after its slot, was allowed")
		}
	})

	t.Run("reserved slots never beat the limits in any window", func(t *testing.T) {
		t.Parallel()
		l := telegram.NewLimiter(telegram.Limits{})
		rng := rand.New(rand.NewPCG(3, 4))
		var slots []time.Time
		last := map[int64]time.Time{}
		for now := t0; now.Before(t0.Add(10 * time.Second)); now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond) {
			for range rng.IntN(12) {
				id := int64(rng.IntN(500))
				if at, ok := l.Reserve(telegram.Chat{Bot: 1, ID: id}, now, 500*time.Millisecond); ok {
					if at.Before(now) {
						t.Fatalf("a slot %s before the time it was asked for %s", at, now)
					}
					if prev, seen := last[id]; seen && at.Sub(prev) < time.Second {
						t.Fatalf("chat %d got slots %s and %s, less than a second apart", id, prev, at)
					}
					last[id] = at
					slots = append(slots, at)
				}
			}
		}
		slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
		for i := range slots {
			j := i
			for j < len(slots) && slots[j].Sub(slots[i]) < time.Second {
				j++
			}
			if j-i > 30 {
				t.Fatalf("%d slots in the second from %s, more than the bot's 30", j-i, slots[i])
			}
		}
		if len(slots) < 280 {
			t.Fatalf("only %d slots in 10 s of demand above the limit", len(slots))
		}
	})
}
