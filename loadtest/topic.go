package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// IdentityTopic is the topic identity events are published to.
const IdentityTopic = "pin.identity.users.v1"

// topicGen publishes pin.identity.user-upserted events, half of them with a
// referrer link, so the referral consumer writes replicas and bonds.
type topicGen struct {
	api    *client
	runID  int64
	owner  string
	slug   string
	probes chan probe
}

type probe struct {
	user     string
	accepted time.Time
}

var loadtestNS = uuid.MustParse("2b0c4e52-7c2f-4c44-9c55-6a1f3c0d8e11")

// UserID is the identity UserId of load-test user n of a run.
func UserID(runID, n int64) string {
	return uuid.NewSHA1(loadtestNS, []byte(fmt.Sprintf("user/%d/%d", runID, n))).String()
}

// MessageID is the messageId of event n of a run.
func MessageID(runID, n int64) string {
	return uuid.NewSHA1(loadtestNS, []byte(fmt.Sprintf("message/%d/%d", runID, n))).String()
}

func newTopicGen(api *client, opts Opts) *topicGen {
	return &topicGen{
		api: api, runID: opts.RunID,
		owner:  UserID(opts.RunID, 0),
		slug:   fmt.Sprintf("lt-%d", opts.RunID),
		probes: make(chan probe, 1),
	}
}

// UpsertEvent is a pin.identity.user-upserted message as identity publishes it.
func UpsertEvent(messageID, userID, userType, referrer string, version int64, at time.Time) map[string]any {
	payload := map[string]any{
		"UserId": userID, "Type": userType, "CompanyId": nil, "Status": "Active",
		"Name":          map[string]any{"FirstName": "Иван", "LastName": "Петров", "MiddleName": ""},
		"PhoneNumber":   "+7999" + fmt.Sprintf("%07d", version*7919%10_000_000),
		"RegisteredVia": "Sms", "ReferrerUrl": nil, "Version": version,
	}
	if referrer != "" {
		payload["ReferrerUrl"] = referrer
	}
	return map[string]any{
		"messageId": messageID, "type": "pin.identity.user-upserted", "contractVersion": 1,
		"aggregateId": userID, "aggregateType": "User", "occurredAt": at.UTC().Format(time.RFC3339Nano),
		"correlationId": "loadtest-" + messageID, "payload": payload,
	}
}

// prepare publishes the link owner and creates the link half the users use.
func (g *topicGen) prepare(ctx context.Context) error {
	if err := g.publish(ctx, UpsertEvent(MessageID(g.runID, 0), g.owner, "Agent", "", 1, time.Now())); err != nil {
		return err
	}
	return g.api.adminDo(ctx, http.MethodPost, "/admin/api/referral/links", map[string]any{
		"url": g.slug, "ownerUserId": g.owner, "tenantId": uuid.NewSHA1(loadtestNS, []byte("tenant")).String(), "channel": "loadtest",
	}, nil)
}

func (g *topicGen) publish(ctx context.Context, ev map[string]any) error {
	return g.api.adminDo(ctx, http.MethodPost, "/admin/api/topics/"+IdentityTopic+"/messages", ev, nil)
}

func (g *topicGen) send(ctx context.Context, n int64) (Item, error) {
	user, msg := UserID(g.runID, n), MessageID(g.runID, n)
	referrer := ""
	if n%2 == 0 {
		referrer = g.slug
	}
	if err := g.publish(ctx, UpsertEvent(msg, user, "Investor", referrer, 1, time.Now())); err != nil {
		return Item{}, err
	}
	if n%50 == 0 {
		select {
		case g.probes <- probe{user: user, accepted: time.Now()}:
		default: // a probe is still being timed
		}
	}
	return Item{Path: PathTopic, Key: msg, Subject: user, Seq: n}, nil
}

// background times sampled publishes until their replica is visible
// through the operators' API.
func (g *topicGen) background(ctx context.Context, rec *recorder) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-g.probes:
			for ctx.Err() == nil {
				if g.api.adminDo(ctx, http.MethodGet, "/admin/api/referral/replicas/"+p.user, nil, nil) == nil {
					rec.handled(time.Since(p.accepted))
					break
				}
				sleep(ctx, 5*time.Millisecond)
			}
		}
	}
}

// drained: the referral group has no lag on the identity topic.
func (g *topicGen) drained(ctx context.Context) bool {
	lag, err := GroupLag(ctx, g.api, IdentityTopic, "referral-identity-users")
	return err == nil && lag == 0
}

// GroupLag is a consumer group's total lag on a topic.
func GroupLag(ctx context.Context, api *client, topic, group string) (int64, error) {
	var out struct {
		Topics []struct {
			Name   string `json:"name"`
			Groups []struct {
				Group string `json:"group"`
				Lag   int64  `json:"lag"`
			} `json:"groups"`
		} `json:"topics"`
	}
	if err := api.adminDo(ctx, http.MethodGet, "/admin/api/topics", nil, &out); err != nil {
		return 0, err
	}
	for _, t := range out.Topics {
		if t.Name != topic {
			continue
		}
		for _, g := range t.Groups {
			if g.Group == group {
				return g.Lag, nil
			}
		}
	}
	return 0, fmt.Errorf("group %s not found on %s", group, topic)
}
