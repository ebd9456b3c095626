package queue_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// pauseBundle is what the pause tests share: a database, its Admin, and
// counters of what the handlers handled, by queue or group.
type pauseBundle struct {
	db    *store.DB
	admin *queue.Admin
}

func setupPause(t *testing.T) *pauseBundle {
	t.Helper()
	db := storetest.New(t)
	return &pauseBundle{db: db, admin: queue.NewAdmin(queue.AdminOpts{DB: db})}
}

// counting starts a worker on q that counts the messages it handles.
func counting(t *testing.T, q *queue.Queue) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	start(t, q, queue.WorkerOpts{Concurrency: 1, PollInterval: 20 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
		n.Add(1)
		return nil
	}})
	return &n
}

func sendN(t *testing.T, q *queue.Queue, n int) {
	t.Helper()
	for i := range n {
		if _, err := q.Send(context.Background(), queue.Message{Body: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func (b *pauseBundle) pause(t *testing.T, target queue.PauseTarget, by string) queue.PauseState {
	t.Helper()
	st, err := b.admin.Pause(context.Background(), target, queue.PauseOpts{By: by, Reason: "deploying the consumer"})
	if err != nil {
		t.Fatalf("Pause(%v): %v", target, err)
	}
	return st
}

func (b *pauseBundle) resume(t *testing.T, target queue.PauseTarget) {
	t.Helper()
	if _, err := b.admin.Resume(context.Background(), target); err != nil {
		t.Fatalf("Resume(%v): %v", target, err)
	}
}

func queueStatsOf(t *testing.T, a *queue.Admin, name string) queue.QueueStats {
	t.Helper()
	st, err := a.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range st.Queues {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("queue %s not in the statistics", name)
	return queue.QueueStats{}
}

func TestPauseQueue(t *testing.T) {
	t.Parallel()

	t.Run("a paused queue delivers nothing while another queue flows, and resume delivers its messages", func(t *testing.T) {
		t.Parallel()
		b := setupPause(t)
		held := queue.New(queue.NewOpts{DB: b.db, Name: "sender.flow"})
		flowing := queue.New(queue.NewOpts{DB: b.db, Name: "receiver.flow"})
		heldN, flowingN := counting(t, held), counting(t, flowing)

		st := b.pause(t, queue.PauseTarget{Queue: "sender.flow"}, "console")
		if !st.Paused || st.By != "console" || st.Reason != "deploying the consumer" || st.At.IsZero() {
			t.Fatalf("Pause returned %+v", st)
		}
		// The paused queue's messages are sent first, so that a pause that did
		// not hold would show before the other queue's last one is handled.
		sendN(t, held, 5)
		sendN(t, flowing, 20)
		testwait.Until(t, 10*time.Second, "the other queue's 20 messages handled", func() bool { return flowingN.Load() == 20 })
		// The paused queue's worker was woken by each of its sends before
		// the other queue's 20 were handled one by one: nothing delivered.
		qs := queueStatsOf(t, b.admin, "sender.flow")
		if n := heldN.Load(); n != 0 || qs.Ready != 5 || !qs.Pause.Paused || qs.Pause.By != "console" {
			t.Fatalf("the paused queue delivered %d message(s); its statistics: %+v", n, qs)
		}

		b.resume(t, queue.PauseTarget{Queue: "sender.flow"})
		testwait.Until(t, 10*time.Second, "the paused queue's messages handled after the resume", func() bool { return heldN.Load() == 5 })
		if qs := queueStatsOf(t, b.admin, "sender.flow"); qs.Pause.Paused {
			t.Fatalf("resumed queue still shows paused: %+v", qs.Pause)
		}
	})

	t.Run("a resume wakes the worker at once, not at its next poll", func(t *testing.T) {
		t.Parallel()
		b := setupPause(t)
		q := queue.New(queue.NewOpts{DB: b.db, Name: "slow.poll"})
		var handled atomic.Int64
		start(t, q, queue.WorkerOpts{PollInterval: time.Hour, Handler: func(ctx context.Context, m queue.Message) error {
			handled.Add(1)
			return nil
		}})
		marker := queue.New(queue.NewOpts{DB: b.db, Name: "marker"})
		markers := counting(t, marker)
		b.pause(t, queue.PauseTarget{Queue: "slow.poll"}, "admin API")
		sendN(t, q, 3)
		// Each send woke the worker, whose receive found the queue paused.
		// A message sent to another queue afterwards and handled (a receive
		// and an acknowledgement through the same writer) lets those
		// receives finish first; then, with an hour's poll, only the resume's
		// wake-up can deliver within the wait.
		sendN(t, marker, 1)
		testwait.Until(t, 5*time.Second, "the marker handled", func() bool { return markers.Load() == 1 })
		if qs := queueStatsOf(t, b.admin, "slow.poll"); qs.Ready != 3 || handled.Load() != 0 {
			t.Fatalf("paused: %d handled, statistics %+v", handled.Load(), qs)
		}
		b.resume(t, queue.PauseTarget{Queue: "slow.poll"})
		testwait.Until(t, 10*time.Second, "the messages handled after the resume", func() bool { return handled.Load() == 3 })
	})

	t.Run("pausing a paused queue keeps who paused it first and when", func(t *testing.T) {
		t.Parallel()
		b := setupPause(t)
		queue.New(queue.NewOpts{DB: b.db, Name: "twice"})
		first := b.pause(t, queue.PauseTarget{Queue: "twice"}, "console")
		second, err := b.admin.Pause(context.Background(), queue.PauseTarget{Queue: "twice"}, queue.PauseOpts{By: "admin API", Reason: "other"})
		if err != nil {
			t.Fatal(err)
		}
		if !second.At.Equal(first.At) || second.By != "console" || second.Reason != first.Reason {
			t.Fatalf("second pause = %+v, first = %+v", second, first)
		}
		b.resume(t, queue.PauseTarget{Queue: "twice"})
		if st, err := b.admin.Resume(context.Background(), queue.PauseTarget{Queue: "twice"}); err != nil || st.Paused {
			t.Fatalf("resuming a running queue = %+v, %v", st, err)
		}
	})

	t.Run("an unknown queue or group is not found", func(t *testing.T) {
		t.Parallel()
		b := setupPause(t)
		newTopic(t, b.db, "t", 1)
		for _, target := range []queue.PauseTarget{{Queue: "nope"}, {Queue: "t", Group: "nope"}, {Queue: "nope", Group: "g"}} {
			if _, err := b.admin.Pause(context.Background(), target, queue.PauseOpts{By: "console"}); !errorsIsNotFound(err) {
				t.Errorf("Pause(%v) = %v, want ErrNotFound", target, err)
			}
			if _, err := b.admin.Resume(context.Background(), target); !errorsIsNotFound(err) {
				t.Errorf("Resume(%v) = %v, want ErrNotFound", target, err)
			}
		}
	})

	t.Run("the pause survives a restart and holds for a second instance on the database", func(t *testing.T) {
		t.Parallel()
		b := setupPause(t)
		queue.New(queue.NewOpts{DB: b.db, Name: "shared"})
		st := b.pause(t, queue.PauseTarget{Queue: "shared"}, "console")

		// Another handle shares no memory with the first: a restarted
		// process, or a second instance.
		other := openHandle(t, b.db)
		otherAdmin := queue.NewAdmin(queue.AdminOpts{DB: other})
		got, err := otherAdmin.PauseOf(context.Background(), queue.PauseTarget{Queue: "shared"})
		if err != nil || !got.Paused || got.By != "console" || !got.At.Equal(st.At) {
			t.Fatalf("the second instance reads %+v, %v; want %+v", got, err, st)
		}
		q2 := queue.New(queue.NewOpts{DB: other, Name: "shared"})
		n2 := counting(t, q2)
		q1 := queue.New(queue.NewOpts{DB: b.db, Name: "shared"})
		n1 := counting(t, q1)
		sendN(t, q2, 4)
		sendN(t, q1, 4)
		flowing := queue.New(queue.NewOpts{DB: other, Name: "other.flowing"})
		flowingN := counting(t, flowing)
		sendN(t, flowing, 10)
		testwait.Until(t, 10*time.Second, "the second instance's other queue flows", func() bool { return flowingN.Load() == 10 })
		if qs := queueStatsOf(t, otherAdmin, "shared"); qs.Ready != 8 || !qs.Pause.Paused {
			t.Fatalf("the paused queue as the second instance sees it: %+v", qs)
		}
		if n1.Load()+n2.Load() != 0 {
			t.Fatalf("the paused queue delivered %d + %d", n1.Load(), n2.Load())
		}

		// Resumed by the second instance: the first one's worker finds the
		// messages too (at its poll on SQLite, by the broadcast on PostgreSQL).
		if _, err := otherAdmin.Resume(context.Background(), queue.PauseTarget{Queue: "shared"}); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "all eight handled after the resume", func() bool { return n1.Load()+n2.Load() == 8 })
	})
}

func errorsIsNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), queue.ErrNotFound.Error())
}

func TestPauseGroup(t *testing.T) {
	t.Parallel()

	for _, mode := range []string{"Handler", "Process"} {
		t.Run("a paused group with a "+mode+" receives nothing while another group of the topic flows, and resume delivers", func(t *testing.T) {
			t.Parallel()
			b := setupPause(t)
			topic := newTopic(t, b.db, "pin.identity.users.v1", 3)
			var pausedN, flowingN atomic.Int64
			opts := func(group string, n *atomic.Int64) queue.SubscribeOpts {
				o := queue.SubscribeOpts{Group: group}
				if mode == "Handler" {
					o.Handler = func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
						b.db.AfterCommit(tx, func() { n.Add(1) })
						return nil
					}
				} else {
					o.Process = func(ctx context.Context, r queue.Record) error {
						n.Add(1)
						return nil
					}
				}
				return o
			}
			// The group exists (and is paused) before its subscriber starts.
			if _, err := topic.CreateGroup(context.Background(), "paused", queue.StartEarliest); err != nil {
				t.Fatal(err)
			}
			b.pause(t, queue.PauseTarget{Queue: "pin.identity.users.v1", Group: "paused"}, "console")
			subscribe(t, topic, opts("paused", &pausedN))
			subscribe(t, topic, opts("flowing", &flowingN))
			for i := range 30 {
				if _, err := topic.Publish(context.Background(), fmt.Sprint("user-", i), []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
			}
			testwait.Until(t, 10*time.Second, "the other group handles all 30", func() bool { return flowingN.Load() == 30 })
			gs := groupStatsOf(t, b.admin, "pin.identity.users.v1", "paused")
			if !gs.Pause.Paused || gs.Pause.By != "console" || gs.Lag != 30 {
				t.Fatalf("paused group's statistics: pause %+v, lag %d", gs.Pause, gs.Lag)
			}
			if n := pausedN.Load(); n != 0 {
				t.Fatalf("the paused group handled %d record(s)", n)
			}

			b.resume(t, queue.PauseTarget{Queue: "pin.identity.users.v1", Group: "paused"})
			testwait.Until(t, 10*time.Second, "the paused group handles all 30 after the resume", func() bool { return pausedN.Load() == 30 })
		})
	}

	t.Run("a group paused while its subscriber runs stops taking records, in another instance too", func(t *testing.T) {
		t.Parallel()
		b := setupPause(t)
		newTopic(t, b.db, "t", 2)
		// The subscribers run on a handle of their own: the pause reaches
		// them through the database, not through this process's memory, and
		// the resume at their next poll (on PostgreSQL by the broadcast).
		other := openHandle(t, b.db)
		topic := newTopic(t, other, "t", 2)
		var n, flowing atomic.Int64
		counter := func(c *atomic.Int64) queue.RecordHandlerFunc {
			return func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
				other.AfterCommit(tx, func() { c.Add(1) })
				return nil
			}
		}
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: counter(&n)})
		subscribe(t, topic, queue.SubscribeOpts{Group: "flowing", Handler: counter(&flowing)})
		if _, err := topic.Publish(context.Background(), "k", []byte(`1`)); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "the first record handled", func() bool { return n.Load() == 1 })
		b.pause(t, queue.PauseTarget{Queue: "t", Group: "g"}, "admin API")
		// Published on the subscribers' handle, so that both groups are
		// woken at once: the paused one has as long as the other to go wrong.
		for i := range 10 {
			if _, err := topic.Publish(context.Background(), fmt.Sprint("k", i), []byte(`2`)); err != nil {
				t.Fatal(err)
			}
		}
		testwait.Until(t, 10*time.Second, "the other group handles the ten", func() bool { return flowing.Load() == 11 })
		if got := n.Load(); got != 1 {
			t.Fatalf("the paused group handled %d record(s) after the pause", got-1)
		}
		if gs := groupStatsOf(t, b.admin, "t", "g"); gs.Lag != 10 || gs.Pause.By != "admin API" {
			t.Fatalf("paused group: lag %d, pause %+v", gs.Lag, gs.Pause)
		}
		b.resume(t, queue.PauseTarget{Queue: "t", Group: "g"})
		testwait.Until(t, 10*time.Second, "the ten handled after the resume", func() bool { return n.Load() == 11 })
	})

	t.Run("deleting a group forgets its pause", func(t *testing.T) {
		t.Parallel()
		b := setupPause(t)
		topic := newTopic(t, b.db, "t", 1)
		if _, err := topic.CreateGroup(context.Background(), "g", queue.StartEarliest); err != nil {
			t.Fatal(err)
		}
		b.pause(t, queue.PauseTarget{Queue: "t", Group: "g"}, "console")
		if err := topic.DeleteGroup(context.Background(), "g"); err != nil {
			t.Fatal(err)
		}
		if n := count(t, b.db, `select count(*) from queue_pauses`); n != 0 {
			t.Fatalf("%d pause row(s) left", n)
		}
	})
}

