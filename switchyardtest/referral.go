package switchyardtest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"switchyard/referral"
)

// The referral consumer's topics: it reads TopicIdentityUsers and writes
// the other two.
const (
	TopicIdentityUsers   = referral.TopicIdentityUsers
	TopicBonds           = referral.TopicBonds
	TopicLeadAttachments = referral.TopicLeadAttachments
	// ReferralGroup is the referral consumer's group on TopicIdentityUsers.
	ReferralGroup = referral.ConsumerGroup
)

// Envelope is an event on the topics, in the contract's shape.
type Envelope = referral.Envelope

// IdentityUser is one version of a user as the identity service publishes
// it (pin.identity.user-upserted).
type IdentityUser struct {
	UserID string // a GUID
	// Type is Investor, Agent or DeveloperManager (Investor when empty).
	Type string
	// Status is Active or Blocked (Active when empty).
	Status    string
	FirstName string
	LastName  string
	Phone     string
	// ReferrerURL is the referral link the user registered through ("" for
	// none).
	ReferrerURL string
	// Version orders the user's versions (1 when zero).
	Version int64
	// MessageID is the envelope's messageId: a new GUID when empty. The
	// same MessageID published twice is the same event (the consumer's
	// idempotency).
	MessageID string
}

// UpsertIdentityUser publishes u on the identity topic, as the identity
// service does, and returns the envelope it published.
func (a *App) UpsertIdentityUser(t T, u IdentityUser) Envelope {
	t.Helper()
	env, err := u.envelope(a.Now(t))
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	a.Publish(t, TopicIdentityUsers, env)
	return env
}

// envelope is u as the identity service's event at now.
func (u IdentityUser) envelope(now time.Time) (Envelope, error) {
	p := referral.UserUpsertedPayload{
		UserId: u.UserID, Type: cmp.Or(u.Type, "Investor"), Status: cmp.Or(u.Status, "Active"),
		Name:        &referral.FullName{FirstName: cmp.Or(u.FirstName, "Test"), LastName: cmp.Or(u.LastName, "User")},
		PhoneNumber: cmp.Or(u.Phone, "+79990000000"), RegisteredVia: "Sms", Version: cmp.Or(u.Version, 1),
	}
	if u.ReferrerURL != "" {
		ref := u.ReferrerURL
		p.ReferrerUrl = &ref
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return Envelope{}, err
	}
	id := u.MessageID
	if id == "" {
		id = uuid.NewString()
	}
	return Envelope{
		MessageID: id, Type: referral.TypeUserUpserted, ContractVersion: 1,
		AggregateID: u.UserID, AggregateType: "User", OccurredAt: now.UTC(),
		CorrelationID: "switchyardtest-" + fmt.Sprint(correlations.Add(1)), Payload: raw,
	}, nil
}

// correlations number the kit's correlation ids.
var correlations atomic.Int64

// Publish appends record (any JSON object; an Envelope for the referral
// topics) to topic, keyed by its aggregateId.
func (a *App) Publish(t T, topic string, record any) {
	t.Helper()
	a.Do(t, http.MethodPost, "/admin/api/topics/"+url.PathEscape(topic)+"/messages", record, nil)
}

// TopicRecord is a record of a topic's retained log.
type TopicRecord struct {
	Partition   int             `json:"partition"`
	Offset      int64           `json:"offset"`
	Key         string          `json:"key"`
	PublishedAt time.Time       `json:"publishedAt"`
	Value       json.RawMessage `json:"value"`
}

// Envelope decodes the record's value as an event envelope.
func (r TopicRecord) Envelope() (Envelope, error) {
	var env Envelope
	err := json.Unmarshal(r.Value, &env)
	return env, err
}

// TopicRecords is topic's retained log, as a consumer of it (a CRM reading
// the bonds) would read it.
func (a *App) TopicRecords(t T, topic string) []TopicRecord {
	t.Helper()
	var res struct {
		Messages []TopicRecord `json:"messages"`
	}
	a.Do(t, http.MethodGet, "/admin/api/topics/"+url.PathEscape(topic)+"/messages?limit=1000", nil, &res)
	return res.Messages
}

// Link is a referral link to create.
type Link struct {
	// URL is the link's slug (^[a-z0-9][a-z0-9-]{2,63}$): what an identity
	// event's ReferrerUrl names.
	URL         string `json:"url"`
	OwnerUserID string `json:"ownerUserId"`
	// TenantID is a GUID (DefaultTenant when empty).
	TenantID string `json:"tenantId"`
	// Channel is where the link is shared ("web" when empty).
	Channel string `json:"channel"`
}

