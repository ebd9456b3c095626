package cli

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"switchyard/loadtest"
	"switchyard/referral"
	"switchyard/telegram/fakebot"
)

// The crash suite starts the real binary, runs mixed load on all three flows,
// kills it with SIGKILL at a random moment, restarts it on the same file, five
// times; then lets it drain and checks from the outside that every request the
// server acknowledged took effect exactly once, in order. It is the fleet
// test (TestFleet) with one instance, and Telegram failing at random in one
// of its runs.
func TestCrashSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("the crash suite takes minutes; it runs without -short (and always in CI)")
	}
	opts := roundsOpts{instances: 1, rate: 150, users: 20, concurrency: 8,
		killAfter: [2]time.Duration{500 * time.Millisecond, 3 * time.Second}}
	t.Run("kill -9 under mixed load, five rounds", func(t *testing.T) {
		t.Parallel()
		killRounds(t, opts)
	})
	t.Run("kill -9 under mixed load while Telegram fails at random", func(t *testing.T) {
		t.Parallel()
		o := opts
		o.faults = []fakebot.Fault{
			{Kind: fakebot.FaultTooManyRequests, Method: "sendMessage", RetryAfter: time.Second, Probability: 0.1},
			{Kind: fakebot.FaultServerError, Method: "sendMessage", Probability: 0.1},
			{Kind: fakebot.FaultSlow, Method: "sendMessage", Delay: 300 * time.Millisecond, Probability: 0.1},
		}
		killRounds(t, o)
	})
}

const (
	crashAdmin    = "crash-admin-token-0123456789abcdef"
	crashBotSec   = "crash-bot-secret-0123456789abcdef"
	crashOmniHook = "crash-omni-webhook-0123456789abcd"
	crashBotHook  = "crash-bot-webhook-0123456789abcde"
)

// accepted collects what the server acknowledged, per path.
type accepted struct {
	mu    sync.Mutex
	items map[loadtest.Path][]loadtest.Item
}

func (a *accepted) add(it loadtest.Item) {
	a.mu.Lock()
	a.items[it.Path] = append(a.items[it.Path], it)
	a.mu.Unlock()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// verifier reads the fleet's state through its operators' API, from every
// instance in turn.
type verifier struct {
	hc      *http.Client
	base    string
	lastWhy string
}

func newVerifier(t *testing.T, bases []string) *verifier {
	rr, err := loadtest.NewRoundRobin(bases, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &verifier{hc: &http.Client{Transport: rr, Timeout: 30 * time.Second}, base: rr.Base()}
}

func (v *verifier) get(t *testing.T, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, v.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+crashAdmin)
	resp, err := v.hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == 200 && out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("GET %s: decode: %v", path, err)
		}
	}
	return resp.StatusCode
}

// queueJSON is a queue as GET /admin/api/queues shows it.
type queueJSON struct {
	Name                           string
	Ready, InFlight, Delayed, Held int64
}

func (v *verifier) queues(t *testing.T) []queueJSON {
	var qs struct{ Queues []queueJSON }
	v.get(t, "/admin/api/queues", &qs)
	return qs.Queues
}

// drained: every queue is empty, the referral group has no lag, and the
// bot's outbox and outgoing messages are all settled.
func (v *verifier) drained(t *testing.T) bool {
	for _, q := range v.queues(t) {
		if q.Ready+q.InFlight+q.Delayed+q.Held > 0 {
			v.lastWhy = fmt.Sprintf("queue %s not empty: %+v", q.Name, q)
			return false
		}
	}
	var tp struct {
		Topics []struct {
			Name   string
			Groups []struct {
				Group string
				Lag   int64
			}
		} `json:"topics"`
	}
	v.get(t, "/admin/api/topics", &tp)
	for _, topic := range tp.Topics {
		for _, g := range topic.Groups {
			if g.Lag > 0 {
				v.lastWhy = fmt.Sprintf("group %s lags %d on %s", g.Group, g.Lag, topic.Name)
				return false
			}
		}
	}
	for _, state := range []string{"pending", "retrying"} {
		var ev struct{ Events []json.RawMessage }
		v.get(t, "/admin/api/bot/events?state="+state, &ev)
		if len(ev.Events) > 0 {
			v.lastWhy = fmt.Sprintf("%d outbox events %s", len(ev.Events), state)
			return false
		}
	}
	// The DMs are messages of onboarding.dm (checked with every queue above);
	// the bot's own view of them must agree.
	for _, state := range []string{"pending", "retrying", "sending"} {
		var out struct{ DMs []json.RawMessage }
		if code := v.get(t, "/admin/api/bot/dms?status="+state, &out); code != http.StatusOK {
			v.lastWhy = fmt.Sprintf("GET /admin/api/bot/dms?status=%s: %d", state, code)
			return false
		}
		if len(out.DMs) > 0 {
			v.lastWhy = fmt.Sprintf("%d outgoing DMs %s", len(out.DMs), state)
			return false
		}
	}
	return true
}

