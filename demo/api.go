package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"

	"switchyard/referral"
)

// The answers and requests of the instance's API, as the simulator reads and
// writes them: only the fields it needs.

type userAnswer struct {
	UID  int64  `json:"uid"`
	Link string `json:"link"`
	Name string `json:"name"`
}

type newUser struct {
	Link       string `json:"link"`
	Name       string `json:"name"`
	TelegramID string `json:"telegramId,omitempty"`
}

type leaderAnswer struct {
	UID  int64  `json:"uid"`
	Link string `json:"link"`
	Name string `json:"name"`
}

type connectLinkAnswer struct {
	StartParam string `json:"startParam"`
}

type notificationsAnswer struct {
	Notifications []struct {
		Text string `json:"text"`
	} `json:"notifications"`
}

type funnelAnswer struct {
	Funnel struct {
		Stage     int    `json:"stage"`
		BindState string `json:"bindState"`
	} `json:"funnel"`
}

type bondsAnswer struct {
	Bonds []struct {
		ReferrerUserID string `json:"referrerUserId"`
		Status         string `json:"status"`
	} `json:"bonds"`
}

type replicaAnswer struct {
	ReplicaVersion int64 `json:"replicaVersion"`
}

type topicsAnswer struct {
	Topics []struct {
		Name   string `json:"name"`
		Groups []struct {
			Group string `json:"group"`
			Lag   int64  `json:"lag"`
			Dead  int64  `json:"dead"`
		} `json:"groups"`
	} `json:"topics"`
}

type threadsAnswer struct {
	Threads []thread `json:"threads"`
}

type thread struct {
	ID                   int64  `json:"id"`
	BusinessConnectionID string `json:"businessConnectionId"`
	Unread               int    `json:"unread"`
	Contact              struct {
		ProviderUserID string `json:"providerUserId"`
	} `json:"contact"`
}

type omniMessage struct {
	ID                int64   `json:"id"`
	Direction         string  `json:"direction"`
	Origin            string  `json:"origin"`
	Text              string  `json:"text"`
	Status            string  `json:"status"`
	ProviderMessageID *string `json:"providerMessageId"`
	FailureReason     string  `json:"failureReason"`
}

type messagesAnswer struct {
	Messages []omniMessage `json:"messages"`
}

type replyAnswer struct {
	MessageID int64 `json:"messageId"`
}

// identityTopic is the identity service's topic the referral consumers read.
const identityTopic = "pin.identity.users.v1"

// referralGroup is the referral consumers' group on identityTopic.
const referralGroup = "referral-identity-users"

// identity is one version of an identity user's snapshot, as the identity
// service publishes it.
type identity struct {
	MessageID string
	UserID    string
	Type      string // Investor, Agent, DeveloperManager
	Status    string // Active, Blocked
	First     string
	Last      string
	Phone     string
	Referrer  string // the ReferrerUrl slug; "" for none
	Version   int64
	At        time.Time
}

// envelope renders the event in the contract's shape.
func (id identity) envelope() (referral.Envelope, error) {
	p := referral.UserUpsertedPayload{
		UserId: id.UserID, Type: id.Type, Status: id.Status,
		Name:        &referral.FullName{FirstName: id.First, LastName: id.Last},
		PhoneNumber: id.Phone, RegisteredVia: "Sms", Version: id.Version,
	}
	if id.Referrer != "" {
		ref := id.Referrer
		p.ReferrerUrl = &ref
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return referral.Envelope{}, err
	}
	return referral.Envelope{
		MessageID: id.MessageID, Type: referral.TypeUserUpserted, ContractVersion: 1,
		AggregateID: id.UserID, AggregateType: "User", OccurredAt: id.At.UTC(),
		CorrelationID: "demo-" + id.MessageID[:8], Payload: raw,
	}, nil
}

// publish appends the event to the identity topic (202: committed).
func (c *client) publish(ctx context.Context, id identity) error {
	env, err := id.envelope()
	if err != nil {
		return err
	}
	return c.admin(ctx, http.MethodPost, "/topics/"+identityTopic+"/messages", env, nil)
}

// resolveLeader finds a leader's account by referral code, as the bot does.
func (c *client) resolveLeader(ctx context.Context, code string) (leaderAnswer, error) {
	var l leaderAnswer
	err := c.bot(ctx, http.MethodGet, "/bot/leader/resolve?code="+url.QueryEscape(code), nil, &l)
	return l, err
}

// ensureUser creates a backend account, or finds the one that already has
// the link (a seed run before, or racing).
func (c *client) ensureUser(ctx context.Context, nu newUser) (int64, error) {
	var u userAnswer
	err := c.admin(ctx, http.MethodPost, "/users", nu, &u)
	if err == nil {
		return u.UID, nil
	}
	if codeOf(err) != "link_taken" {
		return 0, err
	}
	l, rerr := c.resolveLeader(ctx, nu.Link)
	if rerr != nil {
		return 0, fmt.Errorf("%w; and resolving it: %w", err, rerr)
	}
	return l.UID, nil
}

// demoNamespace derives the stable ids of seeded identity users.
var demoNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("switchyard.demo"))

// stableID is a GUID that is the same in every run for name.
func stableID(name string) string { return uuid.NewSHA1(demoNamespace, []byte(name)).String() }
