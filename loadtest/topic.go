package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// IdentityTopic is the topic identity events are published to.
const IdentityTopic = "pin.identity.users.v1"

// topicGen publishes pin.identity.user-upserted events as TopicPlan says,
// so the referral consumer writes replicas and bonds.
type topicGen struct {
	api    *client
	runID  int64
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

// Link is one of a run's referral links, each with its own owner (an
// Agent).
type Link int

// The links of a run.
const (
	LinkNone   Link = iota // no ReferrerUrl
	LinkFirst              // the link a new user registers through
	LinkSecond             // the link a follow-up snapshot names
)

var links = []Link{LinkFirst, LinkSecond}

// LinkOwner is the owner of a run's link. No request has a number below 1,
// so the owners are nobody's users.
func LinkOwner(runID int64, l Link) string { return UserID(runID, -int64(l)) }

func (l Link) slug(runID int64) string { return fmt.Sprintf("lt-%d-%d", runID, l) }

// followUpGap is how many requests after a new user its follow-up is
// published: far enough that at a modest rate the first is usually
// acknowledged before the second is sent, which is when their order is a
// promise.
const followUpGap = 32

// TopicRequest is what one request of the topic path publishes.
type TopicRequest struct {
	User    string
	Version int64
	// Link is the link the snapshot registers through.
	Link Link
	// Follows is the request whose user this snapshot updates, 0 when the
	// user is new.
	Follows int64
}

// TopicPlan is request n of a run of the topic path. Three requests in
// four bring a new user (Version 1); half of all requests (n even) name the
// run's first link. The fourth (n%4 == 3) is the Version 2 snapshot of the
// user of request n-3-followUpGap, which named the first link, now naming
// the second one: the user is then no longer first-seen, so the consumer
// keeps the bond through the first link — unless it handled the two out of
// order, when the bond is through the second. Before there is such a
// request, the fourth is a new user without a link.
func TopicPlan(runID, n int64) TopicRequest {
	if m := n - 3 - followUpGap; n%4 == 3 && m >= 1 {
		return TopicRequest{User: UserID(runID, m), Version: 2, Link: LinkSecond, Follows: m}
	}
	r := TopicRequest{User: UserID(runID, n), Version: 1}
	if n%2 == 0 {
		r.Link = LinkFirst
	}
	return r
}

func newTopicGen(api *client, opts Opts) *topicGen {
	return &topicGen{api: api, runID: opts.RunID, probes: make(chan probe, 1)}
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

// prepare publishes the links' owners and creates the links.
func (g *topicGen) prepare(ctx context.Context) error {
	for _, l := range links {
		owner := LinkOwner(g.runID, l)
		if err := g.publish(ctx, UpsertEvent(MessageID(g.runID, -int64(l)), owner, "Agent", "", 1, time.Now())); err != nil {
			return err
		}
		err := g.api.adminDo(ctx, http.MethodPost, "/admin/api/referral/links", map[string]any{
			"url": l.slug(g.runID), "ownerUserId": owner, "tenantId": uuid.NewSHA1(loadtestNS, []byte("tenant")).String(), "channel": "loadtest",
		}, nil)
		if err != nil {
			return err
		}
	}
	return nil
}

func (g *topicGen) publish(ctx context.Context, ev map[string]any) error {
	return g.api.adminDo(ctx, http.MethodPost, "/admin/api/topics/"+IdentityTopic+"/messages", ev, nil)
}

// event is request n's identity event and the item it becomes once
// accepted.
func (g *topicGen) event(n int64) (map[string]any, Item) {
	r, msg := TopicPlan(g.runID, n), MessageID(g.runID, n)
	referrer := ""
	if r.Link != LinkNone {
		referrer = r.Link.slug(g.runID)
	}
	return UpsertEvent(msg, r.User, "Investor", referrer, r.Version, time.Now()),
		Item{Path: PathTopic, Key: msg, Subject: r.User, Seq: n}
}

// probe times every 50th accepted request from its acknowledgement until
// its replica is visible, one at a time.
func (g *topicGen) probe(it Item) {
	if it.Seq%50 != 0 {
		return
	}
	select {
	case g.probes <- probe{user: it.Subject, accepted: time.Now()}:
	default: // a probe is still being timed
	}
}

func (g *topicGen) send(ctx context.Context, n int64) (Item, error) {
	ev, it := g.event(n)
	if err := g.publish(ctx, ev); err != nil {
		return Item{}, err
	}
	g.probe(it)
	return it, nil
}

// sendBatch publishes requests first … first+count-1 as one JSON-lines
// batch: one transaction, the records of a user in request order.
func (g *topicGen) sendBatch(ctx context.Context, first int64, count int) ([]Item, error) {
	var body []byte
	items := make([]Item, count)
	for i := range count {
		ev, it := g.event(first + int64(i))
		line, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		body = append(append(body, line...), '\n')
		items[i] = it
	}
	var out struct {
		Records []struct{ Partition, Offset int64 } `json:"records"`
	}
	header := http.Header{"Authorization": {"Bearer " + g.api.admin}, "Content-Type": {"application/x-ndjson"}}
	if err := g.api.do(ctx, http.MethodPost, "/admin/api/topics/"+IdentityTopic+"/messages", header, body, &out); err != nil {
		return nil, err
	}
	if len(out.Records) != count {
		return nil, fmt.Errorf("a batch of %d records answered with %d positions", count, len(out.Records))
	}
	for _, it := range items {
		g.probe(it)
	}
	return items, nil
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