// inOrder reports the pairs of items that have an order: a was
// acknowledged before b was sent. Two requests of one subject in flight at
// once have no order between them (the load sends from many connections,
// as Telegram and producers do).
func inOrder(a, b loadtest.Item) bool { return a.Acked.Before(b.Sent) }

// threadMessages are a thread's messages in thread order.
func (v *verifier) threadMessages(t *testing.T, thread int64) []loadtest.Message {
	var all []loadtest.Message
	for after := int64(0); ; {
		var ms struct{ Messages []loadtest.Message }
		v.get(t, fmt.Sprintf("/admin/api/omni/threads/%d/messages?after=%d&limit=500", thread, after), &ms)
		all = append(all, ms.Messages...)
		if len(ms.Messages) < 500 {
			return all
		}
		after = ms.Messages[len(ms.Messages)-1].Seq
	}
}

// checkWebhooks: every update answered 200 is stored once, and each
// customer's thread holds its messages in the order they were sent: an
// update acknowledged before another was sent is stored before it.
func (v *verifier) checkWebhooks(t *testing.T, items []loadtest.Item) {
	// Telegram numbers messages per chat: a message is its chat and id.
	byKey := make(map[string]loadtest.Item, len(items))
	for _, it := range items {
		byKey[it.Subject+"/"+it.Key] = it
	}
	var th struct {
		Threads []struct {
			ID      int64
			Contact struct{ ProviderUserID string }
		}
	}
	v.get(t, "/admin/api/omni/threads?limit=100000", &th)
	stored := map[string]int{}
	for _, thread := range th.Threads {
		var earlier []loadtest.Item // the thread's acknowledged messages stored so far
		for _, m := range v.threadMessages(t, thread.ID) {
			if m.Direction != "inbound" || m.ProviderMessageID == nil {
				continue
			}
			key := thread.Contact.ProviderUserID + "/" + *m.ProviderMessageID
			stored[key]++
			it, acked := byKey[key]
			if !acked {
				continue // committed, but its answer was lost in a kill: no promise of order
			}
			for _, e := range earlier {
				if inOrder(it, e) {
					t.Errorf("thread %d (customer %s): message %s, acknowledged before %s was sent, is stored after it — order broken",
						thread.ID, thread.Contact.ProviderUserID, it.Key, e.Key)
				}
			}
			earlier = append(earlier, it)
		}
	}
	for _, it := range items {
		if n := stored[it.Subject+"/"+it.Key]; n != 1 {
			t.Errorf("webhook update %s of customer %s (answered 200) stored %d times", it.Key, it.Subject, n)
		}
	}
	for key, n := range stored {
		if n > 1 {
			t.Errorf("message %s (customer/id) stored %d times", key, n)
		}
	}
	t.Logf("webhooks: %d acknowledged, each stored once; %d stored in all", len(items), len(stored))
}

