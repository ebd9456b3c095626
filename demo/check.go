package demo

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"switchyard/telegram/fakebot"
)

// The invariants, as the summary names them.
const (
	invOutbox    = "every outbox event processed or dead-lettered"
	invNoTwice   = "no DM sent twice"
	invPartners  = "every new partner announced once, by DM or web notification"
	invFunnels   = "every bot user's funnel at the stage they reached"
	invReferrals = "every valid referral bonded once, no other bonded"
	invInbound   = "every inbound message stored once"
	invReplies   = "every reply delivered once or failed with a reason"
)

// settle checks the invariants every checkEvery until nothing is pending or
// broken, the figures have not improved for opts.Drain, or ctx ends, and
// returns the last round's result. The journeys and the operator have
// ended, so the checks are the ledger's only users.
func (s *sim) settle(ctx context.Context) []Invariant {
	best, improved := -1, time.Now()
	for {
		cctx, cancel := ctx, context.CancelFunc(func() {})
		if ctx.Err() != nil {
			// No time left: one round, so the summary has figures.
			cctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		}
		inv := s.check(cctx)
		cancel()
		open := unsettled(inv)
		if open == 0 || ctx.Err() != nil {
			return inv
		}
		if best < 0 || open < best {
			best, improved = open, time.Now()
		} else if time.Since(improved) >= s.opts.Drain {
			return inv
		}
		if sleep(ctx, checkEvery) != nil {
			return inv
		}
	}
}

// unsettled counts the subjects still pending or broken.
func unsettled(inv []Invariant) int {
	n := 0
	for _, i := range inv {
		n += i.Pending + i.Violations
	}
	return n
}

// check runs one round over the ledger.
func (s *sim) check(ctx context.Context) []Invariant {
	s.mu.Lock()
	led := s.led
	led.events = slices.Clone(s.led.events)
	led.regs = slices.Clone(s.led.regs)
	led.botUsers = slices.Clone(s.led.botUsers)
	led.msgs = slices.Clone(s.led.msgs)
	led.replies = slices.Clone(s.led.replies)
	s.mu.Unlock()

	twice := Invariant{Name: invNoTwice}
	partners := s.checkPartners(ctx, led.regs, &twice)
	s.checkPrompts(led.botUsers, &twice)
	inbound, replies := s.checkInbox(ctx, &led)
	return []Invariant{
		s.checkOutbox(ctx, led.events),
		twice,
		partners,
		s.checkFunnels(ctx, led.botUsers),
		s.checkReferrals(ctx, &led),
		inbound,
		replies,
	}
}

// checkOutbox: every event the cabinet's actions emitted is processed or
// dead-lettered.
func (s *sim) checkOutbox(ctx context.Context, events []*outboxEvent) Invariant {
	inv := Invariant{Name: invOutbox, Checked: len(events)}
	dead := 0
	for _, ev := range events {
		if !ev.settled {
			var st struct {
				State string `json:"state"`
			}
			if err := s.c.admin(ctx, http.MethodGet, "/bot/events/"+strconv.FormatInt(ev.id, 10), nil, &st); err == nil {
				ev.settled = st.State == "processed" || st.State == "dead"
				ev.dead = st.State == "dead"
			}
		}
		if !ev.settled {
			inv.Pending++
		}
		if ev.dead {
			dead++
		}
	}
	inv.Note = plural(dead, "dead-lettered", "dead-lettered")
	return inv
}

