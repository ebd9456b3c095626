package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// groupTables are the tables that keep something for a consumer group, and
// the column that names its topic.
var groupTables = map[string]string{
	"queue_groups":        "topic",
	"queue_group_offsets": "topic",
	"queue_group_done":    "topic",
	"queue_group_retries": "topic",
	"queue_dead":          "queue",
	"queue_failures":      "queue",
}

// groupLag is the group's lag from the database, or -1 when there is no
// such group.
func groupLag(t testing.TB, topic *queue.Topic, group string) int64 {
	t.Helper()
	groups, err := topic.Groups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if g.Group == group {
			return g.Lag
		}
	}
	return -1
}

func groupRows(t testing.TB, db *store.DB, topic, group string) map[string]int {
	t.Helper()
	rows := map[string]int{}
	for table, col := range groupTables {
		rows[table] = count(t, db, fmt.Sprintf(`select count(*) from %s where %s = ? and grp = ?`, table, col), topic, group)
	}
	rows["store_leases"] = count(t, db, `select count(*) from store_leases where name like ?`, "queue.group/"+topic+"/"+group+"/%")
	return rows
}

func TestGroupLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("a group created without subscribing starts where asked, is listed, and creating it again moves nothing", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "groups.create", 2)
		for i := range 3 {
			if _, err := topic.Publish(t.Context(), fmt.Sprintf("k%d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		for _, g := range []struct {
			name  string
			start queue.StartPosition
		}{{"early", queue.StartEarliest}, {"late", queue.StartLatest}} {
			created, err := topic.CreateGroup(t.Context(), g.name, g.start)
			if err != nil || !created {
				t.Fatalf("CreateGroup(%s) = %v, %v; want created", g.name, created, err)
			}
		}
		if created, err := topic.CreateGroup(t.Context(), "late", queue.StartEarliest); err != nil || created {
			t.Fatalf("CreateGroup of an existing group = %v, %v; want not created, no error", created, err)
		}
		groups, err := topic.Groups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) != 2 || groups[0].Group != "early" || groups[1].Group != "late" {
			t.Fatalf("Groups = %+v, want early and late", groups)
		}
		if groups[0].Lag != 3 || groups[1].Lag != 0 {
			t.Errorf("lags %d and %d, want 3 (earliest) and 0 (latest, unmoved by the second create)", groups[0].Lag, groups[1].Lag)
		}
		for _, g := range groups {
			if g.Active || g.CreatedAt.IsZero() || len(g.Partitions) != 2 {
				t.Errorf("group %s: active %v, created %v, %d partitions; want idle, a creation time, 2 partitions",
					g.Group, g.Active, g.CreatedAt, len(g.Partitions))
			}
		}
		for _, bad := range []string{"", "a/b", "a b", "ключ", string(make([]byte, queue.MaxGroupName+1))} {
			if _, err := topic.CreateGroup(t.Context(), bad, queue.StartEarliest); err == nil {
				t.Errorf("CreateGroup(%q) created a group", bad)
			}
		}
	})

	t.Run("a group with a live subscriber, in this process or another, cannot be deleted until it stops", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		other := storetest.NewWith(t, store.Options{Path: db.Path()})
		topic := newTopic(t, db, "groups.active", 3)
		elsewhere := newTopic(t, other, "groups.active", 3)
		sub := subscribe(t, elsewhere, queue.SubscribeOpts{Group: "g", Handler: func(context.Context, *sql.Tx, queue.Record) error { return nil }})
		testwait.Until(t, 20*time.Second, "the subscriber holds the group's partitions", func() bool {
			groups, err := topic.Groups(t.Context())
			return err == nil && len(groups) == 1 && groups[0].Active
		})
		if err := topic.DeleteGroup(t.Context(), "g"); !errors.Is(err, queue.ErrGroupActive) {
			t.Fatalf("DeleteGroup of an active group = %v, want ErrGroupActive", err)
		}
		if rows := groupRows(t, db, "groups.active", "g"); rows["queue_groups"] != 1 || rows["queue_group_offsets"] != 3 {
			t.Fatalf("a refused delete changed the group: %v", rows)
		}
		if err := sub.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := topic.DeleteGroup(t.Context(), "g"); err != nil {
			t.Fatalf("DeleteGroup of a stopped group: %v", err)
		}
		if groups, err := topic.Groups(t.Context()); err != nil || len(groups) != 0 {
			t.Errorf("Groups after the delete = %+v, %v; want none", groups, err)
		}
		if err := topic.DeleteGroup(t.Context(), "g"); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("DeleteGroup of a deleted group = %v, want ErrNotFound", err)
		}
	})

	t.Run("a member that holds no partition yet makes a delete refuse too", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "groups.member", 1)
		if _, err := topic.CreateGroup(t.Context(), "g", queue.StartEarliest); err != nil {
			t.Fatal(err)
		}
		// A subscriber that has joined (its member lease, named as
		// members.go names it) and has not taken its share yet.
		const member, owner = "queue.member/groups.member/g/sub/joining", "sub/joining"
		if ok, err := db.AcquireLease(t.Context(), member, owner, time.Minute); err != nil || !ok {
			t.Fatalf("take the member lease: %v, %v", ok, err)
		}
		if err := topic.DeleteGroup(t.Context(), "g"); !errors.Is(err, queue.ErrGroupActive) {
			t.Fatalf("DeleteGroup with a live member = %v, want ErrGroupActive", err)
		}
		if err := db.ReleaseLease(t.Context(), member, owner); err != nil {
			t.Fatal(err)
		}
		if err := topic.DeleteGroup(t.Context(), "g"); err != nil {
			t.Fatalf("DeleteGroup once the member left: %v", err)
		}
	})

	t.Run("deleting a group removes its offsets, done marks, retries, dead letters, failures and leases, and nothing of another group", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "groups.delete", 1)
		// Offset 0 retries for an hour, 1 finishes ahead of it (a done
		// mark), 2 is dead-lettered; each failure is recorded.
		for _, key := range []string{"retry", "ok", "dead"} {
			if _, err := topic.Publish(t.Context(), key, []byte(key)); err != nil {
				t.Fatal(err)
			}
		}
		handle := func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			switch r.Key {
			case "retry":
				return queue.RetryAfter(time.Hour, errors.New("later"))
			case "dead":
				return queue.Permanent(errors.New("never"))
			}
			return nil
		}
		want := map[string]int{"queue_groups": 1, "queue_group_offsets": 1, "queue_group_done": 2, "queue_group_retries": 1,
			"queue_dead": 1, "queue_failures": 2, "store_leases": 0}
		for _, g := range []string{"g", "h"} {
			sub := subscribe(t, topic, queue.SubscribeOpts{Group: g, Handler: handle})
			testwait.Until(t, 20*time.Second, "group "+g+" retries one record, finished two and dead-lettered one", func() bool {
				rows := groupRows(t, db, "groups.delete", g)
				return rows["queue_group_retries"] == 1 && rows["queue_group_done"] == 2 && rows["queue_dead"] == 1
			})
			if err := sub.Stop(t.Context()); err != nil {
				t.Fatal(err)
			}
			if rows := groupRows(t, db, "groups.delete", g); fmt.Sprint(rows) != fmt.Sprint(want) {
				t.Fatalf("group %s keeps %v, want %v", g, rows, want)
			}
		}
		if err := topic.DeleteGroup(t.Context(), "g"); err != nil {
			t.Fatal(err)
		}
		for table, n := range groupRows(t, db, "groups.delete", "g") {
			if n != 0 {
				t.Errorf("%d rows of the deleted group left in %s", n, table)
			}
		}
		if rows := groupRows(t, db, "groups.delete", "h"); fmt.Sprint(rows) != fmt.Sprint(want) {
			t.Errorf("the other group keeps %v after the delete, want %v", rows, want)
		}
		// (The lag gauges are not looked at: a subscriber drops the gauges of
		// the partitions it gives up, so both groups' went at their Stop.)
		for name, labels := range map[string]map[string]string{
			"switchyard_queue_messages_received_total": {"queue": "groups.delete"},
		} {
			for group, want := range map[string]bool{"g": false, "h": true} {
				labels["group"] = group
				if _, ok := metricSeries(t, name, labels); ok != want {
					t.Errorf("%s of group %s exported: %v, want %v", name, group, ok, want)
				}
			}
		}
	})

	t.Run("retention keeps the records of an idle group until the group is deleted", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		topic, err := queue.NewTopic(t.Context(), queue.TopicOpts{DB: db, Name: "groups.retention", Partitions: 2, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topic.CreateGroup(t.Context(), "idle", queue.StartEarliest); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if _, err := topic.Publish(t.Context(), fmt.Sprintf("k%d", i), []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(2 * time.Hour)
		if res, err := admin.Prune(t.Context()); err != nil || res.Records != 0 {
			t.Fatalf("Prune with the idle group = %+v, %v; want every record kept for it", res, err)
		}
		if err := topic.DeleteGroup(t.Context(), "idle"); err != nil {
			t.Fatal(err)
		}
		if res, err := admin.Prune(t.Context()); err != nil || res.Records != 5 {
			t.Fatalf("Prune after the delete = %+v, %v; want the 5 expired records removed", res, err)
		}
	})

	t.Run("a subscriber of a deleted group creates it again at its start position", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "groups.again", 1)
		for i := range 3 {
			if _, err := topic.Publish(t.Context(), "k", fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		seen := make(chan int64, 10)
		record := func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
			seen <- r.Offset
			return nil
		}
		sub := subscribe(t, topic, queue.SubscribeOpts{Group: "g", Handler: record})
		testwait.Until(t, 20*time.Second, "the group consumed the log", func() bool { return groupLag(t, topic, "g") == 0 })
		if err := sub.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := topic.DeleteGroup(t.Context(), "g"); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			<-seen
		}
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Start: queue.StartEarliest, Handler: record})
		testwait.Until(t, 20*time.Second, "the recreated group consumed the log", func() bool { return groupLag(t, topic, "g") == 0 })
		close(seen)
		var again []int64
		for off := range seen {
			again = append(again, off)
		}
		if fmt.Sprint(again) != "[0 1 2]" {
			t.Errorf("the recreated group processed %v, want the retained log again from its start", again)
		}
	})
}

