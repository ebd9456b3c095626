package referral

import (
	"regexp"
	"strings"
	"time"
)

// Replica is ReferralUserReplica: the referral context's copy of an identity
// user, kept for the rules and the admin projections.
type Replica struct {
	ID             UserID
	Type           UserType
	CompanyID      *string // the replica's TenantId
	Status         UserStatus
	Name           FullName
	PhoneNumber    string
	IsNameFilled   bool
	RegisteredAt   time.Time // zero when unknown (first seen with Version > 1)
	ReplicaVersion int64
	UpdatedAt      time.Time
}

// Link is a referral link; URL is its slug.
type Link struct {
	ID          LinkID
	URL         string
	OwnerUserID UserID
	TenantID    string
	Channel     string
	CreatedAt   time.Time
	DeletedAt   time.Time // zero while the link is live
}

// Bond binds a referred user to the referrer whose link they came through.
type Bond struct {
	ID             BondID
	ReferredUserID UserID
	ReferrerUserID UserID
	ReferralLinkID LinkID
	TenantID       string
	BoundAt        time.Time
	AppliedRule    Rule
	Status         BondStatus
	RegistrationID RegistrationID
	CreatedAt      time.Time
}

// Registration is an entry of the registrations journal.
type Registration struct {
	ID               RegistrationID
	ReferredUserID   UserID
	RegistrationType RegistrationType
	AppliedRule      Rule
	LeadRequested    bool
	LinkURL          string
	ReferrerUserID   UserID
	TenantID         string
	RegisteredAt     time.Time
	BondID           BondID
	CreatedAt        time.Time
}

var slugPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{2,63}$`)

// NormalizeSlug lower-cases a ReferrerUrl and reports whether the result is a
// valid slug (^[a-z0-9][a-z0-9-]{2,63}$). ReferrerUrl comes from a cookie, so
// anything else is garbage to be skipped, not an error. Only ASCII letters are
// lower-cased: Unicode's rules would turn "İstanbul" into the slug
// "istanbul", and the Kelvin sign into a k, so that a value which is no slug
// would resolve to someone's link.
func NormalizeSlug(raw string) (string, bool) {
	b := []byte(raw)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	s := string(b)
	return s, slugPattern.MatchString(s)
}

// IsNameFilled is the spec's Name.FirstName.Trim().Length > 0.
func IsNameFilled(n FullName) bool { return strings.TrimSpace(n.FirstName) != "" }

// upsertReplica is branch A: the replica after ev, given the replica held now
// (nil when the user was never seen). ok is false when the version guard
// refuses ev (Version not above ReplicaVersion): then nothing is written.
func upsertReplica(ev UserUpserted, held *Replica, now time.Time) (r Replica, ok bool) {
	if held != nil && ev.Version <= held.ReplicaVersion {
		return *held, false
	}
	r = Replica{
		ID:             ev.UserID,
		Type:           ev.Type,
		CompanyID:      ev.CompanyID,
		Status:         ev.Status,
		Name:           ev.Name,
		PhoneNumber:    ev.PhoneNumber,
		IsNameFilled:   IsNameFilled(ev.Name),
		ReplicaVersion: ev.Version,
		UpdatedAt:      now,
	}
	switch {
	case ev.Version == 1:
		r.RegisteredAt = ev.OccurredAt
	case held != nil:
		r.RegisteredAt = held.RegisteredAt
	}
	return r, true
}

// blockReplica is the user-blocked consumer's change: the replica after ev.
// ok is false when there is no replica (the upsert will bring the status) or
// the version guard refuses ev.
func blockReplica(ev UserBlocked, held *Replica, now time.Time) (r Replica, ok bool) {
	if held == nil {
		return Replica{}, false
	}
	if ev.Version <= held.ReplicaVersion {
		return *held, false
	}
	r = *held
	r.Status = StatusBlocked
	r.ReplicaVersion = ev.Version
	r.UpdatedAt = now
	return r, true
}

// Outcome is what a message did, as logged, counted and kept with its mark.
type Outcome string

// Outcomes of branch B (the attach-outcome of the spec) and of the other paths.
const (
	OutcomeR1            Outcome = "R1"              // bond and Initial entry created
	OutcomeG1            Outcome = "G1"              // link missing or deleted
	OutcomeG2            Outcome = "G2"              // the user is not an Investor
	OutcomeG3            Outcome = "G3"              // the user owns the link
	OutcomeG4            Outcome = "G4"              // the user is Blocked or Archived (or of unknown status)
	OutcomeG5            Outcome = "G5"              // the user already has an active bond
	OutcomeFirstSeenSkip Outcome = "first-seen-skip" // an Initial entry exists: not first-seen
	OutcomeReplicaOnly   Outcome = "replica-only"    // no ReferrerUrl
	OutcomeInvalidSlug   Outcome = "invalid-slug"    // ReferrerUrl is not a slug
	OutcomeOwnerMissing  Outcome = "owner-replica-missing"
	OutcomeRaceLost      Outcome = "race-lost" // another trigger bound the user first (unique index)
	OutcomeBlocked       Outcome = "blocked"   // user-blocked applied
	OutcomeStale         Outcome = "stale"     // user-blocked refused by the version guard
	OutcomeNoReplica     Outcome = "no-replica"
)

// attachOutcomes are the outcomes that end branch B of a user-upserted, the
// values of the attach-outcomes counter. OutcomeOwnerMissing is a failure
// (counted by reason when retried or dead-lettered); blocked, stale and
// no-replica are user-blocked's.
var attachOutcomes = []Outcome{
	OutcomeR1, OutcomeG1, OutcomeG2, OutcomeG3, OutcomeG4, OutcomeG5,
	OutcomeFirstSeenSkip, OutcomeReplicaOnly, OutcomeInvalidSlug, OutcomeRaceLost,
}

// attachFacts is what branch B reads before it decides.
type attachFacts struct {
	Event         UserUpserted
	HasInitial    bool     // the user has an Initial journal entry
	Link          *Link    // the live link whose URL is the slug; nil when none
	Owner         *Replica // the link owner's replica; nil when missing
	HasActiveBond bool     // the user has an Active bond
}

// AttachDecision is branch B's verdict.
type AttachDecision struct {
	Outcome       Outcome
	Slug          string // the normalised slug, when there was a ReferrerUrl
	LeadRequested bool   // with OutcomeR1: also request a lead for the owner
}

// decideAttach is branch B (trigger T1, rule R1) as a function of what was read:
//
//	no ReferrerUrl                         → replica-only
//	ReferrerUrl not a slug                 → invalid-slug (warning)
//	an Initial entry exists                → first-seen-skip
//	G1 no live link with that URL          → G1 (warning)
//	G2 the event's Type is not Investor    → G2
//	G3 the user owns the link              → G3
//	G4 the event's Status is Blocked, Archived or unknown → G4
//	G5 the user has an active bond         → G5
//	the owner has no replica               → owner-replica-missing (retry)
//	otherwise                              → R1, with a lead when the owner is
//	                                         an active Agent or DeveloperManager
//
// The guards that need only the event and the link come before the owner's
// replica, which only the lead rule reads: a referral that would be refused
// anyway is refused at once instead of waiting for its owner.
func decideAttach(f attachFacts) AttachDecision {
	ev := f.Event
	if ev.ReferrerURL == nil {
		return AttachDecision{Outcome: OutcomeReplicaOnly}
	}
	slug, ok := NormalizeSlug(*ev.ReferrerURL)
	d := AttachDecision{Slug: slug}
	switch {
	case !ok:
		d.Slug = ""
		d.Outcome = OutcomeInvalidSlug
	case f.HasInitial:
		d.Outcome = OutcomeFirstSeenSkip
	case f.Link == nil:
		d.Outcome = OutcomeG1
	case ev.Type != UserInvestor:
		d.Outcome = OutcomeG2
	case ev.UserID == f.Link.OwnerUserID:
		d.Outcome = OutcomeG3
	case ev.Status.Effective() == StatusBlocked || ev.Status.Effective() == StatusArchived:
		d.Outcome = OutcomeG4
	case f.HasActiveBond:
		d.Outcome = OutcomeG5
	case f.Owner == nil:
		d.Outcome = OutcomeOwnerMissing
	default:
		d.Outcome = OutcomeR1
		d.LeadRequested = leadRequested(*f.Owner)
	}
	return d
}

// leadRequested is INV-REF-002/R5: the owner of the link gets a lead when it
// is an Agent or a DeveloperManager and Active. Unknown types and statuses
// never qualify (fail-closed).
func leadRequested(owner Replica) bool {
	return (owner.Type == UserAgent || owner.Type == UserDeveloperManager) && owner.Status == StatusActive
}

// newBond is the mapping of attach-rules step 4: the bond and its Initial
// entry that R1 creates for ev through link l.
func newBond(ev UserUpserted, l Link, lead bool, bondID BondID, regID RegistrationID, now time.Time) (Bond, Registration) {
	b := Bond{
		ID:             bondID,
		ReferredUserID: ev.UserID,
		ReferrerUserID: l.OwnerUserID,
		ReferralLinkID: l.ID,
		TenantID:       l.TenantID,
		BoundAt:        ev.OccurredAt,
		AppliedRule:    RuleR1,
		Status:         BondActive,
		RegistrationID: regID,
		CreatedAt:      now,
	}
	r := Registration{
		ID:               regID,
		ReferredUserID:   ev.UserID,
		RegistrationType: RegistrationInitial,
		AppliedRule:      RuleR1,
		LeadRequested:    lead,
		LinkURL:          l.URL,
		ReferrerUserID:   l.OwnerUserID,
		TenantID:         l.TenantID,
		RegisteredAt:     ev.OccurredAt,
		BondID:           bondID,
		CreatedAt:        now,
	}
	return b, r
}
