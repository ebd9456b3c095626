package referral

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// MessageType is the "type" of an event envelope.
type MessageType string

// The message types this package reads and writes.
const (
	TypeUserUpserted        MessageType = "pin.identity.user-upserted"
	TypeUserBlocked         MessageType = "pin.identity.user-blocked"
	TypeBondCreated         MessageType = "pin.referral.bond-created"
	TypeLeadAttachRequested MessageType = "pin.referral.lead-attach-requested"
)

const (
	aggregateBond          = "ReferralBond"
	maxMessageIDLength     = 200
	correlationIDMaxLength = 200
)

// outgoingNamespace is the UUID namespace of the messageIds this package emits.
var outgoingNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("switchyard.referral"))

// Envelope is the metadata wrapper of every event on the topics:
// {"messageId","type","contractVersion","aggregateId","aggregateType",
// "occurredAt","correlationId","payload"}. Outgoing events also carry
// causationId, the messageId of the identity event that caused them.
type Envelope struct {
	MessageID       string          `json:"messageId"`
	Type            MessageType     `json:"type"`
	ContractVersion int             `json:"contractVersion"`
	AggregateID     string          `json:"aggregateId"`
	AggregateType   string          `json:"aggregateType"`
	OccurredAt      time.Time       `json:"occurredAt"`
	CorrelationID   string          `json:"correlationId,omitempty"`
	CausationID     string          `json:"causationId,omitempty"`
	Payload         json.RawMessage `json:"payload"`
}

// UserUpsertedPayload is the payload of pin.identity.user-upserted, in the
// contract's PascalCase.
type UserUpsertedPayload struct {
	UserId        string    `json:"UserId"`
	Type          string    `json:"Type"`
	CompanyId     *string   `json:"CompanyId"`
	Status        string    `json:"Status"`
	Name          *FullName `json:"Name"`
	PhoneNumber   string    `json:"PhoneNumber"`
	RegisteredVia string    `json:"RegisteredVia"`
	ReferrerUrl   *string   `json:"ReferrerUrl"`
	Version       int64     `json:"Version"`
}

// UserBlockedPayload is the payload of pin.identity.user-blocked.
type UserBlockedPayload struct {
	UserId  string `json:"UserId"`
	Reason  string `json:"Reason"`
	Version int64  `json:"Version"`
}

// BondCreatedPayload is the payload of ReferralBondCreatedKafkaEvent
// (topic pin.referral.bonds.v1, key ReferredUserId).
type BondCreatedPayload struct {
	BondId         string    `json:"BondId"`
	ReferredUserId string    `json:"ReferredUserId"`
	ReferrerUserId string    `json:"ReferrerUserId"`
	ReferralLinkId string    `json:"ReferralLinkId"`
	TenantId       string    `json:"TenantId"`
	BoundAt        time.Time `json:"BoundAt"`
	AppliedRule    string    `json:"AppliedRule"`
	Status         string    `json:"Status"`
	Channel        string    `json:"Channel"`
}

// LeadAttachRequestedPayload is the payload of
// ReferralLeadAttachRequestedKafkaEvent (topic
// pin.referral.lead-attachments.v1, key InvestorUserId).
type LeadAttachRequestedPayload struct {
	InvestorUserId string    `json:"InvestorUserId"`
	AgentUserId    string    `json:"AgentUserId"`
	AgentCompanyId string    `json:"AgentCompanyId"`
	ReferralLinkId string    `json:"ReferralLinkId"`
	Channel        string    `json:"Channel"`
	AppliedRule    string    `json:"AppliedRule"`
	BondId         string    `json:"BondId"`
	RequestedAt    time.Time `json:"RequestedAt"`
}

// meta is what every incoming event carries besides its payload.
type meta struct {
	MessageID       string
	Type            MessageType
	ContractVersion int
	OccurredAt      time.Time
	CorrelationID   string
}

