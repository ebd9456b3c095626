package telegram

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/time/rate"
)

// Limit is one token bucket: Rate tokens a second, at most Burst saved up.
// rate.Inf switches the bucket off.
type Limit struct {
	Rate  rate.Limit
	Burst int
}

// Limits are Telegram's broadcast limits as token buckets. A zero field takes
// its default from DefaultLimits.
type Limits struct {
	// Chat applies to every chat: about one message a second.
	Chat Limit
	// Group applies on top of Chat to group chats (negative chat ids):
	// 20 messages a minute.
	Group Limit
	// Bot applies to all of one bot's chats together: about 30 a second.
	Bot Limit
}

// DefaultLimits are the limits Telegram documents for bots, with a burst of
// one so that no sliding window ever holds more than the limit.
func DefaultLimits() Limits {
	return Limits{
		Chat:  Limit{Rate: 1, Burst: 1},
		Group: Limit{Rate: rate.Limit(20.0 / 60.0), Burst: 1},
		Bot:   Limit{Rate: 30, Burst: 1},
	}
}

// NoLimits are limits with every bucket off: nothing waits. They are for
// the sandbox on a manual clock (tests), where a clock that stands still
// would hold every second message to a chat until the test moved it.
func NoLimits() Limits {
	off := Limit{Rate: rate.Inf}
	return Limits{Chat: off, Group: off, Bot: off}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	fill := func(v *Limit, def Limit) {
		if v.Rate == 0 {
			v.Rate = def.Rate
		}
		if v.Burst < 1 {
			v.Burst = def.Burst
		}
	}
	fill(&l.Chat, d.Chat)
	fill(&l.Group, d.Group)
	fill(&l.Bot, d.Bot)
	return l
}

// Chat names one chat of one bot, the unit the limits count in. A negative
// ID is a group, supergroup or channel, as in the Bot API.
type Chat struct {
	Bot int64
	ID  int64
}

// IsGroup reports whether the chat is a group (the group limit applies).
func (c Chat) IsGroup() bool { return c.ID < 0 }

var deferrals = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "switchyard_telegram_ratelimit_deferrals_total",
	Help: "Sends the Telegram rate limiter deferred, by the limit that held them back (chat, group, bot, pause).",
}, []string{"scope"})

// The limits that can hold a send back, the values of the deferrals
// counter's scope label; their series exist at 0 from NewLimiter on.
const (
	scopeChat  = "chat"
	scopeGroup = "group"
	scopeBot   = "bot"
	scopePause = "pause" // a 429's retry_after
)

var scopes = []string{scopeChat, scopeGroup, scopeBot, scopePause}

// Limiter answers "when may this bot send to this chat" without sleeping, so
// callers reschedule work instead of blocking a worker, and keeps the pauses
// a 429's retry_after imposes on one chat or one bot. It is safe for
// concurrent use; all times are the caller's (pass the store's clock).
type Limiter struct {
	limits Limits

	mu    sync.Mutex
	last  time.Time
	takes int
	chats map[Chat]*chatState
	bots  map[int64]*botState
}

type chatState struct {
	chat, group *rate.Limiter // nil when switched off or not a group
	pausedUntil time.Time
	slot        time.Time // the last reserved slot: the buckets count from it
}

type botState struct {
	bot         *rate.Limiter
	pausedUntil time.Time
}

// NewLimiter returns a limiter with limits (zero fields take defaults).
func NewLimiter(limits Limits) *Limiter {
	for _, s := range scopes {
		deferrals.WithLabelValues(s)
	}
	return &Limiter{
		limits: limits.withDefaults(),
		chats:  make(map[Chat]*chatState),
		bots:   make(map[int64]*botState),
	}
}

// Limits returns the limits in force, defaults filled in.
func (l *Limiter) Limits() Limits { return l.limits }

// When returns the earliest time at or after now when a message to c would be
// allowed. It takes nothing.
func (l *Limiter) When(c Chat, now time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.last) {
		now = l.last
	}
	at, _ := l.when(c, now)
	return at
}

// Take asks to send one message to c at now. If the limits allow it, Take
// spends the tokens and returns (now, true); otherwise it spends nothing and
// returns the time to try again.
func (l *Limiter) Take(c Chat, now time.Time) (time.Time, bool) {
	return l.TakeWithin(c, now, 0)
}

