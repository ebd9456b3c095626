package loadtest_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"switchyard/loadtest"
)

// fakeInstance is an httptest server that answers the public paths a soak
// uses as Switchyard does, in memory, and does what its faults say instead
// where a test asks it to lose or repeat something.
type fakeInstance struct {
	srv *httptest.Server

	mu       sync.Mutex
	threads  map[string]*fakeThread // by customer chat id
	order    []*fakeThread
	events   []fakeEvent // the outbox, by id - 1
	replicas map[string]int64
	bonds    map[string][]string // referred → referrers
	links    map[string]string   // slug → owner
	scrapes  int

	// Faults and knobs, set before the run.
	dropWebhookEvery int    // every nth customer update is answered 200 and not stored
	redeliverEvery   int    // every nth acknowledged event is delivered once more
	stallPending     bool   // /bot/events/pending never delivers
	frozenUser       string // the replica of this user stays at its first version
	noMetrics        bool   // /metrics answers 404

	dropped, redelivered int
}

type fakeThread struct {
	id     int64
	chat   string
	unread int
	msgs   []loadtest.Message
}

type fakeEvent struct {
	processed   bool
	redelivered bool
}

const fakeSecret = "fake-webhook-secret"

func newFakeInstance(t *testing.T, setup func(*fakeInstance)) *fakeInstance {
	f := &fakeInstance{threads: map[string]*fakeThread{}, replicas: map[string]int64{}, bonds: map[string][]string{}, links: map[string]string{}}
	if setup != nil {
		setup(f)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webhooks/telegram", f.webhook)
	mux.HandleFunc("GET /admin/api/omni/threads", f.listThreads)
	mux.HandleFunc("GET /admin/api/omni/threads/{id}/messages", f.listMessages)
	mux.HandleFunc("GET /admin/api/queues", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, map[string]any{"queues": []any{}}) })
	mux.HandleFunc("POST /admin/api/bot/events", f.emit)
	mux.HandleFunc("GET /bot/events/pending", f.pending)
	mux.HandleFunc("POST /bot/events/ack", f.ack)
	mux.HandleFunc("POST /admin/api/referral/links", f.link)
	mux.HandleFunc("POST /admin/api/topics/"+loadtest.IdentityTopic+"/messages", f.publish)
	mux.HandleFunc("GET /admin/api/topics", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]any{"topics": []any{map[string]any{"name": loadtest.IdentityTopic,
			"groups": []any{map[string]any{"group": "referral-identity-users", "lag": 0}}}}})
	})
	mux.HandleFunc("GET /admin/api/referral/replicas/{user}", f.replica)
	mux.HandleFunc("GET /admin/api/referral/bonds", f.listBonds)
	mux.HandleFunc("GET /metrics", f.metrics)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/admin/api/") && r.Header.Get("Authorization") != "Bearer admin" {
			writeJSON(w, 401, map[string]any{"error": "unauthorized"})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// thread is the customer's thread, made on its first message; f.mu is held.
func (f *fakeInstance) thread(chat string) *fakeThread {
	th := f.threads[chat]
	if th == nil {
		th = &fakeThread{id: int64(len(f.order) + 1), chat: chat}
		f.threads[chat] = th
		f.order = append(f.order, th)
	}
	return th
}

func (f *fakeInstance) webhook(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Telegram-Bot-Api-Secret-Token") != fakeSecret {
		writeJSON(w, 401, map[string]any{"error": "unauthorized"})
		return
	}
	var u struct {
		Message *struct {
			ID   int64  `json:"message_id"`
			Text string `json:"text"`
			Chat struct {
				ID int64 `json:"id"`
			} `json:"chat"`
		} `json:"business_message"`
	}
	if err := json.NewDecoder(r.Body).Decode(&u); err != nil {
		writeJSON(w, 400, map[string]any{"error": err.Error()})
		return
	}
	if u.Message == nil {
		w.WriteHeader(200) // the load's business_connection: no thread
		return
	}
	chat := strconv.FormatInt(u.Message.Chat.ID, 10)
	f.mu.Lock()
	defer f.mu.Unlock()
	th := f.thread(chat)
	if u.Message.Chat.ID != loadtest.ProbeChatID && f.dropWebhookEvery > 0 && u.Message.ID%int64(f.dropWebhookEvery) == 0 {
		f.dropped++
		w.WriteHeader(200) // answered, never stored
		return
	}
	th.unread++
	seq := int64(len(th.msgs) + 1)
	th.msgs = append(th.msgs, loadtest.Message{ID: seq, Seq: seq, Direction: "inbound", Text: u.Message.Text})
	w.WriteHeader(200)
}

