package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// IdentityTopic is the topic identity events are published to, and
// referralGroup the referral consumer's group on it.
const (
	IdentityTopic = "pin.identity.users.v1"
	referralGroup = "referral-identity-users"
)

// topicGen publishes pin.identity.user-upserted events as TopicPlan says,
// so the referral consumer writes replicas and bonds.
type topicGen struct {
	api    *client
	runID  int64
	probes chan probe
	// users is Opts.TopicUsers: above zero, the run follows SoakTopicPlan,
	// and newest holds each user's newest version answered 202.
	users     int
	newest    []atomic.Int64
	published atomic.Int64

	probeClock
}

type probe struct {
	user     string
	version  int64
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

// SoakTopicPlan is request n of a soak's topic path over users identity
// users: user (n-1) mod users of the run, at its next version, (n-1)/users
// + 1, every snapshot through the run's first link. The first one the
// consumer applies bonds the user through the link; the later ones find it
// not first-seen and only update the replica. The key space is bounded: a
// replica, a bond and a registration per user, whatever the duration.
func SoakTopicPlan(runID, n int64, users int) TopicRequest {
	u := int64(users)
	r := TopicRequest{User: UserID(runID, (n-1)%u+1), Version: (n-1)/u + 1, Link: LinkFirst}
	if r.Version > 1 {
		r.Follows = n - u
	}
	return r
}

func newTopicGen(api *client, opts Opts) *topicGen {
	return &topicGen{api: api, runID: opts.RunID, probes: make(chan probe, 1), users: opts.TopicUsers, newest: make([]atomic.Int64, opts.TopicUsers)}
}

// plan is request n of this run.
func (g *topicGen) plan(n int64) TopicRequest {
	if g.users > 0 {
		return SoakTopicPlan(g.runID, n, g.users)
	}
	return TopicPlan(g.runID, n)
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
func (g *topicGen) event(n int64) (map[string]any, Item, TopicRequest) {
	r, msg := g.plan(n), MessageID(g.runID, n)
	referrer := ""
	if r.Link != LinkNone {
		referrer = r.Link.slug(g.runID)
	}
	return UpsertEvent(msg, r.User, "Investor", referrer, r.Version, time.Now()),
		Item{Path: PathTopic, Key: msg, Subject: r.User, Seq: n}, r
}

// accepted records that request n, r, was published: the soak's newest
// version per user, and every 50th one timed by a probe from its
// acknowledgement until its replica is visible, one at a time.
func (g *topicGen) accepted(n int64, r TopicRequest) {
	g.published.Add(1)
	if g.users > 0 {
		slot := &g.newest[(n-1)%int64(g.users)]
		for v := slot.Load(); v < r.Version && !slot.CompareAndSwap(v, r.Version); v = slot.Load() {
		}
	}
	if n%50 == 0 {
		select {
		case g.probes <- probe{user: r.User, version: r.Version, accepted: time.Now()}:
		default: // a probe is still being timed
		}
	}
}

func (g *topicGen) send(ctx context.Context, n int64) (Item, error) {
	ev, it, r := g.event(n)
	if err := g.publish(ctx, ev); err != nil {
		return Item{}, err
	}
	g.accepted(n, r)
	return it, nil
}

// sendBatch publishes requests first … first+count-1 as one JSON-lines
// batch: one transaction, the records of a user in request order.
func (g *topicGen) sendBatch(ctx context.Context, first int64, count int) ([]Item, error) {
	var body []byte
	items := make([]Item, count)
	reqs := make([]TopicRequest, count)
	for i := range count {
		ev, it, r := g.event(first + int64(i))
		line, err := json.Marshal(ev)
		if err != nil {
			return nil, err
		}
		body = append(append(body, line...), '\n')
		items[i], reqs[i] = it, r
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
	for i, it := range items {
		g.accepted(it.Seq, reqs[i])
	}
	return items, nil
}

// background times sampled publishes until their replica is visible, at
// their version or later, through the operators' API.
func (g *topicGen) background(ctx context.Context, rec *recorder) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-g.probes:
			g.setProbe(p.accepted)
			for ctx.Err() == nil {
				if v, ok, _ := g.replicaVersion(ctx, p.user); ok && v >= p.version {
					rec.handled(time.Since(p.accepted))
					break
				}
				sleep(ctx, 5*time.Millisecond)
			}
			g.setProbe(time.Time{})
		}
	}
}

// replicaVersion is a user's replica's version; ok is false when the user
// has no replica.
func (g *topicGen) replicaVersion(ctx context.Context, user string) (int64, bool, error) {
	var rep struct {
		ReplicaVersion int64 `json:"replicaVersion"`
	}
	ok, err := getStatus(ctx, g.api, "/admin/api/referral/replicas/"+user, &rep)
	return rep.ReplicaVersion, ok, err
}

// tally: with a soak's plan, each user published has its replica at the
// newest version answered 202, or later, and exactly one bond, through the
// run's first link; the referral group has no lag (see TopicTally). Without
// it (a new user per request) there is nothing bounded to count.
func (g *topicGen) tally(ctx context.Context, t *Tally) error {
	if g.users == 0 {
		return nil
	}
	lag, err := GroupLag(ctx, g.api, IdentityTopic, referralGroup)
	if err != nil {
		return err
	}
	var (
		mu sync.Mutex
		tt = TopicTally{Published: g.published.Load(), Lag: lag}
	)
	owner := LinkOwner(g.runID, LinkFirst)
	err = forEach(ctx, g.users, func(ctx context.Context, i int) error {
		newest := g.newest[i].Load()
		if newest == 0 {
			return nil
		}
		user := UserID(g.runID, int64(i)+1)
		v, ok, err := g.replicaVersion(ctx, user)
		if err != nil {
			return err
		}
		var bonds struct {
			Bonds []struct {
				ReferrerUserID string `json:"referrerUserId"`
			} `json:"bonds"`
		}
		if err := g.api.adminDo(ctx, http.MethodGet, "/admin/api/referral/bonds?referredUserId="+user, nil, &bonds); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		tt.Users++
		if ok && v >= newest {
			tt.Current++
		} else {
			tt.Behind++
		}
		switch {
		case len(bonds.Bonds) > 1:
			tt.Rebonded++
		case len(bonds.Bonds) == 1 && bonds.Bonds[0].ReferrerUserID == owner:
			tt.Bonded++
		default:
			tt.Unbonded++
		}
		return nil
	})
	if err != nil {
		return err
	}
	t.Topic = &tt
	return nil
}

// drained: the referral group has no lag on the identity topic.
func (g *topicGen) drained(ctx context.Context) bool {
	lag, err := GroupLag(ctx, g.api, IdentityTopic, referralGroup)
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