// TakeWithin is Take that also accepts when the tokens will be there within
// slack; the buckets then go briefly into debt, which later sends repay. A
// scheduler that wakes a few milliseconds early uses it, and so does the fake
// Bot API to forgive clients' timing jitter.
func (l *Limiter) TakeWithin(c Chat, now time.Time, slack time.Duration) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now = l.monotonic(now)
	at, scope := l.next(c, now)
	if p := l.paused(c); p.After(now) {
		deferrals.WithLabelValues(scopePause).Inc()
		return p, false
	}
	if at.Sub(now) > slack {
		deferrals.WithLabelValues(scope).Inc()
		return at, false
	}
	cs, bs := l.chat(c), l.bot(c.Bot)
	spend(cs.chat, now)
	spend(cs.group, now)
	spend(bs.bot, now)
	return now, true
}

// next is when c may be sent to next and the scope that decides it, counting
// the call, and sweeping idle chats every 1,024 calls. l.mu is held.
func (l *Limiter) next(c Chat, now time.Time) (time.Time, string) {
	l.takes++
	if l.takes%1024 == 0 {
		l.sweep(now)
	}
	return l.when(c, now)
}

// Reserve books the next slot of the bot's for a message to c, for a sender
// that waits for it: when the bot's limit allows the message within ahead of
// now, and nothing else holds it back (the chat's own interval, a group's,
// a pause), it spends the tokens and returns the slot — the time to send at,
// not before. Otherwise it spends nothing and returns the time to ask again.
// Slots go out in call order, one bot interval apart, so a sender that
// works in rounds books one slot after another and loses none to the time
// a round takes, where a Take at the round's one instant, with a burst of
// one, admits one message per round. The bot's bucket counts the message at
// now and the chat's at the slot, so neither is ever beaten; a chat asks
// again only after its slot (its next message waits for this one).
func (l *Limiter) Reserve(c Chat, now time.Time, ahead time.Duration) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now = l.monotonic(now)
	at, scope := l.next(c, now)
	if p := l.paused(c); p.After(now) {
		deferrals.WithLabelValues(scopePause).Inc()
		return p, false
	}
	if at.Sub(now) > ahead || (scope != scopeBot && at.Sub(now) > reserveSlack) {
		deferrals.WithLabelValues(scope).Inc()
		return at, false
	}
	cs, bs := l.chat(c), l.bot(c.Bot)
	spend(bs.bot, now)
	spend(cs.chat, at)
	spend(cs.group, at)
	cs.slot = at
	return at, true
}

// reserveSlack is how soon the chat's own limit must allow a reserved
// message: a reservation waits only for the bot's pace.
const reserveSlack = 5 * time.Millisecond

// spend takes one token from lim, going into debt when it holds less (the
// slack case).
func spend(lim *rate.Limiter, now time.Time) {
	if lim != nil && !lim.AllowN(now, 1) {
		lim.ReserveN(now, 1)
	}
}

// PauseChat stops sends to c until until (a 429 on a send to c whose
// retry_after is meant for that chat). A pause never shortens an earlier one.
func (l *Limiter) PauseChat(c Chat, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cs := l.chat(c); until.After(cs.pausedUntil) {
		cs.pausedUntil = until
	}
}

// PauseBot stops every send of bot until until (a 429 that throttles the
// whole bot). A pause never shortens an earlier one.
func (l *Limiter) PauseBot(bot int64, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if bs := l.bot(bot); until.After(bs.pausedUntil) {
		bs.pausedUntil = until
	}
}

// SenderLeaseName is the lease (store.RunExclusive) a bot's sender holds
// while it sends: Telegram's limits count per bot across every process that
// sends with its token, and a Limiter counts in one process, so one process
// at a time sends for a bot.
func SenderLeaseName(bot int64) string { return "telegram:sender:bot" + strconv.FormatInt(bot, 10) }