func (f *fakeInstance) listThreads(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []any
	for _, th := range f.order {
		out = append(out, map[string]any{"id": th.id, "businessConnectionId": loadtest.BusinessConnectionID, "unread": th.unread,
			"contact": map[string]any{"providerUserId": th.chat}})
	}
	writeJSON(w, 200, map[string]any{"threads": out})
}

func (f *fakeInstance) listMessages(w http.ResponseWriter, r *http.Request) {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []loadtest.Message{}
	for _, th := range f.order {
		if th.id == id {
			for _, m := range th.msgs {
				if m.Seq > after && len(out) < 500 {
					out = append(out, m)
				}
			}
		}
	}
	writeJSON(w, 200, map[string]any{"messages": out})
}

func (f *fakeInstance) emit(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	f.events = append(f.events, fakeEvent{})
	id := len(f.events)
	f.mu.Unlock()
	writeJSON(w, 201, map[string]any{"id": id})
}

// pending long-polls for unprocessed events, as the contract does.
func (f *fakeInstance) pending(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer bot" {
		writeJSON(w, 401, map[string]any{"error": "unauthorized"})
		return
	}
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	wait, _ := strconv.Atoi(r.URL.Query().Get("wait"))
	until := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		f.mu.Lock()
		events := []any{}
		for i, e := range f.events {
			if !e.processed && !f.stallPending && len(events) < limit {
				events = append(events, map[string]any{"id": i + 1, "eventType": "new_partner", "payload": json.RawMessage(`{}`), "createdAt": time.Now()})
			}
		}
		f.mu.Unlock()
		if len(events) > 0 || time.Now().After(until) || r.Context().Err() != nil {
			writeJSON(w, 200, map[string]any{"events": events})
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (f *fakeInstance) ack(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ProcessedIDs []int `json:"processedIds"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]any{"error": err.Error()})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, id := range req.ProcessedIDs {
		e := &f.events[id-1]
		if e.processed {
			continue
		}
		if f.redeliverEvery > 0 && id%f.redeliverEvery == 0 && !e.redelivered {
			e.redelivered = true // acknowledged, yet pending again once
			f.redelivered++
			n++
			continue
		}
		e.processed = true
		n++
	}
	writeJSON(w, 200, map[string]any{"processed": n})
}

func (f *fakeInstance) link(w http.ResponseWriter, r *http.Request) {
	var body struct {
		URL   string `json:"url"`
		Owner string `json:"ownerUserId"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.links[body.URL] = body.Owner
	f.mu.Unlock()
	writeJSON(w, 201, map[string]any{"id": body.URL})
}

// publish applies a snapshot at once, as the referral consumer would: the
// newest version wins, and a first-seen user with a link is bonded once.
func (f *fakeInstance) publish(w http.ResponseWriter, r *http.Request) {
	var ev struct {
		Payload struct {
			UserID      string  `json:"UserId"`
			Version     int64   `json:"Version"`
			ReferrerURL *string `json:"ReferrerUrl"`
		} `json:"payload"`
	}
	if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
		writeJSON(w, 400, map[string]any{"error": err.Error()})
		return
	}
	p := ev.Payload
	f.mu.Lock()
	defer f.mu.Unlock()
	_, seen := f.replicas[p.UserID]
	if p.Version > f.replicas[p.UserID] && !(seen && p.UserID == f.frozenUser) {
		f.replicas[p.UserID] = p.Version
	}
	if p.ReferrerURL != nil && !seen && f.links[*p.ReferrerURL] != "" {
		f.bonds[p.UserID] = append(f.bonds[p.UserID], f.links[*p.ReferrerURL])
	}
	writeJSON(w, 202, map[string]any{})
}

func (f *fakeInstance) replica(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	v, ok := f.replicas[r.PathValue("user")]
	f.mu.Unlock()
	if !ok {
		writeJSON(w, 404, map[string]any{"error": "no such user"})
		return
	}
	writeJSON(w, 200, map[string]any{"replicaVersion": v})
}