func groupStatsOf(t *testing.T, a *queue.Admin, topic, group string) queue.GroupStats {
	t.Helper()
	st, err := a.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range st.Topics {
		for _, g := range ts.Groups {
			if ts.Name == topic && g.Group == group {
				return g
			}
		}
	}
	t.Fatalf("group %s/%s not in the statistics", topic, group)
	return queue.GroupStats{}
}

func TestPauseAPI(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	api := adminAPI(t, db)
	queue.New(queue.NewOpts{DB: db, Name: "sender.flow"})
	topic := newTopic(t, db, "t", 2)
	if _, err := topic.CreateGroup(context.Background(), "g", queue.StartEarliest); err != nil {
		t.Fatal(err)
	}
	bearer := func(method, url, body string) reply {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer secret")
		req.Header.Set("Content-Type", "application/json")
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

	t.Run("pausing a queue answers its state, and pausing it again the same state", func(t *testing.T) {
		r := bearer(http.MethodPost, api+"/queues/sender.flow/pause", `{"reason":"provider outage"}`)
		if r.status != http.StatusOK || r.body["paused"] != true || r.body["pausedBy"] != "admin API" ||
			r.body["pauseReason"] != "provider outage" || r.body["queue"] != "sender.flow" || r.body["pausedAt"] == nil {
			t.Fatalf("pause: %d %s", r.status, r.raw)
		}
		again := call(t, http.MethodPost, api+"/queues/sender.flow/pause", "")
		if again.status != http.StatusOK || again.body["pausedAt"] != r.body["pausedAt"] || again.body["pausedBy"] != "admin API" {
			t.Fatalf("second pause: %d %s (first %s)", again.status, again.raw, r.raw)
		}
	})

	t.Run("the queues listing shows the pause", func(t *testing.T) {
		r := call(t, http.MethodGet, api+"/queues", "")
		var found bool
		for _, q := range r.list("queues") {
			if q["name"] == "sender.flow" {
				found = true
				if q["paused"] != true || q["pausedBy"] != "admin API" || q["pausedAt"] == nil {
					t.Fatalf("listed: %v", q)
				}
			}
		}
		if !found {
			t.Fatalf("sender.flow not listed: %s", r.raw)
		}
	})

	t.Run("resuming answers the running state, twice", func(t *testing.T) {
		for range 2 {
			r := call(t, http.MethodPost, api+"/queues/sender.flow/resume", "")
			if r.status != http.StatusOK || r.body["paused"] != false || r.body["pausedAt"] != nil || r.body["pausedBy"] != "" {
				t.Fatalf("resume: %d %s", r.status, r.raw)
			}
		}
	})

	t.Run("a group is paused and resumed by its own routes, and the topics show it", func(t *testing.T) {
		r := call(t, http.MethodPost, api+"/topics/t/groups/g/pause", `{}`)
		if r.status != http.StatusOK || r.body["paused"] != true || r.body["pausedBy"] != "console" || r.body["topic"] != "t" || r.body["group"] != "g" {
			t.Fatalf("group pause: %d %s", r.status, r.raw)
		}
		topics := call(t, http.MethodGet, api+"/topics", "")
		if !strings.Contains(topics.raw, `"group":"g"`) || !strings.Contains(topics.raw, `"paused":true`) {
			t.Fatalf("topics: %s", topics.raw)
		}
		groups := call(t, http.MethodGet, api+"/topics/t/groups", "")
		if gs := groups.list("groups"); len(gs) != 1 || gs[0]["paused"] != true || gs[0]["pausedBy"] != "console" {
			t.Fatalf("groups: %s", groups.raw)
		}
		r = call(t, http.MethodPost, api+"/topics/t/groups/g/resume", "")
		if r.status != http.StatusOK || r.body["paused"] != false {
			t.Fatalf("group resume: %d %s", r.status, r.raw)
		}
	})

	t.Run("unknown queues and groups are 404, a bad body 400", func(t *testing.T) {
		for _, path := range []string{"/queues/nope/pause", "/queues/nope/resume", "/topics/t/groups/nope/pause",
			"/topics/t/groups/nope/resume", "/topics/nope/groups/g/pause"} {
			if r := call(t, http.MethodPost, api+path, ""); r.status != http.StatusNotFound || r.errorCode() != "not_found" {
				t.Errorf("POST %s: %d %s", path, r.status, r.raw)
			}
		}
		if r := call(t, http.MethodPost, api+"/queues/sender.flow/pause", `{"why":"x"}`); r.status != http.StatusBadRequest {
			t.Errorf("unknown field: %d %s", r.status, r.raw)
		}
		if r := call(t, http.MethodPost, api+"/queues/sender.flow/pause", `{"reason":"`+strings.Repeat("x", 501)+`"}`); r.status != http.StatusBadRequest {
			t.Errorf("long reason: %d %s", r.status, r.raw)
		}
	})
}
