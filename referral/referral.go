// Package referral is the referral context of Switchyard: the replica of
// identity users, referral links, bonds and the registrations journal, kept
// by two consumers of the identity topic pin.identity.users.v1 (the spec's
// ReferralUserUpsertedConsumer and ReferralUserBlockedConsumer, one consumer
// group, referral-identity-users), and rule R1 that binds a new user to the
// owner of the link they registered through.
//
// Guarantees, for every message of the topic:
//
//   - One transaction. The replica upsert, the bond and its Initial journal
//     entry, the outgoing events (pin.referral.bonds.v1 and, when a lead is
//     requested, pin.referral.lead-attachments.v1), the idempotency mark and
//     the consumer group's offset commit are written together or not at all.
//   - Once. A message whose mark ("pin.identity.user-upserted:{MessageId}")
//     exists is acknowledged and does nothing else; a user is bound at most
//     once (the Initial entry and the partial unique index on active bonds),
//     and a unique-index race ends as an idempotent success with no second
//     outgoing event.
//   - In order per user. The topic is keyed by UserId, and the queue package
//     hands one key's messages to the handler in publish order; the replica
//     also refuses any Version not above the one it holds, so out-of-order
//     and replayed snapshots change nothing.
//   - Against concurrent writers. On PostgreSQL, where transactions run side
//     by side, a referral keeps the link and the owner's replica it read
//     locked (FOR SHARE) until it commits: a link deletion or a change of
//     the owner either committed before the referral read the row, or waits
//     for the referral's commit. No bond is made through a link after its
//     deletion returned, and no lead is requested on an owner state already
//     replaced. SQLite's single writer gives the same for free.
//   - Fail-closed. An unknown user Type counts as "not agent or developer",
//     an unknown Status as Blocked; a ReferrerUrl that is not a valid slug
//     skips the binding branch and keeps the replica branch.
//   - Nothing lost. A broken message (unparseable, empty UserId) goes to the
//     group's dead-letter queue at once; a referral whose link owner has no
//     replica yet is retried with a backoff capped at 15 minutes, holding back
//     only that user's later messages, and is dead-lettered when the attempts
//     run out (redrive it after the owner's replica arrives).
//
// Replaying the topic from offset 0 into a fresh database rebuilds the same
// replicas and creates each bond once.
package referral

import (
	"strings"
)

// Topics and the consumer group of the spec.
const (
	TopicIdentityUsers   = "pin.identity.users.v1"
	TopicBonds           = "pin.referral.bonds.v1"
	TopicLeadAttachments = "pin.referral.lead-attachments.v1"
	ConsumerGroup        = "referral-identity-users"
	// IdentityPartitions is the partition count of pin.identity.users.v1.
	IdentityPartitions = 6
)

// ContractVersion is the identity and referral event contract version this code speaks.
const ContractVersion = 1

// UserID is an identity user's id: a canonical lower-case UUID.
type UserID string

// LinkID identifies a referral link.
type LinkID string

// BondID identifies a referral bond.
type BondID string

// RegistrationID identifies an entry of the registrations journal.
type RegistrationID string

// UserType is identity's UserType; values this code does not know are kept as sent.
type UserType string

// The user types the rules read.
const (
	UserInvestor         UserType = "Investor"
	UserAgent            UserType = "Agent"
	UserDeveloperManager UserType = "DeveloperManager"
)

// UserStatus is identity's UserStatus; values this code does not know are kept as sent.
type UserStatus string

// The user statuses of the spec.
const (
	StatusActive   UserStatus = "Active"
	StatusBlocked  UserStatus = "Blocked"
	StatusArchived UserStatus = "Archived"
)

// knownStatuses are the statuses the rules take at face value; any other
// status is treated as Blocked (fail-closed).
var knownStatuses = map[UserStatus]bool{StatusActive: true, StatusBlocked: true, StatusArchived: true}

// Effective returns the status the rules act on: s itself when known, else Blocked.
func (s UserStatus) Effective() UserStatus {
	if knownStatuses[s] {
		return s
	}
	return StatusBlocked
}

// Rule names an attach rule.
type Rule string

// RuleR1 is binding at registration (trigger T1).
const RuleR1 Rule = "R1"

// RegistrationType is the kind of a journal entry.
type RegistrationType string

// RegistrationInitial is the first registration of a referred user.
const RegistrationInitial RegistrationType = "Initial"

// BondStatus is the state of a bond.
type BondStatus string

// BondActive is a bond in force; a user has at most one.
const BondActive BondStatus = "Active"

// Error is a referral domain error.
type Error string

func (e Error) Error() string { return string(e) }

// Domain errors.
const (
	// ErrOwnerReplicaMissing is the spec's REFERRAL_OWNER_REPLICA_MISSING: the
	// link's owner has no replica yet; the message is retried with backoff.
	ErrOwnerReplicaMissing = Error("REFERRAL_OWNER_REPLICA_MISSING: the referral link owner's replica is missing")
	// ErrBadPayload marks a message that can never be processed; it is dead-lettered at once.
	ErrBadPayload         = Error("bad identity event")
	ErrLinkNotFound       = Error("referral link not found")
	ErrReplicaNotFound    = Error("user replica not found")
	ErrSlugTaken          = Error("a referral link with this url exists")
	ErrInvalidLink        = Error("invalid referral link")
	errUnknownMessageType = Error("unknown message type")
)

// FullName is identity's FullNameSnapshot.
type FullName struct {
	FirstName  string  `json:"FirstName"`
	LastName   string  `json:"LastName"`
	MiddleName *string `json:"MiddleName"`
}

// Display returns "FirstName LastName" trimmed, or "" when the first name is empty.
func (n FullName) Display() string {
	if strings.TrimSpace(n.FirstName) == "" {
		return ""
	}
	return strings.TrimSpace(strings.TrimSpace(n.FirstName) + " " + strings.TrimSpace(n.LastName))
}