// Refill is how long the slowest of the limits takes to refill from empty
// (burst over rate): 3 s with DefaultLimits, a group's interval.
func (l Limits) Refill() time.Duration {
	l = l.withDefaults()
	var d time.Duration
	for _, lim := range []Limit{l.Chat, l.Group, l.Bot} {
		if lim.Rate != rate.Inf && lim.Rate > 0 {
			d = max(d, time.Duration(float64(lim.Burst)/float64(lim.Rate)*float64(time.Second)))
		}
	}
	return d
}

// Handover pauses bot until the buckets another process's limiter filled
// have drained — until ended, when that process stopped sending for bot,
// plus Refill — because this limiter never saw its sends. A sender calls it
// when it takes over a bot from another process.
func (l *Limiter) Handover(bot int64, ended time.Time) {
	l.PauseBot(bot, ended.Add(l.limits.Refill()))
}

// monotonic keeps the limiter's notion of time from going backwards when
// callers' clocks disagree by a little. Only sends move it: When may look
// into the future without moving it.
func (l *Limiter) monotonic(now time.Time) time.Time {
	if now.Before(l.last) {
		return l.last
	}
	l.last = now
	return now
}

// when returns the earliest allowed time and the scope that sets it.
func (l *Limiter) when(c Chat, now time.Time) (time.Time, string) {
	at, scope := now, ""
	later := func(t time.Time, s string) {
		if t.After(at) {
			at, scope = t, s
		}
	}
	if cs := l.chats[c]; cs != nil {
		from := now
		if cs.slot.After(from) {
			from = cs.slot // a reserved message goes then; the chat's limits count from it
		}
		later(cs.pausedUntil, scopePause)
		later(ready(cs.chat, from), scopeChat)
		later(ready(cs.group, from), scopeGroup)
	}
	if bs := l.bots[c.Bot]; bs != nil {
		later(bs.pausedUntil, scopePause)
		later(ready(bs.bot, now), scopeBot)
	}
	return at, scope
}

// paused is when the pauses on c (its own and its bot's) end: a 429's
// retry_after is Telegram's word, so no slack ever sends inside it. l.mu
// is held.
func (l *Limiter) paused(c Chat) time.Time {
	var until time.Time
	if cs := l.chats[c]; cs != nil {
		until = cs.pausedUntil
	}
	if bs := l.bots[c.Bot]; bs != nil && bs.pausedUntil.After(until) {
		until = bs.pausedUntil
	}
	return until
}

// ready returns when lim will hold one token.
func ready(lim *rate.Limiter, now time.Time) time.Time {
	if lim == nil {
		return now
	}
	// A bucket a hair short of a token because of float rounding counts as
	// full; otherwise retry times drift by a microsecond and whole-second
	// retry_after values round up by a second.
	const epsilon = 1e-9
	tokens := lim.TokensAt(now)
	if tokens >= 1-epsilon {
		return now
	}
	secs := (1 - tokens) / float64(lim.Limit())
	return now.Add(time.Duration(math.Ceil(secs*1e6-epsilon*1e6)) * time.Microsecond)
}

func (l *Limiter) chat(c Chat) *chatState {
	cs := l.chats[c]
	if cs == nil {
		cs = &chatState{chat: bucket(l.limits.Chat)}
		if c.IsGroup() {
			cs.group = bucket(l.limits.Group)
		}
		l.chats[c] = cs
	}
	return cs
}

func (l *Limiter) bot(id int64) *botState {
	bs := l.bots[id]
	if bs == nil {
		bs = &botState{bot: bucket(l.limits.Bot)}
		l.bots[id] = bs
	}
	return bs
}

func bucket(lim Limit) *rate.Limiter {
	if lim.Rate == rate.Inf {
		return nil
	}
	return rate.NewLimiter(lim.Rate, lim.Burst)
}

// sweep forgets chats and bots whose buckets are full and pauses over: they
// behave exactly like fresh ones, so memory stays bounded by active chats.
func (l *Limiter) sweep(now time.Time) {
	full := func(lim *rate.Limiter) bool { return lim == nil || lim.TokensAt(now) >= float64(lim.Burst()) }
	for c, cs := range l.chats {
		if !cs.pausedUntil.After(now) && full(cs.chat) && full(cs.group) {
			delete(l.chats, c)
		}
	}
	for id, bs := range l.bots {
		if !bs.pausedUntil.After(now) && full(bs.bot) {
			delete(l.bots, id)
		}
	}
}