// checkPartners: each registration reached its leader exactly once, by DM
// or by web notification; a DM more than once also breaks twice.
func (s *sim) checkPartners(ctx context.Context, regs []*registration, twice *Invariant) Invariant {
	inv := Invariant{Name: invPartners, Checked: len(regs)}
	twice.Checked += len(regs)
	dms := map[int][]string{}
	notes := map[int][]string{}
	byDM, byNote := 0, 0
	for _, r := range regs {
		l := s.cast.Leaders[r.leader]
		if _, ok := dms[r.leader]; !ok {
			dms[r.leader] = s.botTexts(l.TelegramID)
			var na notificationsAnswer
			// On an error the leader's registrations count as not settled.
			_ = s.c.admin(ctx, http.MethodGet, "/users/"+strconv.FormatInt(l.UID, 10)+"/notifications", nil, &na)
			for _, n := range na.Notifications {
				notes[r.leader] = append(notes[r.leader], n.Text)
			}
		}
		d, n := partnerAnnouncements(dms[r.leader], r.partnerCode), partnerAnnouncements(notes[r.leader], r.partnerCode)
		if d > 1 {
			twice.violate("leader %d got the DM about partner %s %d times", l.UID, r.partnerCode, d)
		}
		switch {
		case d+n == 1:
			if d == 1 {
				byDM++
			} else {
				byNote++
			}
		case d+n > 1:
			inv.violate("leader %d heard of partner %s %d times (%d DMs, %d web notifications)", l.UID, r.partnerCode, d+n, d, n)
		default:
			inv.Pending++
		}
	}
	inv.Note = joinNonEmpty(plural(byDM, "by DM", "by DM"), plural(byNote, "by web notification", "by web notification"))
	return inv
}

// checkPrompts: the bot asked each user who connected a wallet to confirm
// their account once.
func (s *sim) checkPrompts(users []*botUser, twice *Invariant) {
	for _, u := range users {
		if !u.wallet {
			continue
		}
		twice.Checked++
		n := 0
		for _, t := range s.botTexts(u.tg) {
			if strings.HasPrefix(t, walletPromptStart) {
				n++
			}
		}
		if n > 1 {
			twice.violate("user %d got the wallet prompt %d times", u.tg, n)
		}
	}
	twice.Note = "partner DMs and wallet prompts"
}

// botTexts are the onboarding bot's messages in its chat with tg, as the
// user sees them.
func (s *sim) botTexts(tg int64) []string {
	if tg == 0 {
		return nil
	}
	ch, ok := s.onboarding.Chat(tg)
	if !ok {
		return nil
	}
	var out []string
	for _, m := range ch.Messages {
		if m.Sender == fakebot.SenderBot {
			out = append(out, m.Text)
		}
	}
	return out
}

// checkFunnels: the bot's funnel of every user who finished the journey is
// at the stage they reached, with the account bound.
func (s *sim) checkFunnels(ctx context.Context, users []*botUser) Invariant {
	inv := Invariant{Name: invFunnels, Checked: len(users)}
	for _, u := range users {
		if !u.settled {
			var fa funnelAnswer
			if err := s.c.admin(ctx, http.MethodGet, "/bot/funnel/"+strconv.FormatInt(u.tg, 10), nil, &fa); err == nil {
				u.settled = fa.Funnel.Stage >= u.wantStep && fa.Funnel.BindState == "bound"
			}
		}
		if !u.settled {
			inv.Pending++
		}
	}
	return inv
}

// checkReferrals: every identity user whose referral is valid has exactly
// one active bond, to the link's owner; no other has one; every replica is
// at the newest version published; nothing was dead-lettered.
func (s *sim) checkReferrals(ctx context.Context, led *ledger) Invariant {
	inv := Invariant{Name: invReferrals, Checked: len(led.idOrder)}
	lag, dead, err := s.referralGroup(ctx)
	caughtUp := err == nil && lag == 0
	if err == nil && dead > led.deadBefore {
		inv.violate("%d identity events dead-lettered in %s", dead-led.deadBefore, referralGroup)
	}
	bonded := 0
	for _, id := range led.idOrder {
		u := led.idUsers[id]
		if !u.settled {
			s.checkIdentity(ctx, u, caughtUp)
		}
		u.tally(&inv)
		if u.settled && u.broken == "" && u.wantReferrer != "" {
			bonded++
		}
	}
	inv.Note = joinNonEmpty(plural(bonded, "bonded", "bonded"), plural(inv.Checked-bonded, "not to bond", "not to bond"))
	return inv
}