// UserUpserted is a validated pin.identity.user-upserted event.
type UserUpserted struct {
	meta
	UserID        UserID
	Type          UserType
	CompanyID     *string
	Status        UserStatus
	Name          FullName
	PhoneNumber   string
	RegisteredVia string
	ReferrerURL   *string
	Version       int64
}

// UserBlocked is a validated pin.identity.user-blocked event.
type UserBlocked struct {
	meta
	UserID  UserID
	Reason  string
	Version int64
}

func badPayload(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadPayload, fmt.Sprintf(format, args...))
}

// parseEnvelope reads the envelope of a topic message.
func parseEnvelope(value []byte) (Envelope, error) {
	var env Envelope
	if err := json.Unmarshal(value, &env); err != nil {
		return env, badPayload("envelope does not deserialise: %v", err)
	}
	return env, nil
}

// parseMeta checks the envelope fields every consumer needs.
func parseMeta(env Envelope) (meta, error) {
	m := meta{
		MessageID:       env.MessageID,
		Type:            env.Type,
		ContractVersion: env.ContractVersion,
		OccurredAt:      env.OccurredAt.UTC(),
		CorrelationID:   env.CorrelationID,
	}
	switch {
	case strings.TrimSpace(env.MessageID) == "":
		return m, badPayload("messageId is empty")
	case len(env.MessageID) > maxMessageIDLength:
		return m, badPayload("messageId is longer than %d characters", maxMessageIDLength)
	case env.OccurredAt.IsZero():
		return m, badPayload("occurredAt is missing")
	case len(env.Payload) == 0 || string(env.Payload) == "null":
		return m, badPayload("payload is missing")
	}
	if len(m.CorrelationID) > correlationIDMaxLength {
		m.CorrelationID = m.CorrelationID[:correlationIDMaxLength]
	}
	return m, nil
}

// parseUserID accepts a GUID in any case and returns it canonical; the empty
// GUID is refused (the spec's "UserId = Guid.Empty → DLQ").
func parseUserID(s string) (UserID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return "", badPayload("UserId %q is not a GUID", s)
	}
	if id == uuid.Nil {
		return "", badPayload("UserId is the empty GUID")
	}
	return UserID(id.String()), nil
}

// checkAggregate refuses an event whose aggregateId names another user: its
// key would not be the user's, and per-user order would not hold.
func checkAggregate(env Envelope, id UserID) error {
	if env.AggregateID == "" {
		return nil
	}
	agg, err := uuid.Parse(env.AggregateID)
	if err != nil || UserID(agg.String()) != id {
		return badPayload("aggregateId %q is not the payload's UserId", env.AggregateID)
	}
	return nil
}

// parseUserUpserted validates a user-upserted envelope.
func parseUserUpserted(env Envelope) (UserUpserted, error) {
	m, err := parseMeta(env)
	if err != nil {
		return UserUpserted{meta: m}, err
	}
	var p UserUpsertedPayload
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return UserUpserted{meta: m}, badPayload("payload does not deserialise: %v", err)
	}
	id, err := parseUserID(p.UserId)
	if err != nil {
		return UserUpserted{meta: m}, err
	}
	ev := UserUpserted{
		meta:          m,
		UserID:        id,
		Type:          UserType(p.Type),
		Status:        UserStatus(p.Status),
		PhoneNumber:   p.PhoneNumber,
		RegisteredVia: p.RegisteredVia,
		ReferrerURL:   p.ReferrerUrl,
		Version:       p.Version,
	}
	if err := checkAggregate(env, id); err != nil {
		return ev, err
	}
	if p.Version < 1 {
		return ev, badPayload("Version %d is not positive", p.Version)
	}
	if p.CompanyId != nil && *p.CompanyId != "" {
		c, err := uuid.Parse(*p.CompanyId)
		if err != nil {
			return ev, badPayload("CompanyId %q is not a GUID", *p.CompanyId)
		}
		s := c.String()
		ev.CompanyID = &s
	}
	if p.Name != nil {
		ev.Name = *p.Name
	}
	return ev, nil
}

