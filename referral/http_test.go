package referral

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/queue"
	"switchyard/testwait"
)

// apiServer serves the referral and queue admin routes under /admin/api.
func apiServer(t *testing.T, h *harness) *httptest.Server {
	t.Helper()
	r := mux.NewRouter()
	api := r.PathPrefix("/admin/api").Subrouter()
	h.svc.AdminRoutes(api)
	queue.NewAdmin(queue.AdminOpts{DB: h.db}).AdminRoutes(api)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

// call sends a JSON request and decodes the JSON answer into a map.
func call(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: body %q is not JSON: %v", method, url, raw, err)
		}
	}
	return resp.StatusCode, out
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestAdminAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	srv := apiServer(t, h)
	api := srv.URL + "/admin/api"
	owner, user := newUser(), newUser()

	var linkID string
	t.Run("creates a link with the lower-cased slug", func(t *testing.T) {
		code, body := call(t, "POST", api+"/referral/links", map[string]any{"url": "Anna-Agent", "ownerUserId": owner, "tenantId": tenantOf(owner), "channel": "web"})
		if code != http.StatusCreated || body["id"] == "" {
			t.Fatalf("%d %v", code, body)
		}
		linkID = body["id"].(string)
		_, list := call(t, "GET", api+"/referral/links?ownerUserId="+string(owner), nil)
		links := list["links"].([]any)
		if len(links) != 1 || links[0].(map[string]any)["url"] != "anna-agent" {
			t.Fatalf("links = %v", list)
		}
	})
	t.Run("refuses a slug a live link holds, in any case", func(t *testing.T) {
		code, body := call(t, "POST", api+"/referral/links", map[string]any{"url": "ANNA-AGENT", "ownerUserId": owner, "tenantId": tenantOf(owner), "channel": "web"})
		if code != http.StatusConflict || errCode(body) != "slug_taken" {
			t.Fatalf("%d %v", code, body)
		}
	})
	t.Run("refuses bad links with 400", func(t *testing.T) {
		for _, b := range []any{
			map[string]any{"url": "a b", "ownerUserId": owner, "tenantId": tenantOf(owner), "channel": "web"},
			map[string]any{"url": "fine-slug", "ownerUserId": "x", "tenantId": tenantOf(owner), "channel": "web"},
			map[string]any{"url": "fine-slug", "ownerUserId": owner, "tenantId": "acme", "channel": "web"},
			map[string]any{"url": "fine-slug", "ownerUserId": owner, "tenantId": tenantOf(owner), "channel": " "},
			map[string]any{"url": "fine-slug", "ownerUserId": owner, "tenantId": tenantOf(owner), "channel": "web", "extra": 1},
			"{not json",
		} {
			if code, body := call(t, "POST", api+"/referral/links", b); code != http.StatusBadRequest || errCode(body) == "" {
				t.Fatalf("%v: %d %v", b, code, body)
			}
		}
		if n := h.count(`select count(*) from referral_links`); n != 1 {
			t.Fatalf("links = %d", n)
		}
	})
	t.Run("get-my-referrer says no referrer before the bond", func(t *testing.T) {
		code, body := call(t, "GET", api+"/referral/users/"+string(user)+"/referrer", nil)
		if code != http.StatusOK || body["hasReferrer"] != false || body["referrer"] != nil {
			t.Fatalf("%d %v", code, body)
		}
	})
	t.Run("an unknown replica is a 404 and a bad id a 400", func(t *testing.T) {
		if code, _ := call(t, "GET", api+"/referral/replicas/"+string(user), nil); code != http.StatusNotFound {
			t.Fatalf("%d", code)
		}
		if code, _ := call(t, "GET", api+"/referral/replicas/nope", nil); code != http.StatusBadRequest {
			t.Fatalf("%d", code)
		}
	})
	t.Run("events published through the topic API bind the user", func(t *testing.T) {
		for _, ev := range [][]byte{
			upsert(owner, 1).set("Type", "Agent").set("Name", map[string]any{"FirstName": "Anna", "LastName": "Agentova"}).json(),
			upsert(user, 1).referrer("anna-agent").json(),
		} {
			code, body := call(t, "POST", api+"/topics/"+TopicIdentityUsers+"/messages", ev)
			if code != http.StatusAccepted || body["partition"] == nil || body["offset"] == nil {
				t.Fatalf("publish: %d %v", code, body)
			}
		}
		var body map[string]any
		testwait.Until(t, 10*time.Second, "the referrer", func() bool {
			_, body = call(t, "GET", api+"/referral/users/"+string(user)+"/referrer", nil)
			return body["hasReferrer"] == true
		})
		ref := body["referrer"].(map[string]any)
		if ref["userId"] != string(owner) || ref["name"] != "Anna Agentova" {
			t.Fatalf("referrer = %v", body)
		}
	})
	t.Run("the replica, bond and journal read back in camelCase", func(t *testing.T) {
		code, rep := call(t, "GET", api+"/referral/replicas/"+string(user), nil)
		if code != http.StatusOK || rep["replicaVersion"] != 1.0 || rep["isNameFilled"] != true || rep["registeredAt"] == nil ||
			rep["status"] != "Active" || rep["type"] != "Investor" || rep["phoneNumber"] != "+79991234567" {
			t.Fatalf("%d %v", code, rep)
		}
		_, bonds := call(t, "GET", api+"/referral/bonds?referredUserId="+string(user), nil)
		bl := bonds["bonds"].([]any)
		if len(bl) != 1 || bl[0].(map[string]any)["referrerUserId"] != string(owner) || bl[0].(map[string]any)["appliedRule"] != "R1" ||
			bl[0].(map[string]any)["referralLinkId"] != linkID {
			t.Fatalf("bonds = %v", bonds)
		}
		_, regs := call(t, "GET", api+"/referral/registrations?referredUserId="+string(user), nil)
		rl := regs["registrations"].([]any)
		if len(rl) != 1 || rl[0].(map[string]any)["leadRequested"] != true || rl[0].(map[string]any)["registrationType"] != "Initial" ||
			rl[0].(map[string]any)["bondId"] != bl[0].(map[string]any)["id"] {
			t.Fatalf("registrations = %v", regs)
		}
		if code, _ := call(t, "GET", api+"/referral/bonds?referredUserId=x", nil); code != http.StatusBadRequest {
			t.Fatalf("bad filter: %d", code)
		}
	})
	t.Run("the outgoing topic reads back with the spec's PascalCase payload", func(t *testing.T) {
		code, body := call(t, "GET", api+"/topics/"+TopicBonds+"/messages", nil)
		msgs, _ := body["messages"].([]any)
		if code != http.StatusOK || len(msgs) != 1 {
			t.Fatalf("%d %v", code, body)
		}
		value := msgs[0].(map[string]any)["value"].(map[string]any)
		if value["payload"].(map[string]any)["ReferredUserId"] != string(user) || value["type"] != string(TypeBondCreated) {
			t.Fatalf("value = %v", value)
		}
	})
	t.Run("deleting a link is soft, repeatable, and stops new bindings", func(t *testing.T) {
		if code, _ := call(t, "DELETE", api+"/referral/links/"+linkID, nil); code != http.StatusNoContent {
			t.Fatalf("%d", code)
		}
		if code, _ := call(t, "DELETE", api+"/referral/links/"+linkID, nil); code != http.StatusNoContent {
			t.Fatalf("second delete: %d", code)
		}
		if code, body := call(t, "DELETE", api+"/referral/links/unknown", nil); code != http.StatusNotFound || errCode(body) != "not_found" {
			t.Fatalf("unknown: %d %v", code, body)
		}
		late := upsert(newUser(), 1).referrer("anna-agent")
		if code, _ := call(t, "POST", api+"/topics/"+TopicIdentityUsers+"/messages", late.json()); code != http.StatusAccepted {
			t.Fatalf("publish: %d", code)
		}
		h.waitIdle()
		if got := h.markOutcome(TypeUserUpserted, late.MessageID); got != OutcomeG1 {
			t.Fatalf("outcome = %q", got)
		}
		// The bond made through it stays, and its slug can be reused.
		_, bonds := call(t, "GET", api+"/referral/bonds?referrerUserId="+string(owner), nil)
		if len(bonds["bonds"].([]any)) != 1 {
			t.Fatalf("bonds = %v", bonds)
		}
		if code, _ := call(t, "POST", api+"/referral/links", map[string]any{"url": "anna-agent", "ownerUserId": owner, "tenantId": tenantOf(owner), "channel": "web"}); code != http.StatusCreated {
			t.Fatalf("reuse: %d", code)
		}
	})
}

