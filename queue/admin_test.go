package queue_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// adminAPI serves the admin routes the way web/ mounts them, under /admin/api.
func adminAPI(t testing.TB, db *store.DB) string {
	t.Helper()
	r := mux.NewRouter()
	queue.NewAdmin(queue.AdminOpts{DB: db}).AdminRoutes(r.PathPrefix("/admin/api").Subrouter())
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL + "/admin/api"
}

type reply struct {
	status int
	body   map[string]any
	raw    string
}

func call(t testing.TB, method, url, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func (r reply) list(key string) []map[string]any {
	items, _ := r.body[key].([]any)
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		m, _ := it.(map[string]any)
		out = append(out, m)
	}
	return out
}

func (r reply) errorCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func TestAdminQueues(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	api := adminAPI(t, db)
	ctx := t.Context()
	q := queue.New(queue.NewOpts{DB: db, Name: "sender.flow"})
	first, _ := q.Send(ctx, queue.Message{Body: []byte(`{"n":1}`), OrderKey: "chat-1"})
	if _, err := q.Send(ctx, queue.Message{Body: []byte(`{"n":2}`), OrderKey: "chat-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Send(ctx, queue.Message{Body: []byte(`{"n":3}`), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	handling := make(chan queue.ID, 1)
	start(t, q, queue.WorkerOpts{Concurrency: 1, PollInterval: time.Hour, Handler: func(ctx context.Context, m queue.Message) error {
		handling <- m.ID
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}})
	if id := <-handling; id != first.ID {
		t.Fatalf("the worker took %s, want the first message %s", id, first.ID)
	}
	if _, err := q.Send(ctx, queue.Message{Body: []byte("plain text")}); err != nil {
		t.Fatal(err)
	}

	t.Run("listing queues counts ready, delayed, held and in-flight messages", func(t *testing.T) {
		r := call(t, http.MethodGet, api+"/queues", "")
		if r.status != http.StatusOK {
			t.Fatalf("GET /queues = %d %s", r.status, r.raw)
		}
		var got map[string]any
		for _, qs := range r.list("queues") {
			if qs["name"] == "sender.flow" {
				got = qs
			}
		}
		want := map[string]float64{"ready": 1, "delayed": 1, "held": 1, "inFlight": 1, "dead": 0}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("sender.flow %s = %v, want %v (all: %v)", k, got[k], v, got)
			}
		}
		if got["oldestAt"] == nil {
			t.Errorf("oldestAt missing: %v", got)
		}
	})

	t.Run("listing messages by state shows payload, attempts and order key", func(t *testing.T) {
		r := call(t, http.MethodGet, api+"/queues/sender.flow/messages?state=held", "")
		msgs := r.list("messages")
		if r.status != http.StatusOK || len(msgs) != 1 {
			t.Fatalf("held messages: %d %s", r.status, r.raw)
		}
		m := msgs[0]
		if m["state"] != "held" || m["orderKey"] != "chat-1" || m["payloadEncoding"] != "json" || fmt.Sprint(m["payload"]) != "map[n:2]" {
			t.Errorf("held message %v", m)
		}
		r = call(t, http.MethodGet, api+"/queues/sender.flow/messages", "")
		states := map[string]int{}
		for _, m := range r.list("messages") {
			states[m["state"].(string)]++
			if m["payloadEncoding"] == "text" && m["payload"] != "plain text" {
				t.Errorf("text payload shown as %v", m["payload"])
			}
		}
		if fmt.Sprint(states) != "map[delayed:1 held:1 inflight:1 ready:1]" {
			t.Errorf("states of all messages: %v", states)
		}
		inflight := call(t, http.MethodGet, api+"/queues/sender.flow/messages?state=inflight", "").list("messages")
		if len(inflight) != 1 || inflight[0]["id"] != string(first.ID) || inflight[0]["attempts"] != float64(1) {
			t.Errorf("in-flight messages %v, want the first with 1 attempt", inflight)
		}
	})

	t.Run("a bad state is a 400 and an unknown queue a 404", func(t *testing.T) {
		if r := call(t, http.MethodGet, api+"/queues/sender.flow/messages?state=lost", ""); r.status != http.StatusBadRequest || r.errorCode() != "bad_request" {
			t.Errorf("bad state: %d %s", r.status, r.raw)
		}
		if r := call(t, http.MethodGet, api+"/queues/sender.flow/messages?limit=0", ""); r.status != http.StatusBadRequest {
			t.Errorf("limit 0: %d %s", r.status, r.raw)
		}
		for _, path := range []string{"/queues/nope/messages", "/queues/nope/dlq/redrive", "/queues/nope/purge"} {
			method := http.MethodPost
			if strings.HasSuffix(path, "messages") {
				method = http.MethodGet
			}
			if r := call(t, method, api+path, ""); r.status != http.StatusNotFound || r.errorCode() != "not_found" {
				t.Errorf("%s %s = %d %s, want 404", method, path, r.status, r.raw)
			}
		}
	})
}