func (s *sim) checkIdentity(ctx context.Context, u *idUser, caughtUp bool) {
	var ba bondsAnswer
	if err := s.c.admin(ctx, http.MethodGet, "/referral/bonds?referredUserId="+u.id, nil, &ba); err != nil {
		return
	}
	var active []string
	for _, b := range ba.Bonds {
		if b.Status == "Active" {
			active = append(active, b.ReferrerUserID)
		}
	}
	var ra replicaAnswer
	if err := s.c.admin(ctx, http.MethodGet, "/referral/replicas/"+u.id, nil, &ra); err != nil && statusOf(err) != http.StatusNotFound {
		return
	}
	switch {
	case len(active) > 1:
		u.breaks("user %s has %d active bonds", u.id, len(active))
	case len(active) == 1 && active[0] != u.wantReferrer && u.wantReferrer != "":
		u.breaks("user %s is bonded to %s, not to the link's owner %s", u.id, active[0], u.wantReferrer)
	case len(active) == 1 && u.wantReferrer == "":
		u.breaks("user %s is bonded though the rules refuse the referral", u.id)
	case ra.ReplicaVersion > u.maxVersion:
		u.breaks("user %s has a replica at version %d, newer than any published (%d)", u.id, ra.ReplicaVersion, u.maxVersion)
	case ra.ReplicaVersion < u.maxVersion:
		// not yet
	case u.wantReferrer != "" && len(active) == 1, u.wantReferrer == "" && caughtUp:
		u.ok()
	}
}

// referralGroup is the referral consumers' lag and dead letters.
func (s *sim) referralGroup(ctx context.Context) (lag, dead int64, err error) {
	var ta topicsAnswer
	if err := s.c.admin(ctx, http.MethodGet, "/topics", nil, &ta); err != nil {
		return 0, 0, err
	}
	for _, t := range ta.Topics {
		if t.Name != identityTopic {
			continue
		}
		for _, g := range t.Groups {
			if g.Group == referralGroup {
				return g.Lag, g.Dead, nil
			}
		}
	}
	return 0, 0, nil
}

// baseline remembers what the run must not be blamed for: the referral
// group's dead letters before it began.
func (s *sim) baseline(ctx context.Context) error {
	_, dead, err := s.referralGroup(ctx)
	s.mu.Lock()
	s.led.deadBefore = dead
	s.mu.Unlock()
	return err
}

// maxChatMessages is how many messages the sandbox keeps per chat; a chat
// that long may have lost its oldest ones.
const maxChatMessages = 1000

// inboxCounts is one customer's part of the inbox invariants.
type inboxCounts struct {
	inbound, pendingIn   int
	outbound, pendingOut int
	sent, failed         int
	reason               string // a failure reason, for the note
	broken               []string
	brokenIn             []string
}

// checkInbox: every message a customer wrote is stored once in their
// thread; every message to them (operator replies and automatic
// acknowledgements) is sent — and in their chat exactly as often as the
// platform says it sent it — or failed with a reason.
func (s *sim) checkInbox(ctx context.Context, led *ledger) (Invariant, Invariant) {
	in := Invariant{Name: invInbound, Checked: len(led.msgs)}
	out := Invariant{Name: invReplies}
	msgs := map[*customer][]*customerMsg{}
	for _, m := range led.msgs {
		msgs[m.cust] = append(msgs[m.cust], m)
	}
	replies := map[*customer][]*reply{}
	for _, r := range led.replies {
		replies[r.cust] = append(replies[r.cust], r)
	}
	var (
		threads map[custKey]int64
		views   map[custKey][]string
	)
	sent, failed, reason := 0, 0, ""
	for c, cm := range msgs {
		if !c.settled {
			if c.thread == 0 && threads == nil {
				threads = s.threadsByCustomer(ctx)
			}
			if c.thread == 0 {
				c.thread = threads[c.key]
			}
			if views == nil {
				views = s.inboxViews()
			}
			c.inbox = s.checkCustomer(ctx, c, cm, replies[c], views[c.key])
			c.settled = c.inbox.pendingIn == 0 && c.inbox.pendingOut == 0
		}
		ic := c.inbox
		in.Pending += ic.pendingIn
		out.Checked += ic.outbound
		out.Pending += ic.pendingOut
		for _, b := range ic.brokenIn {
			in.violate("%s", b)
		}
		for _, b := range ic.broken {
			out.violate("%s", b)
		}
		sent, failed = sent+ic.sent, failed+ic.failed
		if reason == "" {
			reason = ic.reason
		}
	}
	out.Note = joinNonEmpty(plural(len(led.replies), "by the operator", "by the operator"),
		plural(sent, "sent", "sent"), plural(failed, "failed", "failed"))
	if reason != "" {
		out.Note += `, e.g. "` + reason + `"`
	}
	return in, out
}

