package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram/fakebot"
)

// instance is a stand-in for Switchyard's admin API that answers the
// checks' questions with canned JSON, so each test can show an invariant
// breaking.
type instance struct {
	answers map[string]any // "GET /admin/api/…?…" → body
}

func (in *instance) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.Path
	if r.URL.RawQuery != "" {
		key += "?" + r.URL.RawQuery
	}
	body, ok := in.answers[key]
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"` + key + `"}}`))
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

const (
	testOnboardingBot = 7000000001
	testInboxBot      = 7000000002
)

// newTestSim is a simulator whose checks ask in and whose Telegram users live
// in a fake Bot API reachable over HTTP (so tests can make the bots send).
func newTestSim(t *testing.T, in *instance) (*sim, *fakebot.Server, string) {
	t.Helper()
	api := httptest.NewServer(in)
	t.Cleanup(api.Close)
	fake := fakebot.New(fakebot.Opts{})
	t.Cleanup(fake.Close)
	tg := httptest.NewServer(fake)
	t.Cleanup(tg.Close)
	opts, err := Opts{
		BaseURL: api.URL, AdminToken: "admin", BotSecret: "bot", Sandbox: fake,
		OnboardingToken: fakebot.Token(testOnboardingBot), OmniToken: fakebot.Token(testInboxBot),
	}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newSim(opts, Cast{}), fake, tg.URL
}

// send makes a bot send text to a chat through the Bot API, as the instance
// would.
func send(t *testing.T, tgURL string, botID int64, params map[string]any) {
	t.Helper()
	b, _ := json.Marshal(params)
	resp, err := http.Post(tgURL+"/bot"+fakebot.Token(botID)+"/sendMessage", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("sendMessage answered %d", resp.StatusCode)
	}
}

func TestCheckInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pid := func(s string) *string { return &s }

	t.Run("a thread that holds every message once, with every reply final, holds", func(t *testing.T) {
		t.Parallel()
		in := &instance{answers: map[string]any{}}
		s, fake, tgURL := newTestSim(t, in)
		cust := &customer{key: custKey{id: 501}, first: "Анна", thread: 7}
		m, err := fake.Bot(fakebot.Token(testInboxBot)).Send(cust.user(), "Здравствуйте")
		if err != nil {
			t.Fatal(err)
		}
		send(t, tgURL, testInboxBot, map[string]any{"chat_id": 501, "text": "Ответ №1"})
		in.answers["GET /admin/api/omni/threads/7/messages?limit=1000"] = messagesAnswer{Messages: []omniMessage{
			{ID: 1, Direction: "inbound", Status: "received", ProviderMessageID: pid("1")},
			{ID: 2, Direction: "outbound", Status: "sent", Text: "Ответ №1"},
		}}
		if m.MessageID != 1 {
			t.Fatalf("the fake numbered the first message %d", m.MessageID)
		}
		s.led.customers[cust.key] = cust
		s.led.msgs = []*customerMsg{{cust: cust, id: 1}}
		s.led.replies = []*reply{{cust: cust, id: 2}}
		inbound, replies := s.checkInbox(ctx, &s.led)
		if !inbound.OK() || !replies.OK() || inbound.Checked != 1 || replies.Checked != 1 {
			t.Fatalf("inbound %+v, replies %+v", inbound, replies)
		}
	})

	t.Run("a message stored twice, a failure without a reason and a reply delivered twice break them", func(t *testing.T) {
		t.Parallel()
		in := &instance{answers: map[string]any{}}
		s, fake, tgURL := newTestSim(t, in)
		cust := &customer{key: custKey{id: 502}, first: "Иван", thread: 8}
		if _, err := fake.Bot(fakebot.Token(testInboxBot)).Send(cust.user(), "Добрый день"); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			send(t, tgURL, testInboxBot, map[string]any{"chat_id": 502, "text": "Ответ №2"})
		}
		in.answers["GET /admin/api/omni/threads/8/messages?limit=1000"] = messagesAnswer{Messages: []omniMessage{
			{ID: 1, Direction: "inbound", Status: "received", ProviderMessageID: pid("1")},
			{ID: 2, Direction: "inbound", Status: "received", ProviderMessageID: pid("1")},
			{ID: 3, Direction: "outbound", Status: "sent", Text: "Ответ №2"},
			{ID: 4, Direction: "outbound", Status: "failed"},
		}}
		s.led.customers[cust.key] = cust
		s.led.msgs = []*customerMsg{{cust: cust, id: 1}}
		s.led.replies = []*reply{{cust: cust, id: 3}}
		inbound, replies := s.checkInbox(ctx, &s.led)
		if inbound.Violations != 1 || replies.Violations != 2 {
			t.Fatalf("inbound %+v, replies %+v", inbound, replies)
		}
	})

	t.Run("a reply still queued and a message not yet stored are pending", func(t *testing.T) {
		t.Parallel()
		in := &instance{answers: map[string]any{
			"GET /admin/api/omni/threads/9/messages?limit=1000": messagesAnswer{Messages: []omniMessage{
				{ID: 5, Direction: "outbound", Status: "queued"},
			}},
		}}
		s, _, _ := newTestSim(t, in)
		cust := &customer{key: custKey{conn: "bc-1", id: 503}, thread: 9}
		s.led.customers[cust.key] = cust
		s.led.msgs = []*customerMsg{{cust: cust, id: 3}}
		s.led.replies = []*reply{{cust: cust, id: 5}}
		inbound, replies := s.checkInbox(ctx, &s.led)
		if inbound.Pending != 1 || replies.Pending != 1 || inbound.OK() || replies.OK() {
			t.Fatalf("inbound %+v, replies %+v", inbound, replies)
		}
	})
}

func TestCheckReferrals(t *testing.T) {
	t.Parallel()
	bonds := func(referrers ...string) bondsAnswer {
		var ba bondsAnswer
		for _, r := range referrers {
			ba.Bonds = append(ba.Bonds, struct {
				ReferrerUserID string `json:"referrerUserId"`
				Status         string `json:"status"`
			}{r, "Active"})
		}
		return ba
	}
	topics := topicsAnswer{}
	topics.Topics = append(topics.Topics, struct {
		Name   string `json:"name"`
		Groups []struct {
			Group string `json:"group"`
			Lag   int64  `json:"lag"`
			Dead  int64  `json:"dead"`
		} `json:"groups"`
	}{Name: identityTopic, Groups: []struct {
		Group string `json:"group"`
		Lag   int64  `json:"lag"`
		Dead  int64  `json:"dead"`
	}{{Group: referralGroup, Lag: 0, Dead: 1}}})
	in := &instance{answers: map[string]any{
		"GET /admin/api/topics": topics,
		// bonded once to the link's owner: holds
		"GET /admin/api/referral/bonds?referredUserId=ok":      bonds("owner"),
		"GET /admin/api/referral/replicas/ok":                  replicaAnswer{ReplicaVersion: 2},
		"GET /admin/api/referral/bonds?referredUserId=two":     bonds("owner", "owner"),
		"GET /admin/api/referral/replicas/two":                 replicaAnswer{ReplicaVersion: 1},
		"GET /admin/api/referral/bonds?referredUserId=other":   bonds("someone"),
		"GET /admin/api/referral/replicas/other":               replicaAnswer{ReplicaVersion: 1},
		"GET /admin/api/referral/bonds?referredUserId=refused": bonds("owner"),
		"GET /admin/api/referral/replicas/refused":             replicaAnswer{ReplicaVersion: 1},
		// not bonded yet, replica behind: pending
		"GET /admin/api/referral/bonds?referredUserId=late": bonds(),
		"GET /admin/api/referral/replicas/late":             replicaAnswer{ReplicaVersion: 1},
	}}
	s, _, _ := newTestSim(t, in)
	for id, want := range map[string]string{"ok": "owner", "two": "owner", "other": "owner", "refused": "", "late": "owner"} {
		u := s.led.idUser(id)
		u.wantReferrer, u.maxVersion = want, 1
	}
	s.led.idUsers["ok"].maxVersion = 2
	s.led.idUsers["late"].maxVersion = 2
	inv := s.checkReferrals(context.Background(), &s.led)
	// two bonds, the wrong owner, a refused referral bonded, and the dead
	// letter the run began without
	if inv.Violations != 4 || inv.Pending != 1 || inv.Checked != 5 {
		t.Fatalf("%+v", inv)
	}
	if !s.led.idUsers["ok"].settled || s.led.idUsers["ok"].broken != "" {
		t.Fatalf("the good referral did not settle: %+v", s.led.idUsers["ok"])
	}
}

func TestCheckPartners(t *testing.T) {
	t.Parallel()
	in := &instance{answers: map[string]any{
		"GET /admin/api/users/11/notifications": map[string]any{"notifications": []map[string]string{
			{"text": "🎉 Новый партнёр в вашей структуре: Б!\n" + partnerCodeLine + "p2"},
		}},
	}}
	s, fake, tgURL := newTestSim(t, in)
	leader := telego.User{ID: 900, FirstName: "Лидер"}
	if _, err := fake.Bot(fakebot.Token(testOnboardingBot)).Start(leader, ""); err != nil {
		t.Fatal(err)
	}
	dm := func(code string) {
		send(t, tgURL, testOnboardingBot, map[string]any{"chat_id": 900, "text": "🎉 Новый партнёр в вашей структуре: А!\n" + partnerCodeLine + code})
	}
	dm("p1")  // once by DM: holds
	dm("p3")  // by DM twice: sent twice, announced twice
	dm("p3")  //
	dm("p2")  // by DM and by web notification: announced twice
	dm("p10") // p1's code is a prefix of this one; it must not count for p1
	s.cast.Leaders = []Leader{{UID: 11, TelegramID: 900}}
	s.led.regs = []*registration{{partnerCode: "p1"}, {partnerCode: "p2"}, {partnerCode: "p3"}, {partnerCode: "p4"}}
	twice := Invariant{Name: invNoTwice}
	inv := s.checkPartners(context.Background(), s.led.regs, &twice)
	if inv.Violations != 2 || inv.Pending != 1 || twice.Violations != 1 {
		t.Fatalf("partners %+v, twice %+v", inv, twice)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	t.Run("a summary with an unsettled invariant is not OK and says so", func(t *testing.T) {
		s := Summary{Elapsed: time.Minute, Rate: 3, Invariants: []Invariant{{Name: "a", Checked: 2}, {Name: "b", Checked: 1, Pending: 1}}}
		var out strings.Builder
		s.Write(&out)
		if s.OK() || !strings.Contains(out.String(), "FAIL b — 1 checked, 1 not settled in time") {
			t.Fatalf("OK %v:\n%s", s.OK(), out.String())
		}
	})
	t.Run("a summary without invariants is not OK", func(t *testing.T) {
		if (Summary{}).OK() {
			t.Fatal("nothing checked passed")
		}
	})
	held := func() []Invariant {
		return []Invariant{{Name: invOutbox, Checked: 88}, {Name: invPartners, Checked: 24}, {Name: invReplies, Checked: 23}}
	}
	t.Run("an invariant that checked nothing is not checked, and the run does not pass", func(t *testing.T) {
		inv := held()
		inv[1].Checked = 0
		s := Summary{Bot: FlowStats{Started: 10, Completed: 10}, Invariants: inv}
		var out strings.Builder
		s.Write(&out)
		if inv[1].OK() || !inv[1].NotChecked() || s.OK() {
			t.Errorf("an invariant that checked nothing: OK %v, not checked %v; the run OK %v", inv[1].OK(), inv[1].NotChecked(), s.OK())
		}
		if text := out.String(); strings.Contains(text, "all invariants hold") || strings.Contains(text, "ok   "+invPartners) ||
			!strings.Contains(text, "---- "+invPartners+" — not checked") || !strings.Contains(text, "1 invariant was not checked") {
			t.Errorf("the summary:\n%s", text)
		}
	})
	t.Run("a run most of whose journeys of one flow failed does not pass, though every invariant held", func(t *testing.T) {
		s := Summary{Bot: FlowStats{Started: 25, Completed: 4, Failed: 21, Errors: []ErrorCount{{"stopped before it finished", 21}}},
			Referral: FlowStats{Started: 24, Completed: 24}, Invariants: held()}
		var out strings.Builder
		s.Write(&out)
		if s.OK() || strings.Contains(out.String(), "all invariants hold") || !strings.Contains(out.String(), "most bot outbox journeys failed (21 of 25)") {
			t.Errorf("OK %v:\n%s", s.OK(), out.String())
		}
	})
	t.Run("the reviewer's run fails on both counts", func(t *testing.T) {
		inv := held()
		for i := range inv {
			inv[i].Checked = 0
		}
		inv[0].Checked = 12
		s := Summary{Bot: FlowStats{Started: 25, Completed: 4, Failed: 21}, Invariants: inv}
		if p := s.Problems(); len(p) != 2 || !strings.Contains(p[0], "2 invariants were not checked") || !strings.Contains(p[1], "most bot outbox") {
			t.Errorf("problems %q", p)
		}
	})
	t.Run("a run with every invariant checked and held and a few failed journeys passes", func(t *testing.T) {
		s := Summary{Bot: FlowStats{Started: 25, Completed: 24, Failed: 1}, Chat: FlowStats{Started: 3, Completed: 2, Failed: 1}, Invariants: held()}
		var out strings.Builder
		s.Write(&out)
		if !s.OK() || !strings.Contains(out.String(), "all invariants hold") {
			t.Errorf("OK %v:\n%s", s.OK(), out.String())
		}
	})
	t.Run("a stalled run does not pass", func(t *testing.T) {
		s := Summary{Bot: FlowStats{Started: 25, Completed: 20, Failed: 5}, Invariants: held(), Stalled: 30 * time.Second}
		if p := s.Problems(); len(p) != 1 || !strings.Contains(p[0], "none moved for 30s") {
			t.Errorf("problems %q", p)
		}
	})
	t.Run("failures are counted by reason", func(t *testing.T) {
		var f FlowStats
		for _, r := range []string{"a", "b", "a", "c", "d", "e", "f"} {
			f.fail(r)
		}
		if f.Failed != 7 || len(f.Errors) != maxErrors || f.Errors[0] != (ErrorCount{"a", 2}) {
			t.Fatalf("%+v", f)
		}
	})
}

func TestController(t *testing.T) {
	t.Parallel()
	t.Run("starting without a sandbox is refused", func(t *testing.T) {
		err := NewController(Opts{BaseURL: "http://x", AdminToken: "a"}).Start(context.Background(), 1)
		if !errors.Is(err, ErrNoSandbox) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("stopping an idle controller says it is not running", func(t *testing.T) {
		c := NewController(Opts{})
		if _, err := c.Stop(context.Background()); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("got %v", err)
		}
		if st := c.Status(); st.Running || st.Last != nil {
			t.Fatalf("idle status %+v", st)
		}
	})
}