// DefaultTenant is the tenant of a Link that names none.
const DefaultTenant = "00000000-0000-4000-8000-000000000001"

// CreateLink creates a referral link and returns its id.
func (a *App) CreateLink(t T, l Link) string {
	t.Helper()
	l.TenantID, l.Channel = cmp.Or(l.TenantID, DefaultTenant), cmp.Or(l.Channel, "web")
	var res struct {
		ID string `json:"id"`
	}
	a.Do(t, http.MethodPost, "/admin/api/referral/links", l, &res)
	return res.ID
}

// Referrer is who referred a user (get-my-referrer).
type Referrer struct {
	HasReferrer bool `json:"hasReferrer"`
	Referrer    *struct {
		UserID string  `json:"userId"`
		Name   *string `json:"name"`
	} `json:"referrer"`
}

func (a *App) referrer(ctx context.Context, userID string) (Referrer, error) {
	var r Referrer
	err := a.Get(ctx, "/admin/api/referral/users/"+url.PathEscape(userID)+"/referrer", &r)
	return r, err
}

// Referrer is who referred userID, as the referral consumer has it now.
func (a *App) Referrer(t T, userID string) Referrer {
	t.Helper()
	r, err := a.referrer(t.Context(), userID)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	return r
}

// BondCreated holds once userID is bonded to a referrer.
func BondCreated(userID string) Condition {
	return Condition{
		What: "a bond created for " + userID,
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			r, err := a.referrer(ctx, userID)
			if err != nil {
				return notFound(err)
			}
			return r.HasReferrer, fmt.Sprintf("hasReferrer %t", r.HasReferrer), nil
		},
	}
}

// ReplicaExists holds once the referral consumer's replica has userID at
// version or later.
func ReplicaExists(userID string, version int64) Condition {
	return Condition{
		What: fmt.Sprintf("the replica of %s at version %d", userID, version),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			var r struct {
				ReplicaVersion int64 `json:"replicaVersion"`
			}
			if err := a.Get(ctx, "/admin/api/referral/replicas/"+url.PathEscape(userID), &r); err != nil {
				return notFound(err)
			}
			return r.ReplicaVersion >= version, fmt.Sprintf("version %d", r.ReplicaVersion), nil
		},
	}
}

// Group is a topic's consumer group: how far behind it is and what waits.
type Group struct {
	Group string `json:"group"`
	// Lag is the records published and not yet committed by the group.
	Lag int64 `json:"lag"`
	// Retrying is the records waiting for a retry (the referral consumer's
	// event whose link owner is not known yet, among others).
	Retrying int64 `json:"retrying"`
	// Dead is the group's dead letters.
	Dead int64 `json:"dead"`
}

func (a *App) group(ctx context.Context, topic, group string) (Group, error) {
	var res struct {
		Groups []Group `json:"groups"`
	}
	if err := a.Get(ctx, "/admin/api/topics/"+url.PathEscape(topic)+"/groups", &res); err != nil {
		return Group{}, err
	}
	for _, g := range res.Groups {
		if g.Group == group {
			return g, nil
		}
	}
	return Group{}, &APIError{Method: http.MethodGet, Path: "/admin/api/topics/" + topic + "/groups", Status: http.StatusNotFound,
		Code: "not_found", Message: "no group " + group}
}

// GroupIs holds once topic's consumer group is as holds says, such as
// "every record consumed" (g.Lag == 0) or "one record waits for a retry"
// (g.Retrying == 1).
func GroupIs(topic, group, what string, holds func(g Group) bool) Condition {
	return Condition{
		What: fmt.Sprintf("group %s of %s: %s", group, topic, what),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			g, err := a.group(ctx, topic, group)
			if err != nil {
				return notFound(err)
			}
			return holds(g), fmt.Sprintf("lag %d, retrying %d, dead %d", g.Lag, g.Retrying, g.Dead), nil
		},
	}
}

// ReferralWaiting holds once n identity events wait for a retry in the
// referral consumer: a user whose referral link's owner is not known yet.
func ReferralWaiting(n int64) Condition {
	return GroupIs(TopicIdentityUsers, ReferralGroup, fmt.Sprintf("%d waiting for a retry", n), func(g Group) bool { return g.Retrying == n })
}