func TestPublishFile(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := context.Background()
	a, b := newUser(), newUser()

	t.Run("publishes every line in order and counts blank lines", func(t *testing.T) {
		file := strings.Join([]string{string(upsert(a, 1).json()), "", string(upsert(a, 2).json()), string(upsert(b, 1).json()), ""}, "\n")
		var progress bytes.Buffer
		sum, err := PublishFile(ctx, h.db, TopicIdentityUsers, strings.NewReader(file), &progress)
		if err != nil || sum.Published != 3 || sum.Blank != 1 {
			t.Fatalf("summary %+v, %v", sum, err)
		}
		if !strings.Contains(progress.String(), "3 published") {
			t.Fatalf("progress %q", progress.String())
		}
		h.waitIdle()
		if r := h.replica(a); r == nil || r.ReplicaVersion != 2 || h.replica(b) == nil {
			t.Fatalf("replicas %+v %+v", r, h.replica(b))
		}
	})
	t.Run("stops at a line without aggregateId after committing the lines before it", func(t *testing.T) {
		c := newUser()
		file := string(upsert(c, 1).json()) + "\n" + `{"messageId":"x"}` + "\n" + string(upsert(c, 2).json()) + "\n"
		sum, err := PublishFile(ctx, h.db, TopicIdentityUsers, strings.NewReader(file), nil)
		if err == nil || !strings.Contains(err.Error(), "line 2") || sum.Published != 1 {
			t.Fatalf("summary %+v, %v", sum, err)
		}
	})
	t.Run("refuses an undeclared topic", func(t *testing.T) {
		if _, err := PublishFile(ctx, h.db, "no.such.topic", strings.NewReader("{}"), nil); err == nil {
			t.Fatal("no error")
		}
	})
}