func (f *fakeInstance) listBonds(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []any{}
	for _, referrer := range f.bonds[r.URL.Query().Get("referredUserId")] {
		out = append(out, map[string]any{"referrerUserId": referrer})
	}
	writeJSON(w, 200, map[string]any{"bonds": out})
}

// metrics serves the gauges a row reads, each scrape's sizes one MiB above
// the one before, among labelled samples and comments a row must skip.
func (f *fakeInstance) metrics(w http.ResponseWriter, _ *http.Request) {
	if f.noMetrics {
		http.NotFound(w, nil)
		return
	}
	f.mu.Lock()
	f.scrapes++
	n := f.scrapes
	f.mu.Unlock()
	fmt.Fprintf(w, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\n")
	fmt.Fprintf(w, "process_resident_memory_bytes %v\n", float64(40<<20+n))
	fmt.Fprintf(w, "switchyard_retention_removed_rows_total{rule=\"outbox\"} 12\n")
	fmt.Fprintf(w, "switchyard_store_database_bytes %d\nswitchyard_store_wal_bytes %d\nswitchyard_store_free_bytes 4096\n", n<<20, 2*n<<20)
}

func (f *fakeInstance) opts(o loadtest.Opts) loadtest.Opts {
	o.BaseURL, o.AdminToken, o.BotSecret, o.WebhookSecret = f.srv.URL, "admin", "bot", fakeSecret
	o.Consume, o.RunID = true, 7
	if o.Drain == 0 {
		o.Drain = 5 * time.Second
	}
	return o
}

func TestSoakRows(t *testing.T) {
	t.Parallel()
	t.Run("the rows divide the load between them and carry the instance's gauges", func(t *testing.T) {
		f := newFakeInstance(t, nil)
		var seen []loadtest.Interval
		rep, err := loadtest.Run(t.Context(), f.opts(loadtest.Opts{
			Rate: 60, Duration: 1500 * time.Millisecond, ReportEvery: 300 * time.Millisecond, Customers: 5, TopicUsers: 10,
			OnInterval: func(r loadtest.Interval) { seen = append(seen, r) },
		}))
		if err != nil {
			t.Fatal(err)
		}
		// A loaded machine may skip a tick (a row then covers two), never add one.
		if len(rep.Intervals) < 2 || len(rep.Intervals) > 6 || len(seen) != len(rep.Intervals) {
			t.Fatalf("%d rows (%d handed to OnInterval) for 1.5 s at one each 300 ms", len(rep.Intervals), len(seen))
		}
		var covered float64
		for _, r := range rep.Intervals {
			covered += r.Length
		}
		if last := rep.Intervals[len(rep.Intervals)-1]; covered < 1.4 || math.Abs(last.At-covered) > 1e-6 || last.At < rep.Elapsed.Seconds() {
			t.Errorf("the rows cover %.3f s up to %.3f s, the load ran %.3f s", covered, last.At, rep.Elapsed.Seconds())
		}
		accepted := map[loadtest.Path]int64{}
		prevAt, prevDB := 0.0, int64(0)
		for i, r := range rep.Intervals {
			if r.N != i+1 || r.At <= prevAt || r.Length <= 0 || r.Length > r.At-prevAt+1e-6 {
				t.Errorf("row %d: n %d at %.3fs, length %.3fs after a row at %.3fs", i, r.N, r.At, r.Length, prevAt)
			}
			if r.Database.From != "metrics" || r.Database.Bytes <= prevDB || r.WAL.Bytes != 2*r.Database.Bytes ||
				r.RSS.From != "metrics" || r.RSS.Bytes <= 40<<20 || r.Free != (loadtest.Sample{Bytes: 4096, From: "metrics"}) {
				t.Errorf("row %d: rss %+v, database %+v, wal %+v, free %+v: want each scrape's gauges", r.N, r.RSS, r.Database, r.WAL, r.Free)
			}
			prevAt, prevDB = r.At, r.Database.Bytes
			for _, p := range r.Paths {
				accepted[p.Path] += p.Accepted
				if p.Accepted > 0 && (p.PerSecond <= 0 || p.P99 <= 0) {
					t.Errorf("row %d, %s: %+v, want its rate and p99", r.N, p.Path, p)
				}
			}
		}
		for _, p := range rep.Paths {
			if accepted[p.Path] != p.Accepted || p.Accepted == 0 {
				t.Errorf("%s: the rows hold %d accepted, the run %d", p.Path, accepted[p.Path], p.Accepted)
			}
		}
		var handled int
		for _, r := range rep.Intervals {
			handled += r.Paths[1].Handled // outbox: every event is timed
		}
		if rep.Paths[1].Path != loadtest.PathOutbox || handled == 0 {
			t.Errorf("the rows time no outbox event: %+v", rep.Intervals)
		}
	})
	t.Run("without gauges a row reads the process's VmRSS and the SQLite file's size", func(t *testing.T) {
		f := newFakeInstance(t, func(f *fakeInstance) { f.noMetrics = true })
		db := filepath.Join(t.TempDir(), "soak.db")
		if err := os.WriteFile(db, make([]byte, 12345), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(db+"-wal", make([]byte, 678), 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := loadtest.Run(t.Context(), f.opts(loadtest.Opts{
			Paths: []loadtest.Path{loadtest.PathOutbox}, Rate: 20, Duration: 250 * time.Millisecond, ReportEvery: 100 * time.Millisecond,
			PID: os.Getpid(), Database: db,
		}))
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Intervals) == 0 {
			t.Fatal("no rows")
		}
		for _, r := range rep.Intervals {
			if r.RSS.From != "proc" || r.RSS.Bytes < 1<<20 || r.Database != (loadtest.Sample{Bytes: 12345, From: "file"}) ||
				r.WAL != (loadtest.Sample{Bytes: 678, From: "file"}) || r.Free.Known() {
				t.Errorf("row %d: rss %+v, database %+v, wal %+v, free %+v", r.N, r.RSS, r.Database, r.WAL, r.Free)
			}
		}
	})
	t.Run("a consumer that stalls shows in the rows, and its events count as lost", func(t *testing.T) {
		f := newFakeInstance(t, func(f *fakeInstance) { f.stallPending = true })
		rep, err := loadtest.Run(t.Context(), f.opts(loadtest.Opts{
			Paths: []loadtest.Path{loadtest.PathOutbox}, Rate: 40, Duration: 600 * time.Millisecond, ReportEvery: 200 * time.Millisecond,
			Tally: true, Drain: 100 * time.Millisecond,
		}))
		if err != nil {
			t.Fatal(err)
		}
		last := rep.Intervals[len(rep.Intervals)-1].Paths[0]
		if last.Handled != 0 || last.Waiting < 300 || last.Lag() != last.Waiting {
			t.Errorf("the last row %+v: want nothing handled and the first event waiting since the start", last)
		}
		o := rep.Tally.Outbox
		if rep.Tally.Drained || o.Emitted == 0 || o.Missing != o.Emitted || o.Acknowledged != 0 || rep.Tally.Lost() != o.Emitted {
			t.Errorf("the count %+v (outbox %+v): want every emit missing", rep.Tally, o)
		}
	})
}

func TestSoakTally(t *testing.T) {
	t.Parallel()
	// A count, not a duration, so that a loaded machine still gives each
	// user five versions.
	soak := loadtest.Opts{Count: 60, Concurrency: 4, Customers: 4, TopicUsers: 12, Tally: true}
	t.Run("an instance that keeps every request counts each once", func(t *testing.T) {
		f := newFakeInstance(t, func(f *fakeInstance) {
			// A thread of an earlier run with unread messages: only this
			// run's count.
			f.thread(strconv.FormatInt(loadtest.CustomerChatID(1), 10)).unread = 5
		})
		rep, err := loadtest.Run(t.Context(), f.opts(soak))
		if err != nil {
			t.Fatal(err)
		}
		tl := rep.Tally
		if tl == nil || !tl.Drained || tl.Lost() != 0 || tl.Doubled() != 0 {
			t.Fatalf("the count %+v: webhook %+v, outbox %+v, topic %+v", tl, *tl.Webhook, *tl.Outbox, *tl.Topic)
		}
		accepted := map[loadtest.Path]int64{}
		for _, p := range rep.Paths {
			accepted[p.Path] = p.Accepted
		}
		if w := tl.Webhook; w.Accepted != accepted[loadtest.PathWebhook] || w.Stored != w.Accepted || w.Chats != 4 || w.NoThread != 0 {
			t.Errorf("webhook %+v, want all %d accepted stored in 4 chats", *w, accepted[loadtest.PathWebhook])
		}
		if o := tl.Outbox; o.Emitted != accepted[loadtest.PathOutbox] || o.Acknowledged != o.Emitted {
			t.Errorf("outbox %+v, want all %d acknowledged", *o, accepted[loadtest.PathOutbox])
		}
		if p := tl.Topic; p.Published != accepted[loadtest.PathTopic] || p.Users != 12 || p.Current != 12 || p.Bonded != 12 {
			t.Errorf("topic %+v, want %d publishes for 12 users, each current and bonded once", *p, accepted[loadtest.PathTopic])
		}
		if accepted[loadtest.PathTopic] != 60 {
			t.Errorf("%d publishes accepted, want all 60 (five versions of each user)", accepted[loadtest.PathTopic])
		}
	})
	t.Run("an instance that loses, repeats or falls behind is caught, exactly", func(t *testing.T) {
		frozen := loadtest.SoakTopicPlan(7, 3, 12).User
		f := newFakeInstance(t, func(f *fakeInstance) {
			f.dropWebhookEvery, f.redeliverEvery, f.frozenUser = 9, 10, frozen
		})
		rep, err := loadtest.Run(t.Context(), f.opts(soak))
		if err != nil {
			t.Fatal(err)
		}
		tl := rep.Tally
		f.mu.Lock()
		dropped, redelivered := f.dropped, f.redelivered
		f.mu.Unlock()
		if dropped == 0 || tl.Webhook.Missing != int64(dropped) || tl.Webhook.Extra != 0 {
			t.Errorf("webhook %+v: %d updates were answered and dropped", *tl.Webhook, dropped)
		}
		if redelivered == 0 || tl.Outbox.Repeated != int64(redelivered) || tl.Outbox.Missing != 0 {
			t.Errorf("outbox %+v: %d acknowledged events were delivered again", *tl.Outbox, redelivered)
		}
		if tl.Topic.Behind != 1 || tl.Topic.Current != 11 {
			t.Errorf("topic %+v: one user's replica stayed at its first version", *tl.Topic)
		}
		if tl.Lost() != int64(dropped)+1 || tl.Doubled() != int64(redelivered) {
			t.Errorf("lost %d, doubled %d; want %d and %d", tl.Lost(), tl.Doubled(), dropped+1, redelivered)
		}
	})
}

func TestSoakTopicPlan(t *testing.T) {
	t.Parallel()
	const run, users = 42, 5
	newest := map[string]int64{}
	for n := int64(1); n <= 4*users; n++ {
		r := loadtest.SoakTopicPlan(run, n, users)
		if r.Link != loadtest.LinkFirst || r.Version != newest[r.User]+1 {
			t.Errorf("request %d: %+v, want the next version (%d) of its user through the first link", n, r, newest[r.User]+1)
		}
		if r.Version > 1 && loadtest.SoakTopicPlan(run, r.Follows, users).User != r.User {
			t.Errorf("request %d follows %d, another user's", n, r.Follows)
		}
		newest[r.User] = r.Version
	}
	if len(newest) != users {
		t.Errorf("%d users in %d requests, want the %d cycled", len(newest), 4*users, users)
	}
	for user := range newest {
		if user == loadtest.LinkOwner(run, loadtest.LinkFirst) || user == loadtest.LinkOwner(run, loadtest.LinkSecond) {
			t.Errorf("user %s owns one of the run's links", user)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	got, err := loadtest.ParseMetrics(strings.NewReader(`# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 4.2893056e+07
switchyard_queue_topic_lag_messages{group="g",topic="t"} 3
switchyard_store_database_bytes 1.048576e+06 1712345678000
switchyard_store_wal_bytes 0
broken_line
nan_gauge NaN
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"process_resident_memory_bytes": 42893056, "switchyard_store_database_bytes": 1048576, "switchyard_store_wal_bytes": 0}
	if len(got) != len(want) {
		t.Errorf("ParseMetrics = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