func TestAdminDeadLetters(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	api := adminAPI(t, db)
	q := queue.New(queue.NewOpts{DB: db, Name: "receiver.flow"})
	var fixed = make(chan struct{})
	handled := make(chan string, 10)
	start(t, q, queue.WorkerOpts{Handler: func(ctx context.Context, m queue.Message) error {
		select {
		case <-fixed:
			handled <- string(m.Body)
			return nil
		default:
			return queue.Permanent(errors.New("envelope version 2"))
		}
	}})
	for i := range 3 {
		if _, err := q.Send(t.Context(), queue.Message{Body: fmt.Appendf(nil, `{"i":%d}`, i)}); err != nil {
			t.Fatal(err)
		}
	}
	var dead []map[string]any
	testwait.Until(t, 5*time.Second, "three dead letters", func() bool {
		dead = call(t, http.MethodGet, api+"/queues/receiver.flow/messages?state=dead", "").list("messages")
		return len(dead) == 3
	})
	if d := dead[0]; d["state"] != "dead" || d["attempts"] != float64(1) || !strings.Contains(d["lastError"].(string), "envelope version 2") || d["deadAt"] == nil {
		t.Errorf("dead letter %v", d)
	}
	close(fixed)

	t.Run("redriving one dead letter by id", func(t *testing.T) {
		r := call(t, http.MethodPost, api+"/queues/receiver.flow/dlq/"+dead[0]["id"].(string)+"/redrive", "")
		if r.status != http.StatusOK || r.body["redriven"] != float64(1) {
			t.Fatalf("redrive one: %d %s", r.status, r.raw)
		}
		select {
		case <-handled:
		case <-time.After(5 * time.Second):
			t.Fatal("redriven message not handled")
		}
		if r := call(t, http.MethodPost, api+"/queues/receiver.flow/dlq/m_unknown/redrive", ""); r.status != http.StatusNotFound {
			t.Errorf("redrive of an unknown id: %d %s, want 404", r.status, r.raw)
		}
	})

	t.Run("redriving all and purging", func(t *testing.T) {
		r := call(t, http.MethodPost, api+"/queues/receiver.flow/dlq/redrive", "")
		if r.status != http.StatusOK || r.body["redriven"] != float64(2) {
			t.Fatalf("redrive all: %d %s", r.status, r.raw)
		}
		for range 2 {
			select {
			case <-handled:
			case <-time.After(5 * time.Second):
				t.Fatal("redriven messages not handled")
			}
		}
		if r := call(t, http.MethodPost, api+"/queues/receiver.flow/dlq/purge", ""); r.status != http.StatusOK || r.body["purged"] != float64(0) {
			t.Errorf("purge of an empty DLQ: %d %s", r.status, r.raw)
		}
	})

	t.Run("purging a queue drops its live messages", func(t *testing.T) {
		p := queue.New(queue.NewOpts{DB: db, Name: "parked"})
		for i := range 4 {
			if _, err := p.Send(t.Context(), queue.Message{Body: []byte("x"), OrderKey: fmt.Sprint(i % 2)}); err != nil {
				t.Fatal(err)
			}
		}
		r := call(t, http.MethodPost, api+"/queues/parked/purge", "")
		if r.status != http.StatusOK || r.body["purged"] != float64(4) {
			t.Fatalf("purge: %d %s", r.status, r.raw)
		}
		if n := liveMessages(t, db, "parked"); n != 0 {
			t.Errorf("%d messages left", n)
		}
		if n := count(t, db, `select count(*) from queue_order where queue = 'parked'`); n != 0 {
			t.Errorf("%d order slots left", n)
		}
	})
}

