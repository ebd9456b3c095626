package demo

import "fmt"

// The ledger is what the simulator did, kept to check the instance against
// at the end. Every field is guarded by sim.mu.

// botUser is a bot-flow user who got an account.
type botUser struct {
	tg       int64
	uid      int64
	code     string // their own referral code (users.link)
	wallet   bool   // connected a wallet (so the bot prompted once)
	wantStep int    // the funnel stage the journey reached: 8 registered, 9 NFT
	settled  bool
}

// verdict is where a subject of an invariant stands: unsettled (keep
// checking), ok, or broken with a description.
type verdict struct {
	settled bool
	broken  string
}

func (v *verdict) ok() { v.settled = true }
func (v *verdict) breaks(format string, args ...any) {
	v.settled, v.broken = true, fmt.Sprintf(format, args...)
}
func (v verdict) tally(inv *Invariant) {
	switch {
	case !v.settled:
		inv.Pending++
	case v.broken != "":
		inv.violate("%s", v.broken)
	}
}

// registration is a new partner the leader must hear about exactly once.
type registration struct {
	partnerCode string
	leader      int // index in Cast.Leaders
}

// outboxEvent is an event the demo's cabinet actions emitted.
type outboxEvent struct {
	id      int64
	settled bool
	dead    bool
}

// idUser is an identity user of the referral flow and what must become of
// them: a bond to wantReferrer ("" for none) and a replica at maxVersion.
type idUser struct {
	id           string
	wantReferrer string
	maxVersion   int64
	verdict
}

// custKey names a customer: by business connection ("" for a private chat
// with the inbox bot) and Telegram id.
type custKey struct {
	conn string
	id   int64
}

// customer is someone writing to the inbox. Their names stay in memory:
// they are never logged.
type customer struct {
	key         custKey
	first, last string
	blocked     bool  // blocked the bot after writing
	thread      int64 // 0 until the operator or a check found the thread
	// settled: every message of theirs was found stored once and every
	// message to them is final; inbox keeps that check's counts.
	settled bool
	inbox   inboxCounts
}

// customerMsg is a message a customer wrote; it must be stored once.
type customerMsg struct {
	cust *customer
	id   int // Telegram's message_id
}

// reply is an operator's reply; it must be delivered once, or fail with a
// reason.
type reply struct {
	cust *customer
	id   int64 // the omni message id
	text string
}

type ledger struct {
	// bot outbox
	botUsers  []*botUser
	regs      []*registration
	events    []*outboxEvent
	leftEarly int // left after the bot's greeting
	switched  int // registered under another leader
	nfts      int
	// referral
	idUsers    map[string]*idUser
	idOrder    []string
	published  int
	duplicates int
	outOfOrder int
	lateOwners int
	refused    int
	// chat
	customers map[custKey]*customer
	msgs      []*customerMsg
	replies   []*reply
	blocked   int
	// deadBefore is the referral group's dead letters when the run began.
	deadBefore int64
}

func newLedger() ledger {
	return ledger{idUsers: map[string]*idUser{}, customers: map[custKey]*customer{}}
}

// idUser returns the record of identity user id, creating it.
func (l *ledger) idUser(id string) *idUser {
	u := l.idUsers[id]
	if u == nil {
		u = &idUser{id: id}
		l.idUsers[id] = u
		l.idOrder = append(l.idOrder, id)
	}
	return u
}

// details are the flows' one-line accounts of what the journeys did.
func (l *ledger) details() (bot, ref, chat string) {
	bot = joinNonEmpty(
		plural(len(l.botUsers), "got an account", "got an account"),
		plural(l.leftEarly, "left after the greeting", "left after the greeting"),
		plural(len(l.regs), "registration", "registrations"),
		plural(l.switched, "under another leader", "under another leader"),
		plural(l.nfts, "NFT activated", "NFTs activated"),
	)
	ref = joinNonEmpty(
		plural(l.published, "identity event", "identity events"),
		plural(l.duplicates, "duplicate", "duplicates"),
		plural(l.outOfOrder, "pair out of order", "pairs out of order"),
		plural(l.lateOwners, "late link owner", "late link owners"),
		plural(l.refused, "referral to refuse", "referrals to refuse"),
	)
	chat = joinNonEmpty(
		plural(len(l.msgs), "customer message", "customer messages"),
		plural(len(l.customers), "customer", "customers"),
		plural(len(l.replies), "operator reply", "operator replies"),
		plural(l.blocked, "customer blocked the bot", "customers blocked the bot"),
	)
	return bot, ref, chat
}
