package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"switchyard/bot/backend"
	"switchyard/bot/onboarding"
	"switchyard/openapi"
	"switchyard/openapi/openapitest"
	"switchyard/queue/queuetest"
	"switchyard/testwait"
)

// coverageClient calls one wired app's admin API with the admin token.
type coverageClient struct {
	t    *testing.T
	base string
	tok  string
}

// call sends a request (a body goes as JSON) and returns the answer.
func (c coverageClient) call(method, path, body string) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+openapi.AdminPrefix+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// must calls and fails the test unless the answer is want; the answer's
// JSON goes into out when out is not nil.
func (c coverageClient) must(method, path, body string, want int, out any) {
	c.t.Helper()
	status, raw := c.call(method, path, body)
	if status != want {
		c.t.Fatalf("%s %s %s: %d %s, want %d", method, path, body, status, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			c.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
}

// mustItems GETs a list and fails the test unless its array field holds
// items: an empty list validates no item's schema.
func (c coverageClient) mustItems(path, field string) {
	c.t.Helper()
	var list map[string]json.RawMessage
	c.must("GET", path, "", 200, &list)
	var items []json.RawMessage
	if err := json.Unmarshal(list[field], &items); err != nil || len(items) == 0 {
		c.t.Fatalf("GET %s: no %s to validate (%v)", path, field, err)
	}
}

// until calls until the answer is want (and ok, when given, accepts it),
// within a deadline that holds on a loaded machine. The clock is manual
// and stands still meanwhile: what the test waits for must not wait for
// it (a chat message that came before its business connection goes when
// the connection is applied; the sandbox bots keep no rate limits).
func (c coverageClient) until(what, method, path, body string, want int, ok func(raw []byte) bool) {
	c.t.Helper()
	testwait.Until(c.t, 30*time.Second, what, func() bool {
		status, raw := c.call(method, path, body)
		return status == want && (ok == nil || ok(raw))
	})
}

// documentedOperations are the operations doc describes, as "METHOD
// /path" (the keys of openapitest's counts): those under /admin/api, and
// the others.
func documentedOperations(doc *openapi3.T) (admin, others []string) {
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if strings.HasPrefix(path, openapi.AdminPrefix+"/") {
				admin = append(admin, method+" "+path)
			} else {
				others = append(others, method+" "+path)
			}
		}
	}
	slices.Sort(admin)
	slices.Sort(others)
	return admin, others
}