func TestAdminTopics(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	api := adminAPI(t, db)
	topic := newTopic(t, db, "pin.identity.users.v1", 6)

	t.Run("publishing keys by aggregateId and reading the record back raw", func(t *testing.T) {
		body := `{"aggregateId":"3f2a","UserId":"3f2a","Version":1,"Name":{"FirstName":"Анна"}}`
		r := call(t, http.MethodPost, api+"/topics/pin.identity.users.v1/messages", body)
		want := queue.PartitionFor("3f2a", 6)
		if r.status != http.StatusAccepted || r.body["partition"] != float64(want) || r.body["offset"] != float64(0) {
			t.Fatalf("publish: %d %s; want 202 at partition %d offset 0", r.status, r.raw, want)
		}
		r = call(t, http.MethodGet, fmt.Sprintf("%s/topics/pin.identity.users.v1/messages?partition=%d&fromOffset=0&limit=10", api, want), "")
		msgs := r.list("messages")
		if r.status != http.StatusOK || len(msgs) != 1 {
			t.Fatalf("read: %d %s", r.status, r.raw)
		}
		if msgs[0]["key"] != "3f2a" || msgs[0]["publishedAt"] == nil {
			t.Errorf("record %v", msgs[0])
		}
		if !strings.Contains(r.raw, `"value":`+body) {
			t.Errorf("value not returned as the published JSON: %s", r.raw)
		}
		recs, err := topic.Read(t.Context(), queue.ReadFilter{Partition: &want})
		if err != nil || len(recs) != 1 || string(recs[0].Value) != body {
			t.Errorf("stored record %+v, %v", recs, err)
		}
	})

	t.Run("a key parameter wins over aggregateId", func(t *testing.T) {
		r := call(t, http.MethodPost, api+"/topics/pin.identity.users.v1/messages?key=other", `{"aggregateId":"3f2a"}`)
		if r.status != http.StatusAccepted || r.body["partition"] != float64(queue.PartitionFor("other", 6)) {
			t.Errorf("publish with ?key: %d %s", r.status, r.raw)
		}
	})

	t.Run("bad bodies are 400s and unknown topics 404s", func(t *testing.T) {
		for name, body := range map[string]string{
			"no key":            `{"UserId":"x"}`,
			"an empty key":      `{"aggregateId":""}`,
			"a non-string key":  `{"aggregateId":42}`,
			"malformed JSON":    `{"aggregateId":`,
			"an empty body":     ``,
			"two JSON values":   `{"aggregateId":"x"} {}`,
			"a string, no keys": `"x"`,
		} {
			if r := call(t, http.MethodPost, api+"/topics/pin.identity.users.v1/messages", body); r.status != http.StatusBadRequest || r.errorCode() != "bad_request" {
				t.Errorf("%s: %d %s, want 400", name, r.status, r.raw)
			}
		}
		if r := call(t, http.MethodPost, api+"/topics/no.such.topic/messages", `{"aggregateId":"x"}`); r.status != http.StatusNotFound {
			t.Errorf("publish to an unknown topic: %d %s", r.status, r.raw)
		}
		if r := call(t, http.MethodGet, api+"/topics/no.such.topic/messages", ""); r.status != http.StatusNotFound {
			t.Errorf("read of an unknown topic: %d %s", r.status, r.raw)
		}
		if r := call(t, http.MethodGet, api+"/topics/pin.identity.users.v1/messages?partition=6", ""); r.status != http.StatusBadRequest {
			t.Errorf("read of partition 6 of 6: %d %s", r.status, r.raw)
		}
	})

	t.Run("topics list partitions and each group's lag, dead letters redrive per group", func(t *testing.T) {
		var fixed = make(chan struct{})
		subscribe(t, topic, queue.SubscribeOpts{Group: "referral-identity-users", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			select {
			case <-fixed:
				return nil
			default:
				return queue.Permanent(errors.New("UserId is Guid.Empty"))
			}
		}})
		var dead []map[string]any
		testwait.Until(t, 5*time.Second, "two dead letters", func() bool {
			dead = call(t, http.MethodGet, api+"/topics/pin.identity.users.v1/groups/referral-identity-users/dlq", "").list("messages")
			return len(dead) == 2
		})
		if d := dead[0]; d["group"] != "referral-identity-users" || d["partition"] == nil || d["offset"] == nil || d["key"] == "" {
			t.Errorf("group dead letter %v", d)
		}
		r := call(t, http.MethodGet, api+"/topics", "")
		topics := r.list("topics")
		if r.status != http.StatusOK || len(topics) != 1 {
			t.Fatalf("GET /topics: %d %s", r.status, r.raw)
		}
		groups := topics[0]["groups"].([]any)
		g := groups[0].(map[string]any)
		if g["group"] != "referral-identity-users" || g["lag"] != float64(0) || g["dead"] != float64(2) || len(g["partitions"].([]any)) != 6 {
			t.Errorf("group %v", g)
		}
		if n := len(topics[0]["partitions"].([]any)); n != 6 {
			t.Errorf("%d partitions listed, want 6", n)
		}
		// The subscriber is the group's one member and owns every
		// partition, under a lease that names its process.
		members, _ := g["members"].([]any)
		prefix := fmt.Sprintf("sub/%s:%d:", hostname(t), os.Getpid())
		if len(members) != 1 || !strings.HasPrefix(fmt.Sprint(members[0]), prefix) {
			t.Errorf("group members %v, want the one subscriber, named %s…", g["members"], prefix)
		}
		for _, p := range g["partitions"].([]any) {
			p := p.(map[string]any)
			if len(members) == 1 && (p["owner"] != members[0] || p["leaseExpiresAt"] == nil) {
				t.Errorf("partition %v: owner %v until %v, want %v", p["partition"], p["owner"], p["leaseExpiresAt"], members[0])
			}
		}
		close(fixed)
		r = call(t, http.MethodPost, api+"/topics/pin.identity.users.v1/groups/referral-identity-users/dlq/redrive", "")
		if r.status != http.StatusOK || r.body["redriven"] != float64(2) {
			t.Fatalf("redrive: %d %s", r.status, r.raw)
		}
		testwait.Until(t, 5*time.Second, "redriven records handled", func() bool {
			return count(t, db, `select count(*) from queue_group_retries`) == 0
		})
		if r := call(t, http.MethodPost, api+"/topics/pin.identity.users.v1/groups/nobody/dlq/redrive", ""); r.status != http.StatusNotFound {
			t.Errorf("redrive of an unknown group: %d %s", r.status, r.raw)
		}
	})
}