func TestAdminGroups(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	api := adminAPI(t, db)
	topic := newTopic(t, db, "groups.api", 2)
	if _, err := topic.Publish(t.Context(), "k", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	groups := api + "/topics/groups.api/groups"

	t.Run("creating a group answers 201 with the group, and again 200 with it unchanged", func(t *testing.T) {
		r := call(t, http.MethodPost, groups, `{"group":"audit","start":"latest"}`)
		if r.status != http.StatusCreated || r.body["group"] != "audit" || r.body["lag"] != float64(0) || r.body["active"] != false {
			t.Fatalf("create: %d %s", r.status, r.raw)
		}
		r = call(t, http.MethodPost, groups, `{"group":"audit","start":"earliest"}`)
		if r.status != http.StatusOK || r.body["lag"] != float64(0) {
			t.Fatalf("create again: %d %s; want 200 with the offsets unmoved", r.status, r.raw)
		}
		r = call(t, http.MethodPost, groups, `{"group":"replay"}`)
		if r.status != http.StatusCreated || r.body["lag"] != float64(1) {
			t.Fatalf("create without start: %d %s; want 201 from the earliest record", r.status, r.raw)
		}
	})

	t.Run("listing groups shows each with its lag, partitions and whether it is active", func(t *testing.T) {
		r := call(t, http.MethodGet, groups, "")
		list := r.list("groups")
		if r.status != http.StatusOK || len(list) != 2 || list[0]["group"] != "audit" || list[1]["group"] != "replay" {
			t.Fatalf("list: %d %s", r.status, r.raw)
		}
		if list[1]["createdAt"] == nil || len(list[1]["partitions"].([]any)) != 2 {
			t.Errorf("group %v", list[1])
		}
	})

	t.Run("bad input is a 400, a body not declared as JSON a 415, an unknown topic a 404", func(t *testing.T) {
		for name, body := range map[string]string{
			"no group":         `{"start":"latest"}`,
			"a slash":          `{"group":"a/b"}`,
			"an unknown start": `{"group":"x","start":"middle"}`,
			"an unknown field": `{"group":"x","from":"latest"}`,
			"malformed JSON":   `{"group":`,
		} {
			if r := call(t, http.MethodPost, groups, body); r.status != http.StatusBadRequest || r.errorCode() != "bad_request" {
				t.Errorf("%s: %d %s, want 400", name, r.status, r.raw)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, groups, nil)
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("a POST without Content-Type: %v %v, want 415", resp, err)
		} else {
			resp.Body.Close()
		}
		for _, c := range []struct{ method, path, body string }{
			{http.MethodPost, api + "/topics/no.such/groups", `{"group":"x"}`},
			{http.MethodGet, api + "/topics/no.such/groups", ""},
			{http.MethodDelete, api + "/topics/no.such/groups/x", ""},
			{http.MethodDelete, groups + "/nobody", ""},
		} {
			if r := call(t, c.method, c.path, c.body); r.status != http.StatusNotFound || r.errorCode() != "not_found" {
				t.Errorf("%s %s: %d %s, want 404", c.method, c.path, r.status, r.raw)
			}
		}
	})

	t.Run("deleting an active group is a 409, a stopped one a 204", func(t *testing.T) {
		sub := subscribe(t, topic, queue.SubscribeOpts{Group: "replay", Handler: func(context.Context, *sql.Tx, queue.Record) error { return nil }})
		testwait.Until(t, 20*time.Second, "the subscriber holds the group", func() bool {
			list := call(t, http.MethodGet, groups, "").list("groups")
			return len(list) == 2 && list[1]["active"] == true
		})
		if r := call(t, http.MethodDelete, groups+"/replay", ""); r.status != http.StatusConflict || r.errorCode() != "group_active" {
			t.Fatalf("delete of an active group: %d %s, want 409 group_active", r.status, r.raw)
		}
		if err := sub.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r := call(t, http.MethodDelete, groups+"/replay", ""); r.status != http.StatusNoContent || r.raw != "" {
			t.Fatalf("delete of a stopped group: %d %s, want 204", r.status, r.raw)
		}
		if list := call(t, http.MethodGet, groups, "").list("groups"); len(list) != 1 || list[0]["group"] != "audit" {
			t.Errorf("groups after the delete: %v", list)
		}
		if r := call(t, http.MethodDelete, groups+"/replay", ""); r.status != http.StatusNotFound {
			t.Errorf("delete again: %d %s, want 404", r.status, r.raw)
		}
	})
}