// TestEveryAdminOperationValidated drives every operation the served
// document describes under /admin/api, on one wired app with a manual clock
// and the sandbox, to its documented success: each exchange is validated
// against the document (newWiredApp), and the test fails naming every
// operation no successful exchange exercised — a new route needs a call
// here. /bot/* is exercised the same way by TestOpenAPIContract
// (bot_contract_test.go).
func TestEveryAdminOperationValidated(t *testing.T) {
	t.Parallel()
	w := newWiredApp(t, walkSecrets, nil, "--log-level", "warn", "--clock", "manual", "--clock-start", "2026-01-15T12:00:00Z")
	c := coverageClient{t: t, base: w.srv.URL, tok: w.sec.AdminToken}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the app's log:\n%s", w.logs)
		}
	})
	const (
		topic    = "pin.identity.users.v1"
		refGroup = "referral-identity-users"
		leaderTG = "5591001"
		chatTG   = "5591002"
		ownerTG  = "5591003"
		owner    = "aaaaaaaa-9999-4999-8999-999999999991"
		referred = "cccccccc-9999-4999-8999-999999999992"
	)

	// The clock and the sandbox.
	c.must("GET", "/clock", "", 200, nil)
	c.must("POST", "/clock/advance", `{"by":"1s"}`, 200, nil)
	c.must("GET", "/sandbox", "", 200, nil)

	// The made-up backend's users, before the workers run: the events they
	// emit stay unprocessed, so one can be redriven.
	var leader struct {
		UID int64 `json:"uid"`
	}
	c.must("POST", "/users", `{"link":"cover-leader","name":"Cora Leader"}`, 201, &leader)
	var member struct {
		UID int64 `json:"uid"`
	}
	c.must("POST", "/users", `{"link":"cover-member","name":"Max Member"}`, 201, &member)
	uid := fmt.Sprint("/users/", member.UID)
	c.must("GET", uid, "", 200, nil)
	c.must("POST", uid+"/register", fmt.Sprintf(`{"leaderUid":%d}`, leader.UID), 200, nil)
	c.must("POST", uid+"/wallet", `{"addr":"EQ0000000000000000000000000000000000000000000cover"}`, 200, nil)
	c.must("POST", uid+"/nft", `{"level":"lp1"}`, 200, nil)
	c.must("GET", uid+"/notifications", "", 200, nil)
	var ev struct {
		ID int64 `json:"id"`
	}
	c.must("POST", "/bot/events", `{"eventType":"wallet_connected","telegramId":"`+leaderTG+`","payload":{"addr":"EQ00000000000000000000000000000000000000000000c0v"}}`, 201, &ev)
	c.mustItems("/bot/events?limit=10", "events")
	c.must("GET", fmt.Sprint("/bot/events/", ev.ID), "", 200, nil)
	c.must("POST", fmt.Sprint("/bot/events/", ev.ID, "/redrive"), "", 200, nil)

	runWorkers(t, w.app)

	// A Telegram user starts the onboarding bot with the leader's code,
	// writes to it, presses its button, blocks it and unblocks it.
	c.must("POST", "/sandbox/users/"+leaderTG+"/start", `{"payload":"cover-leader","firstName":"Lena"}`, 200, nil)
	c.until("the user's funnel", "GET", "/bot/funnel/"+leaderTG, "", 200, nil)
	c.mustItems("/bot/funnel?limit=10", "funnels")
	c.until("the leader's notification of the new partner", "GET", fmt.Sprint("/users/", leader.UID, "/notifications"), "", 200, func(raw []byte) bool {
		var r struct{ Notifications []json.RawMessage }
		return json.Unmarshal(raw, &r) == nil && len(r.Notifications) > 0
	})
	c.until("the greeting's button pressed", "POST", "/sandbox/users/"+leaderTG+"/press", `{"data":"intro"}`, 200, nil)
	c.must("POST", "/sandbox/users/"+leaderTG+"/messages", `{"text":"Hello, bot"}`, 200, nil)
	c.must("POST", "/sandbox/users/"+leaderTG+"/block", `{}`, 204, nil)
	c.must("POST", "/sandbox/users/"+leaderTG+"/unblock", `{"bot":"onboarding"}`, 204, nil)

	// A direct message that died, and its redrive (DM dead letters are
	// seeded: reaching one by sending takes the retries' backoff).
	ctx := context.Background()
	dmBody := func(i int) []byte {
		return fmt.Appendf(nil, `{"key":"cover:%d","method":"sendMessage","chatId":"%s","params":{"text":"Cover %d"},"phase":"telegram"}`, i, leaderTG, i)
	}
	dms, err := queuetest.SeedDead(ctx, w.db, queuetest.DeadOpts{Queue: onboarding.DMQueue, N: 5, Body: dmBody})
	if err != nil {
		t.Fatal(err)
	}
	c.mustItems("/bot/dms?status=failed&limit=50", "dms")
	// Paused, the DM queue keeps what is redriven live to be listed: its
	// workers would send it at once (the sandbox keeps no rate limits on a
	// manual clock).
	q := "/queues/" + onboarding.DMQueue
	c.must("POST", q+"/pause", `{"reason":"coverage"}`, 200, nil)
	c.must("POST", "/bot/dms/"+dms[0]+"/redrive", "", 200, nil)

	// The queue of those DMs, through the queue API.
	c.mustItems("/queues", "queues")
	c.mustItems(q+"/messages?limit=10", "messages")
	c.must("GET", q+"/messages/"+dms[0]+"/attempts", "", 200, nil)
	c.mustItems(q+"/dlq?limit=10", "messages")
	c.must("GET", q+"/dlq/"+dms[1], "", 200, nil)
	c.must("POST", q+"/dlq/"+dms[1]+"/redrive", "", 200, nil)
	c.must("POST", q+"/dlq/redrive", `{"ids":["`+dms[2]+`"]}`, 200, nil)
	c.must("POST", q+"/dlq/purge", `{"ids":["`+dms[3]+`","`+dms[4]+`"]}`, 200, nil)
	// Paused (again: a pause is idempotent), the queue's workers take
	// nothing while its messages go.
	c.must("POST", q+"/pause", `{"reason":"coverage"}`, 200, nil)
	c.must("POST", q+"/purge", "", 200, nil)
	c.must("POST", q+"/resume", "", 200, nil)

	// A customer writes to a business account: a chat thread, which an
	// operator reads, answers and closes.
	c.must("POST", "/sandbox/business-connections", `{"ownerId":`+ownerTG+`,"firstName":"Olga"}`, 201, nil)
	// The customer writes once the chat platform has the connection: a
	// message taken before it waits for it. While it waits the clock moves
	// half a second a look: on PostgreSQL the connection itself was, rarely,
	// not applied until the clock moved (not explained yet; see the issue's
	// closing note), and this test is about the routes, not that.
	testwait.Until(t, 30*time.Second, "the business connection applied", func() bool {
		if w.count(t, `select count(*) from omni_business_connections`) == 1 {
			return true
		}
		c.must("POST", "/clock/advance", `{"by":"500ms"}`, 200, nil)
		return false
	})
	c.must("GET", "/omni/rules/auto-ack", "", 200, nil)
	c.must("PUT", "/omni/rules/auto-ack", `{"enabled":true,"text":"Thanks, we will answer soon."}`, 200, nil)
	c.must("POST", "/sandbox/users/"+chatTG+"/business-message", `{"text":"Is the shop open today?","firstName":"Carl"}`, 200, nil)
	var thread int64
	c.until("the chat thread", "GET", "/omni/threads?limit=10", "", 200, func(raw []byte) bool {
		var r struct {
			Threads []struct {
				ID      int64
				Contact struct{ ProviderUserID string }
			}
		}
		if json.Unmarshal(raw, &r) != nil {
			return false
		}
		for _, th := range r.Threads {
			if th.Contact.ProviderUserID == chatTG {
				thread = th.ID
				return true
			}
		}
		return false
	})
	th := fmt.Sprint("/omni/threads/", thread)
	var msgs struct {
		Messages []struct {
			ID int64 `json:"id"`
		} `json:"messages"`
	}
	c.must("GET", th+"/messages", "", 200, &msgs)
	if len(msgs.Messages) == 0 {
		t.Fatal("the thread has no messages")
	}
	c.must("GET", fmt.Sprint("/omni/messages/", msgs.Messages[0].ID), "", 200, nil)
	c.must("POST", th+"/messages", `{"text":"Yes, until 20:00."}`, 202, nil)
	c.must("POST", th+"/read", "", 204, nil)
	c.must("POST", th+"/close", "", 204, nil)

	// Referral: the owner's identity record, a link, a user referred through
	// it; a record without a user id dead-letters in the referral's group.
	c.mustItems("/topics", "topics")
	c.must("POST", "/topics/"+topic+"/messages", identityUpserted(owner, "Agent", "Olga", "+79990001234", ""), 202, nil)
	c.until("the owner's replica", "GET", "/referral/replicas/"+owner, "", 200, nil)
	var link struct {
		ID string `json:"id"`
	}
	c.must("POST", "/referral/links", `{"url":"cover-olga","ownerUserId":"`+owner+`","tenantId":"bbbbbbbb-2222-4222-8222-222222222222","channel":"web"}`, 201, &link)
	c.must("POST", "/topics/"+topic+"/messages", identityUpserted(referred, "Investor", "Ivan", "+79990005678", "cover-olga"), 202, nil)
	c.until("the referred user's bond", "GET", "/referral/users/"+referred+"/referrer", "", 200, func(raw []byte) bool {
		var r struct{ HasReferrer bool }
		return json.Unmarshal(raw, &r) == nil && r.HasReferrer
	})
	c.mustItems("/referral/links?limit=10", "links")
	c.mustItems("/referral/bonds?referredUserId="+referred, "bonds")
	c.mustItems("/referral/registrations?referredUserId="+referred, "registrations")
	c.must("DELETE", "/referral/links/"+link.ID, "", 204, nil)

	var bad struct {
		Partition int   `json:"partition"`
		Offset    int64 `json:"offset"`
	}
	c.must("POST", "/topics/"+topic+"/messages",
		`{"messageId":"6f1c1a52-0000-4000-8000-00000000c0fe","type":"pin.identity.user-upserted","aggregateId":"dddddddd-9999-4999-8999-999999999993","payload":{"UserId":"","PhoneNumber":"+79993332211"}}`,
		202, &bad)
	g := "/topics/" + topic + "/groups/" + refGroup
	var dead struct {
		Messages []struct {
			ID string `json:"id"`
		} `json:"messages"`
	}
	c.until("the bad record's dead letter", "GET", g+"/dlq?limit=10", "", 200, func(raw []byte) bool {
		return json.Unmarshal(raw, &dead) == nil && len(dead.Messages) > 0
	})
	c.must("GET", g+"/dlq/"+dead.Messages[0].ID, "", 200, nil)
	c.must("GET", fmt.Sprint(g, "/records/", bad.Partition, "/", bad.Offset, "/attempts"), "", 200, nil)
	c.mustItems("/topics/"+topic+"/messages?limit=10", "messages")
	c.mustItems("/topics/"+topic+"/groups", "groups")

	// An operator's own consumer group: created, paused, resumed, its dead
	// letters redriven and purged, deleted. No subscriber holds it, so its
	// dead letters (seeded) stay where the operator put them.
	og := "/topics/" + topic + "/groups/cover-operator"
	c.must("POST", "/topics/"+topic+"/groups", `{"group":"cover-operator","start":"earliest"}`, 201, nil)
	recs, err := queuetest.SeedDead(ctx, w.db, queuetest.DeadOpts{Queue: topic, Group: "cover-operator", N: 4})
	if err != nil {
		t.Fatal(err)
	}
	c.must("POST", og+"/pause", `{"reason":"coverage"}`, 200, nil)
	c.must("POST", og+"/resume", "", 200, nil)
	c.must("POST", og+"/dlq/"+recs[0]+"/redrive", "", 200, nil)
	c.must("POST", og+"/dlq/redrive", `{"ids":["`+recs[1]+`"]}`, 200, nil)
	c.must("POST", og+"/dlq/purge", "", 200, nil)
	c.must("DELETE", og, "", 204, nil)

	// Outside /admin/api the document describes the bot contract, which
	// TestOpenAPIContract drives to every documented answer: its operations
	// are those tagged "bot" of backend.OpenAPI(), so the served document
	// must have no other.
	ops, others := documentedOperations(w.openapi.Doc)
	if len(ops) == 0 {
		t.Fatal("the served document describes no operation under /admin/api")
	}
	contract := openapitest.Of(t, apiDocument([]openapi.Part{backend.OpenAPI()}, nil)).Doc
	for _, op := range others {
		method, path, _ := strings.Cut(op, " ")
		item := contract.Paths.Value(path)
		if item == nil || item.GetOperation(method) == nil || !slices.Contains(item.GetOperation(method).Tags, "bot") {
			t.Errorf("%s is served outside /admin/api but is no operation of the bot contract TestOpenAPIContract drives: "+
				"drive it here or there", op)
		}
	}

	succeeded := w.openapi.Succeeded()
	var missing []string
	for _, op := range ops {
		if succeeded[op] == 0 {
			missing = append(missing, op)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%d of the %d documented admin operations had no validated successful (2xx) exchange; "+
			"drive each here:\n  %s", len(missing), len(ops), strings.Join(missing, "\n  "))
	}
	t.Logf("%d documented admin operations, each answered 2xx and validated", len(ops))
}