func TestStatsAndPrune(t *testing.T) {
	t.Parallel()
	db, clock := storetest.NewWithClock(t)
	admin := queue.NewAdmin(queue.AdminOpts{DB: db, KeyRetention: 24 * time.Hour, FailureRetention: 24 * time.Hour})
	topic, err := queue.NewTopic(t.Context(), queue.TopicOpts{DB: db, Name: "t", Partitions: 1, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := topic.Subscribe(t.Context(), queue.SubscribeOpts{Group: "g", Handler: func(context.Context, *sql.Tx, queue.Record) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}

	t.Run("retention removes old records only below every group's committed offset", func(t *testing.T) {
		db2, clock2 := storetest.NewWithClock(t)
		admin2 := queue.NewAdmin(queue.AdminOpts{DB: db2})
		tp, err := queue.NewTopic(t.Context(), queue.TopicOpts{DB: db2, Name: "t", Partitions: 1, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := tp.Subscribe(t.Context(), queue.SubscribeOpts{Group: "g", Handler: func(context.Context, *sql.Tx, queue.Record) error { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if _, err := tp.Publish(t.Context(), "k", fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tp.SeekGroup(t.Context(), "g", map[int]int64{0: 6}); err != nil {
			t.Fatal(err)
		}
		clock2.Advance(30 * time.Minute)
		if res, err := admin2.Prune(t.Context()); err != nil || res.Records != 0 {
			t.Fatalf("Prune within the retention = %+v, %v; want nothing removed", res, err)
		}
		clock2.Advance(time.Hour)
		res, err := admin2.Prune(t.Context())
		if err != nil || res.Records != 6 {
			t.Fatalf("Prune = %+v, %v; want the 6 finished records removed", res, err)
		}
		recs, _ := tp.Read(t.Context(), queue.ReadFilter{})
		if len(recs) != 4 || recs[0].Offset != 6 {
			t.Errorf("retained %d records from offset %d; want 4 from 6 (unfinished ones stay)", len(recs), recs[0].Offset)
		}
	})

	t.Run("retention removes the member leases that subscribers which died left behind, an hour after they expired", func(t *testing.T) {
		db2, clock2 := storetest.NewWithClock(t)
		admin2 := queue.NewAdmin(queue.AdminOpts{DB: db2})
		for _, l := range []struct {
			name, owner string
			ttl         time.Duration
		}{
			{"queue.member/t/g/sub/dead", "sub/dead", 30 * time.Second},
			{"queue.member/t/g/sub/alive", "sub/alive", 3 * time.Hour},
			{"queue.group/t/g/0", "sub/dead", 30 * time.Second},
			{"other.member/x", "x", 30 * time.Second},
		} {
			if held, err := db2.AcquireLease(t.Context(), l.name, l.owner, l.ttl); err != nil || !held {
				t.Fatalf("AcquireLease(%s) = %v, %v", l.name, held, err)
			}
		}
		clock2.Advance(time.Hour)
		if res, err := admin2.Prune(t.Context()); err != nil || res.Members != 0 {
			t.Fatalf("Prune within the hour = %+v, %v; want no member lease removed", res, err)
		}
		clock2.Advance(time.Minute)
		if res, err := admin2.Prune(t.Context()); err != nil || res.Members != 1 {
			t.Fatalf("Prune = %+v, %v; want the dead member's lease removed", res, err)
		}
		if n := count(t, db2, `select count(*) from store_leases where name = 'queue.member/t/g/sub/dead'`); n != 0 {
			t.Errorf("the dead member's lease is still there")
		}
		if n := count(t, db2, `select count(*) from store_leases`); n != 3 {
			t.Errorf("%d leases left, want the live member's, the partition's and the other package's", n)
		}
	})

	t.Run("retention removes old idempotency keys and failure records", func(t *testing.T) {
		q := queue.New(queue.NewOpts{DB: db, Name: "keys"})
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("x"), Key: "k"}); err != nil {
			t.Fatal(err)
		}
		f := queue.New(queue.NewOpts{DB: db, Name: "fails"})
		w := f.Start(t.Context(), queue.WorkerOpts{Handler: func(context.Context, queue.Message) error { return queue.Permanent(errors.New("no")) }})
		if _, err := f.Send(t.Context(), queue.Message{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 5*time.Second, "a failure recorded", func() bool { return count(t, db, `select count(*) from queue_failures`) == 1 })
		if err := w.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		clock.Advance(25 * time.Hour)
		res, err := admin.Prune(t.Context())
		if err != nil || res.Keys != 1 || res.Failures != 1 {
			t.Fatalf("Prune = %+v, %v; want the old key and the old failure removed", res, err)
		}
		r, err := q.Send(t.Context(), queue.Message{Body: []byte("x"), Key: "k"})
		if err != nil || r.Duplicate {
			t.Errorf("send after the key expired = %+v, %v; want a new message", r, err)
		}
	})

	t.Run("stats count a queue's delayed and dead messages and their age", func(t *testing.T) {
		q := queue.New(queue.NewOpts{DB: db, Name: "stats"})
		if _, err := q.Send(t.Context(), queue.Message{Body: []byte("x"), Delay: time.Minute}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(10 * time.Second)
		st, err := admin.Stats(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var got queue.QueueStats
		for _, s := range st.Queues {
			if s.Name == "stats" {
				got = s
			}
		}
		if got.Delayed != 1 || got.Ready != 0 || got.OldestAge != 10*time.Second {
			t.Errorf("stats %+v, want 1 delayed, 10 s old", got)
		}
		if len(st.Topics) != 1 || st.Topics[0].Name != "t" || len(st.Topics[0].Groups) != 1 {
			t.Errorf("topics %+v", st.Topics)
		}
	})
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown-host"
	}
	return h
}