// parseUserBlocked validates a user-blocked envelope.
func parseUserBlocked(env Envelope) (UserBlocked, error) {
	m, err := parseMeta(env)
	if err != nil {
		return UserBlocked{meta: m}, err
	}
	var p UserBlockedPayload
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return UserBlocked{meta: m}, badPayload("payload does not deserialise: %v", err)
	}
	id, err := parseUserID(p.UserId)
	if err != nil {
		return UserBlocked{meta: m}, err
	}
	ev := UserBlocked{meta: m, UserID: id, Reason: p.Reason, Version: p.Version}
	if err := checkAggregate(env, id); err != nil {
		return ev, err
	}
	if p.Version < 1 {
		return ev, badPayload("Version %d is not positive", p.Version)
	}
	return ev, nil
}

// outgoingMessageID derives the messageId of an event this package emits from
// what caused it, so the same bond always yields the same ids.
func outgoingMessageID(t MessageType, bond BondID) string {
	return uuid.NewSHA1(outgoingNamespace, []byte(string(t)+":"+string(bond))).String()
}

// bondCreatedEvent builds ReferralBondCreatedKafkaEvent for b, caused by the
// identity event m at time now.
func bondCreatedEvent(m meta, b Bond, channel string, now time.Time) ([]byte, error) {
	return outgoingEnvelope(m, TypeBondCreated, b, now, BondCreatedPayload{
		BondId:         string(b.ID),
		ReferredUserId: string(b.ReferredUserID),
		ReferrerUserId: string(b.ReferrerUserID),
		ReferralLinkId: string(b.ReferralLinkID),
		TenantId:       b.TenantID,
		BoundAt:        b.BoundAt,
		AppliedRule:    string(b.AppliedRule),
		Status:         string(b.Status),
		Channel:        channel,
	})
}

// outEnvelope is Envelope with its payload as a value, encoded in the same
// pass: an Envelope's json.RawMessage payload would be encoded first, then
// read again and compacted.
type outEnvelope[P any] struct {
	MessageID       string      `json:"messageId"`
	Type            MessageType `json:"type"`
	ContractVersion int         `json:"contractVersion"`
	AggregateID     string      `json:"aggregateId"`
	AggregateType   string      `json:"aggregateType"`
	OccurredAt      time.Time   `json:"occurredAt"`
	CorrelationID   string      `json:"correlationId,omitempty"`
	CausationID     string      `json:"causationId,omitempty"`
	Payload         P           `json:"payload"`
}

// outgoingEnvelope wraps the payload of an event about bond b, caused by the
// incoming message m, in the topic envelope.
func outgoingEnvelope[P any](m meta, typ MessageType, b Bond, now time.Time, payload P) ([]byte, error) {
	return json.Marshal(outEnvelope[P]{
		MessageID:       outgoingMessageID(typ, b.ID),
		Type:            typ,
		ContractVersion: ContractVersion,
		AggregateID:     string(b.ID),
		AggregateType:   aggregateBond,
		OccurredAt:      now,
		CorrelationID:   m.CorrelationID,
		CausationID:     m.MessageID,
		Payload:         payload,
	})
}

// leadAttachRequestedEvent builds ReferralLeadAttachRequestedKafkaEvent for b
// created through link l.
func leadAttachRequestedEvent(m meta, b Bond, l Link, now time.Time) ([]byte, error) {
	return outgoingEnvelope(m, TypeLeadAttachRequested, b, now, LeadAttachRequestedPayload{
		InvestorUserId: string(b.ReferredUserID),
		AgentUserId:    string(l.OwnerUserID),
		AgentCompanyId: l.TenantID,
		ReferralLinkId: string(l.ID),
		Channel:        l.Channel,
		AppliedRule:    string(b.AppliedRule),
		BondId:         string(b.ID),
		RequestedAt:    now,
	})
}