func (s *sim) checkCustomer(ctx context.Context, c *customer, cm []*customerMsg, rs []*reply, chat []string) inboxCounts {
	ic := inboxCounts{inbound: len(cm)}
	if c.thread == 0 {
		ic.pendingIn, ic.pendingOut = len(cm), len(rs)
		return ic
	}
	var ma messagesAnswer
	if err := s.c.admin(ctx, http.MethodGet, "/omni/threads/"+strconv.FormatInt(c.thread, 10)+"/messages?limit=1000", nil, &ma); err != nil {
		ic.pendingIn, ic.pendingOut = len(cm), len(rs)
		return ic
	}
	stored := map[string]int{}
	byID := map[int64]omniMessage{}
	sentTexts := map[string]int{}
	for _, m := range ma.Messages {
		byID[m.ID] = m
		if m.Direction == "inbound" {
			if m.ProviderMessageID != nil {
				stored[*m.ProviderMessageID]++
			}
			continue
		}
		ic.outbound++
		switch m.Status {
		case "sent":
			ic.sent++
			sentTexts[m.Text]++
		case "failed":
			ic.failed++
			if m.FailureReason == "" {
				ic.broken = append(ic.broken, "message "+strconv.FormatInt(m.ID, 10)+" failed without a reason")
			} else if ic.reason == "" {
				ic.reason = m.FailureReason
			}
		default:
			ic.pendingOut++
		}
	}
	for _, m := range cm {
		switch n := stored[strconv.Itoa(m.id)]; {
		case n == 0:
			ic.pendingIn++
		case n > 1:
			ic.brokenIn = append(ic.brokenIn, "customer message "+strconv.Itoa(m.id)+" in thread "+
				strconv.FormatInt(c.thread, 10)+" stored "+strconv.Itoa(n)+" times")
		}
	}
	for _, r := range rs {
		if _, ok := byID[r.id]; !ok {
			ic.pendingOut++
		}
	}
	delivered := map[string]int{}
	for _, t := range chat {
		delivered[t]++
	}
	for text, n := range sentTexts {
		switch d := delivered[text]; {
		case d > n:
			ic.broken = append(ic.broken, "a message in thread "+strconv.FormatInt(c.thread, 10)+" reached the customer "+
				strconv.Itoa(d)+" times, sent "+strconv.Itoa(n))
		case d < n && len(chat) < maxChatMessages:
			ic.broken = append(ic.broken, "a message in thread "+strconv.FormatInt(c.thread, 10)+" is marked sent "+
				strconv.Itoa(n)+" times but reached the customer "+strconv.Itoa(d))
		}
	}
	return ic
}

// threadsByCustomer maps the most recently active threads to their
// customers.
func (s *sim) threadsByCustomer(ctx context.Context) map[custKey]int64 {
	out := map[custKey]int64{}
	var ta threadsAnswer
	if err := s.c.admin(ctx, http.MethodGet, "/omni/threads?limit=500", nil, &ta); err != nil {
		return out
	}
	for _, t := range ta.Threads {
		if id, err := strconv.ParseInt(t.Contact.ProviderUserID, 10, 64); err == nil {
			out[custKey{conn: t.BusinessConnectionID, id: id}] = t.ID
		}
	}
	return out
}

// inboxViews are the inbox bot's messages in every chat, as the customers
// see them.
func (s *sim) inboxViews() map[custKey][]string {
	out := map[custKey][]string{}
	for _, ch := range s.inbox.Chats() {
		k := custKey{conn: ch.BusinessConnectionID, id: ch.ID}
		for _, m := range ch.Messages {
			if m.Sender == fakebot.SenderBot {
				out[k] = append(out[k], m.Text)
			}
		}
	}
	return out
}