// checkTopic: every publish answered 202 has its replica at the newest
// version acknowledged; a user with a referral link acknowledged has
// exactly one bond and one bond-created event, a user without none; and
// one key's snapshots are applied in order (loadtest.TopicPlan): when a
// user's first snapshot, through the run's first link, was acknowledged
// before its follow-up through the second link was sent, the bond is
// through the first.
func (v *verifier) checkTopic(t *testing.T, items []loadtest.Item) {
	bondEvents := map[string]int{}
	for p, from := 0, int64(0); p < referral.IdentityPartitions; p, from = p+1, 0 {
		for {
			var out struct {
				Messages []struct {
					Key    string
					Offset int64
				}
			}
			v.get(t, fmt.Sprintf("/admin/api/topics/%s/messages?partition=%d&fromOffset=%d&limit=1000", referral.TopicBonds, p, from), &out)
			for _, m := range out.Messages {
				bondEvents[m.Key]++
			}
			if len(out.Messages) < 1000 {
				break
			}
			from = out.Messages[len(out.Messages)-1].Offset + 1
		}
	}
	perUser := map[string][]loadtest.Item{}
	for _, it := range items {
		perUser[it.Subject] = append(perUser[it.Subject], it)
	}
	bonded, ordered := 0, 0
	for user, its := range perUser {
		var rep struct{ ReplicaVersion int64 }
		if code := v.get(t, "/admin/api/referral/replicas/"+user, &rep); code != 200 {
			t.Errorf("user %s (publish answered 202): replica answers %d", user, code)
			continue
		}
		var newest int64
		linked := false
		var first, followUp *loadtest.Item
		for _, it := range its {
			r := loadtest.TopicPlan(it.Run, it.Seq)
			newest = max(newest, r.Version)
			linked = linked || r.Link != loadtest.LinkNone
			if r.Follows == 0 {
				first = &it
			} else {
				followUp = &it
			}
		}
		if rep.ReplicaVersion < newest {
			t.Errorf("user %s: replica at version %d, but version %d was acknowledged", user, rep.ReplicaVersion, newest)
		}
		var bonds struct {
			Bonds []struct{ ReferrerUserID string }
		}
		v.get(t, "/admin/api/referral/bonds?referredUserId="+user, &bonds)
		want := 0
		if linked {
			want = 1
		}
		if len(bonds.Bonds) != want || bondEvents[user] != want {
			t.Errorf("user %s: %d bonds and %d bond-created events, want %d and %d", user, len(bonds.Bonds), bondEvents[user], want, want)
			continue
		}
		bonded += want
		if first == nil || followUp == nil || !inOrder(*first, *followUp) {
			continue
		}
		ordered++
		if owner := loadtest.LinkOwner(first.Run, loadtest.LinkFirst); bonds.Bonds[0].ReferrerUserID != owner {
			t.Errorf("user %s: bonded to %s through the follow-up's link, not to %s through the first snapshot's, acknowledged before the follow-up was sent — order per key broken",
				user, bonds.Bonds[0].ReferrerUserID, owner)
		}
	}
	for key, n := range bondEvents {
		if n > 1 {
			t.Errorf("bond-created for %s published %d times", key, n)
		}
	}
	t.Logf("topic: %d acknowledged publishes of %d users consumed, %d bonded once each, %d follow-ups applied after their first snapshot",
		len(items), len(perUser), bonded, ordered)
}

// partnerInDM reads the partner a new_partner DM announces
// (loadtest.PartnerName).
var partnerInDM = regexp.MustCompile(`Партнёр \d+/\d+`)

// checkOutbox: every emit answered 201 is processed, and every processed
// event's user got its DM, which names the event's partner; one user's DMs
// arrive in the order of their emits (one acknowledged before another was
// sent is delivered first). A DM the process had sent to Telegram but not
// yet recorded when it was killed is sent again (Telegram has no
// idempotency key): such repeats are counted and may not exceed what was in
// flight.
func (v *verifier) checkOutbox(t *testing.T, items []loadtest.Item, fake *fakebot.Server, botToken string, faults bool) {
	// Emits committed but unanswered at a kill also take effect: every
	// processed event counts.
	partner := map[string]string{} // event id → its partner
	for before := ""; ; {
		var page struct {
			Events []struct {
				ID         int64
				EventType  string
				TelegramID *string
				Payload    struct{ PartnerName string }
			}
		}
		v.get(t, "/admin/api/bot/events?state=processed&limit=500"+before, &page)
		for _, e := range page.Events {
			if e.EventType == "new_partner" && e.TelegramID != nil {
				partner[strconv.FormatInt(e.ID, 10)] = e.Payload.PartnerName
			}
		}
		if len(page.Events) < 500 {
			break
		}
		before = fmt.Sprintf("&beforeId=%d", page.Events[len(page.Events)-1].ID)
	}
	dms := map[string][]int{} // partner → the fake's numbers of the DMs naming it
	for _, c := range sendsOf(fake, botToken) {
		if name := partnerInDM.FindString(c.Params["text"]); name != "" {
			dms[name] = append(dms[name], c.Seq)
		}
	}
	repeats := 0
	for id, name := range partner {
		switch n := len(dms[name]); {
		case n == 0:
			t.Errorf("event %s (%s) was processed, but its DM was never delivered — lost", id, name)
		case n > 1:
			repeats += n - 1
		}
	}
	perUser := map[string][]loadtest.Item{}
	for _, it := range items {
		if _, ok := partner[it.Key]; !ok {
			var ev struct{ State string }
			code := v.get(t, "/admin/api/bot/events/"+it.Key, &ev)
			t.Errorf("event %s (emit answered 201): %d %q, want processed", it.Key, code, ev.State)
			continue
		}
		perUser[it.Subject] = append(perUser[it.Subject], it)
	}
	ordered := 0
	for user, its := range perUser {
		for _, a := range its {
			for _, b := range its {
				da, db := dms[partner[a.Key]], dms[partner[b.Key]]
				if !inOrder(a, b) || len(da) == 0 || len(db) == 0 {
					continue
				}
				ordered++
				if da[0] > db[0] {
					t.Errorf("user %s: the DM of event %s, emitted before %s was sent, was delivered after that one — order per user broken", user, a.Key, b.Key)
				}
			}
		}
	}
	// At a kill at most a sender's batch is between Telegram's answer and
	// its record, at most one DM per user; five kills bound the repeats.
	if limit := killRoundsN * len(perUser); repeats > limit {
		t.Errorf("%d repeated DMs after %d kills, more than the %d that can be in flight", repeats, killRoundsN, limit)
	}
	t.Logf("outbox: %d acknowledged emits of %d users processed, %d events in all, each DM delivered (%d pairs in order); %d DMs repeated after kills (faults: %v)",
		len(items), len(perUser), len(partner), ordered, repeats, faults)
}

