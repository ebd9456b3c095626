package fakebot

import (
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"switchyard/telegram"
)

// FaultKind is what an injected fault does to a call.
type FaultKind string

// The fault kinds.
const (
	// FaultBlocked answers 403 "Forbidden: bot was blocked by the user".
	FaultBlocked FaultKind = "blocked"
	// FaultTooManyRequests answers 429 with parameters.retry_after.
	FaultTooManyRequests FaultKind = "too_many_requests"
	// FaultServerError answers HTTP 500 with the Bot API error body.
	FaultServerError FaultKind = "server_error"
	// FaultSlow waits Delay, then answers the call normally.
	FaultSlow FaultKind = "slow"
	// FaultDisconnect closes the connection without an answer: a network
	// error on the client's side.
	FaultDisconnect FaultKind = "disconnect"
)

// Fault is an injected failure. Faults are kept in the order added; a call
// gets the first one that matches and fires.
type Fault struct {
	Kind FaultKind
	// Method, Token and ChatID restrict the fault to one method (any
	// spelling), one bot, one chat_id; zero values match everything.
	Method string
	Token  string
	ChatID int64
	// RetryAfter is the retry_after of FaultTooManyRequests, rounded up to
	// whole seconds; 1 s when zero.
	RetryAfter time.Duration
	// Delay is how long FaultSlow holds the call; any other kind also waits
	// Delay before failing.
	Delay time.Duration
	// Times makes the fault fire on the next Times matching calls and then
	// retire; 0 keeps it until ClearFaults.
	Times int
	// Probability in (0, 1) makes the fault fire on each matching call with
	// that probability (from Opts.Seed); 0 or 1 means always.
	Probability float64
}

type faultState struct {
	Fault
	fired int
}

// AddFault queues f behind the faults already added.
func (s *Server) AddFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &faultState{Fault: f})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// pickFault returns a copy of the fault that fires for this call, or nil;
// call with s.mu held.
func (s *Server) pickFault(token, method string, p params) *Fault {
	for i, f := range s.faults {
		if f.Method != "" && !strings.EqualFold(f.Method, method) {
			continue
		}
		if f.Token != "" && f.Token != token {
			continue
		}
		if f.ChatID != 0 && p["chat_id"] != strconv.FormatInt(f.ChatID, 10) {
			continue
		}
		if f.Probability > 0 && f.Probability < 1 && s.rng.Float64() >= f.Probability {
			continue
		}
		f.fired++
		if f.Times > 0 && f.fired >= f.Times {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
		}
		fired := f.Fault
		return &fired
	}
	return nil
}

// TelegramLimits is how the fake models the limits Telegram applies to a
// bot's messages (the Bots FAQ: "avoid sending more than one message per
// second" in a chat, "we may allow short bursts"; "not more than 30 messages
// per second or so" in all; "not more than 20 messages per minute to the same
// group"). Telegram publishes rates, not bursts: the bursts are the fake's
// reading of "short bursts" — a chat takes 3 messages at once, a group 20 (the
// 20 of a minute), a bot 30 (one second's worth) — so that a client keeping to
// the published rates never sees a 429, and one that keeps going faster does
// within seconds. A Limits field left zero in Opts.Limits takes its value
// from here.
func TelegramLimits() telegram.Limits {
	return telegram.Limits{
		Chat:  telegram.Limit{Rate: 1, Burst: 3},
		Group: telegram.Limit{Rate: rate.Limit(20.0 / 60.0), Burst: 20},
		Bot:   telegram.Limit{Rate: 30, Burst: 30},
	}
}

// fakeLimits fills the zero fields of l from TelegramLimits: a zero Rate
// takes the whole bucket, a Burst below one only the burst.
func fakeLimits(l telegram.Limits) telegram.Limits {
	model := TelegramLimits()
	fill := func(v *telegram.Limit, def telegram.Limit) {
		if v.Rate == 0 {
			*v = def
		}
		if v.Burst < 1 {
			v.Burst = def.Burst
		}
	}
	fill(&l.Chat, model.Chat)
	fill(&l.Group, model.Group)
	fill(&l.Bot, model.Bot)
	return l
}

// admit spends one message of the chat's, the group's and the bot's limits,
// or answers 429 with retry_after when they are spent. Methods call it once
// a send is valid and just before it takes effect, as Telegram does: a
// request that is wrong gets its 400 or 403 whatever the pace. Call with
// s.mu held.
func (s *Server) admit(b *botState, chatID int64) *apiError {
	if s.limiter == nil {
		return nil
	}
	now := s.now()
	at, allowed := s.limiter.TakeWithin(telegram.Chat{Bot: b.me.ID, ID: chatID}, now, s.slack)
	if allowed {
		return nil
	}
	s.rateLimited++
	return tooManyRequests(ceilSeconds(at.Sub(now)))
}