// checkReplies: every operator's reply answered 202 is stored once in its
// thread and sent, and the fake Bot API delivered it to the customer; one
// thread's replies are stored and delivered in the order they were posted.
// A reply sent to Telegram but not yet recorded when its process was killed
// is sent again (as a DM is), so repeats are counted and bounded.
func (v *verifier) checkReplies(t *testing.T, items []loadtest.Item, fake *fakebot.Server, token string) {
	delivered := map[string][]int{} // text → the fake's call numbers
	for _, c := range sendsOf(fake, token) {
		delivered[c.Params["text"]] = append(delivered[c.Params["text"]], c.Seq)
	}
	perThread := map[string][]loadtest.Item{}
	for _, it := range items {
		perThread[it.Subject] = append(perThread[it.Subject], it)
	}
	repeats := 0
	for thread, its := range perThread {
		id, _ := strconv.ParseInt(thread, 10, 64)
		stored := map[string][]loadtest.Message{} // message id → its rows
		for _, m := range v.threadMessages(t, id) {
			if m.Direction == "outbound" {
				stored[strconv.FormatInt(m.ID, 10)] = append(stored[strconv.FormatInt(m.ID, 10)], m)
			}
		}
		for _, it := range its {
			text := replyText(it.Run, it.Seq)
			ms := stored[it.Key]
			switch {
			case len(ms) != 1 || ms[0].Text != text:
				t.Errorf("thread %s: reply %s (answered 202) stored as %+v, want once with text %q", thread, it.Key, ms, text)
				continue
			case ms[0].Status != "sent":
				t.Errorf("thread %s: reply %s is %s, want sent", thread, it.Key, ms[0].Status)
			case len(delivered[text]) == 0:
				t.Errorf("thread %s: reply %s was never delivered", thread, it.Key)
			}
			repeats += max(len(delivered[text])-1, 0)
			for _, e := range its {
				if !inOrder(it, e) || len(stored[e.Key]) != 1 {
					continue
				}
				later := stored[e.Key][0]
				if ms[0].Seq >= later.Seq {
					t.Errorf("thread %s: reply %s, answered before %s was posted, is stored after it (seq %d, %d) — order broken", thread, it.Key, e.Key, ms[0].Seq, later.Seq)
				}
				if d, dl := delivered[text], delivered[replyText(e.Run, e.Seq)]; len(d) > 0 && len(dl) > 0 && d[0] > dl[0] {
					t.Errorf("thread %s: reply %s, answered before %s was posted, was delivered after it — order broken", thread, it.Key, e.Key)
				}
			}
		}
	}
	if limit := killRoundsN * len(perThread); repeats > limit {
		t.Errorf("%d repeated replies after %d kills, more than the %d that can be in flight", repeats, killRoundsN, limit)
	}
	t.Logf("replies: %d acknowledged in %d threads, each stored once and delivered; %d repeated after kills", len(items), len(perThread), repeats)
}
