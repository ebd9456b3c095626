package queue_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"switchyard/queue"
	"switchyard/queue/queuetest"
	"switchyard/store"
	"switchyard/store/storetest"
)

// seedDead writes n dead letters of queue (or of group on topic queue) whose
// payloads say their number, and returns their ids oldest first.
func seedDead(t testing.TB, db *store.DB, queueName, group string, n int) []string {
	t.Helper()
	ids, err := queuetest.SeedDead(t.Context(), db, queuetest.DeadOpts{Queue: queueName, Group: group, N: n,
		Body: func(i int) []byte { return fmt.Appendf(nil, `{"n":%d,"note":"letter number %d"}`, i, i) }})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func deadIDs(dead []queue.DeadLetter) []string {
	ids := make([]string, len(dead))
	for i, d := range dead {
		ids[i] = d.ID
	}
	return ids
}

func TestDeadLetterWindows(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	admin := queue.NewAdmin(queue.AdminOpts{DB: db})
	ids := seedDead(t, db, "q", "", 1000)
	seedDead(t, db, "other", "", 10)
	newest := slices.Clone(ids)
	slices.Reverse(newest)
	ctx := t.Context()

	t.Run("newest-first windows walk every dead letter once, in order, to the last", func(t *testing.T) {
		var seen []string
		f := queue.DeadFilter{Queue: "q", NewestFirst: true, Limit: 128}
		for range 20 {
			page, err := admin.ListDead(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, deadIDs(page)...)
			if len(page) < f.Limit {
				break
			}
			f.Before = page[len(page)-1].Cursor
		}
		if !slices.Equal(seen, newest) {
			t.Fatalf("walked %d dead letters, want the %d newest first", len(seen), len(newest))
		}
	})

	t.Run("a window after a cursor comes back oldest first, nearest the cursor", func(t *testing.T) {
		deep, err := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", NewestFirst: true, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		page, err := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", After: deep[900].Cursor, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := deadIDs(page), []string{newest[899], newest[898], newest[897]}; !slices.Equal(got, want) {
			t.Fatalf("after the 901st newest: %v, want %v", got, want)
		}
	})

	t.Run("the default list is still the oldest first", func(t *testing.T) {
		page, err := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", Limit: 2})
		if err != nil || !slices.Equal(deadIDs(page), ids[:2]) {
			t.Fatalf("got %v, %v; want %v", deadIDs(page), err, ids[:2])
		}
	})

	t.Run("the count says how many match and how many are newer than a window's first row", func(t *testing.T) {
		deep, _ := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", NewestFirst: true, Limit: 600})
		c, err := admin.CountDead(ctx, queue.DeadFilter{Queue: "q"}, deep[550].Cursor)
		if err != nil || c.Total != 1000 || c.Newer != 550 {
			t.Fatalf("count = %+v, %v; want 1000 in all, 550 newer", c, err)
		}
		c, _ = admin.CountDead(ctx, queue.DeadFilter{Queue: "q"}, "")
		if c.Newer != 0 {
			t.Errorf("newer than no cursor = %d, want 0", c.Newer)
		}
	})

	t.Run("a cursor the list did not give out is refused", func(t *testing.T) {
		for _, bad := range []string{"x", "2026-01-01~", "'; drop table queue_dead --~m_1"} {
			if _, err := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", Before: bad}); !errors.Is(err, queue.ErrBadCursor) {
				t.Errorf("cursor %q: %v, want ErrBadCursor", bad, err)
			}
		}
	})

	t.Run("search finds a dead letter by id, and by payload text with its count", func(t *testing.T) {
		page, err := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", Search: ids[123], NewestFirst: true})
		if err != nil || !slices.Equal(deadIDs(page), []string{ids[123]}) {
			t.Fatalf("by id: %v, %v", deadIDs(page), err)
		}
		// "number 12" is in letters 12, 120–129 and 1200+ (none here).
		f := queue.DeadFilter{Queue: "q", Search: "letter number 12", NewestFirst: true}
		page, _ = admin.ListDead(ctx, f)
		want := []string{ids[129], ids[128], ids[127], ids[126], ids[125], ids[124], ids[123], ids[122], ids[121], ids[120], ids[12]}
		if !slices.Equal(deadIDs(page), want) {
			t.Fatalf("by payload: %d found, want %d", len(page), len(want))
		}
		if c, err := admin.CountDead(ctx, f, page[3].Cursor); err != nil || c.Total != 11 || c.Newer != 3 {
			t.Fatalf("count of the search = %+v, %v; want 11, 3 newer than the 4th", c, err)
		}
		if page, _ := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", Search: "LETTER NUMBER", NewestFirst: true}); len(page) != 0 {
			t.Errorf("the search is case-sensitive, found %d", len(page))
		}
	})

	t.Run("a window is one range of the list index at any depth", func(t *testing.T) {
		deep, _ := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", NewestFirst: true, Limit: 1000})
		plan := storetest.SQLitePlan(t, db, queue.ListDeadQueryForTest(db, true), queue.ListDeadArgsForTest(queue.DeadFilter{Queue: "q", Before: deep[990].Cursor, Limit: 51})...)
		if db.Postgres() {
			t.Skip("PostgreSQL's plan depends on its statistics; see docs/queue.md for its EXPLAIN")
		}
		if !strings.Contains(plan, "queue_dead_list_idx (queue=? AND grp=? AND (dead_at,id)<(?,?))") || strings.Contains(plan, "TEMP B-TREE") {
			t.Fatalf("plan %q: want one range of queue_dead_list_idx and no sort", plan)
		}
	})
}

func TestDeadLetterBulk(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("a redrive of chosen ids moves exactly those, back into their queue", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		ids := seedDead(t, db, "q", "", 50)
		chosen := []string{ids[3], ids[17], ids[42], "m_nope"}
		n, err := admin.Redrive(ctx, queue.DeadFilter{Queue: "q", IDs: chosen})
		if err != nil || n != 3 {
			t.Fatalf("Redrive = %d, %v; want 3", n, err)
		}
		left, _ := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", Limit: 1000})
		if len(left) != 47 || slices.ContainsFunc(left, func(d queue.DeadLetter) bool { return slices.Contains(chosen, d.ID) }) {
			t.Fatalf("%d dead letters left, chosen ones among them: want 47, none chosen", len(left))
		}
		live, _ := admin.ListMessages(ctx, queue.MessageFilter{Queue: "q"})
		got := make([]string, len(live))
		for i, m := range live {
			got[i] = string(m.ID)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(chosen[:3]))
		if !slices.Equal(got, want) {
			t.Fatalf("live messages %v, want the three redriven %v", got, want)
		}
	})

	t.Run("a purge of chosen ids deletes only those, of this queue only", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		ids := seedDead(t, db, "q", "", 10)
		others := seedDead(t, db, "other", "", 1)
		n, err := admin.PurgeDead(ctx, queue.DeadFilter{Queue: "q", IDs: []string{ids[0], ids[9], others[0]}})
		if err != nil || n != 2 {
			t.Fatalf("PurgeDead = %d, %v; want 2 (the other queue's is not q's)", n, err)
		}
		if c, _ := admin.CountDead(ctx, queue.DeadFilter{Queue: "other"}, ""); c.Total != 1 {
			t.Errorf("the other queue has %d dead letters, want 1", c.Total)
		}
	})

	t.Run("redrive and purge by a search term act on every match and nothing else", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		ids := seedDead(t, db, "q", "", 1200)
		// "number 11" matches 11, 110–119 and 1100–1199: 111 letters.
		n, err := admin.Redrive(ctx, queue.DeadFilter{Queue: "q", Search: "number 11"})
		if err != nil || n != 111 {
			t.Fatalf("Redrive by search = %d, %v; want 111", n, err)
		}
		if c, _ := admin.CountDead(ctx, queue.DeadFilter{Queue: "q"}, ""); c.Total != 1089 {
			t.Errorf("%d left, want 1089", c.Total)
		}
		if c, _ := admin.CountMessages(ctx, queue.MessageFilter{Queue: "q"}, ""); c.Total != 111 {
			t.Errorf("%d live messages, want 111", c.Total)
		}
		n, err = admin.PurgeDead(ctx, queue.DeadFilter{Queue: "q", Search: "number 10"})
		if err != nil || n != 111 {
			t.Fatalf("PurgeDead by search = %d, %v; want 111 (10, 100–109, 1000–1099)", n, err)
		}
		if d, _ := admin.ListDead(ctx, queue.DeadFilter{Queue: "q", Search: ids[1000]}); len(d) != 0 {
			t.Errorf("letter 1000 still dead")
		}
	})

	t.Run("a group's dead letters page, search and redrive the same way", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		admin := queue.NewAdmin(queue.AdminOpts{DB: db})
		ids := seedDead(t, db, "t", "g", 30)
		seedDead(t, db, "t", "other", 5)
		page, err := admin.ListDead(ctx, queue.DeadFilter{Queue: "t", Group: "g", NewestFirst: true, Limit: 10})
		if err != nil || len(page) != 10 || page[0].ID != ids[29] {
			t.Fatalf("first window: %v, %v", deadIDs(page), err)
		}
		page, _ = admin.ListDead(ctx, queue.DeadFilter{Queue: "t", Group: "g", Before: page[9].Cursor, Limit: 10})
		if len(page) != 10 || page[0].ID != ids[19] {
			t.Fatalf("second window starts at %v, want %s", deadIDs(page), ids[19])
		}
		if d, _ := admin.ListDead(ctx, queue.DeadFilter{Queue: "t", Group: "g", Search: "k7"}); len(d) != 1 || d[0].ID != ids[7] {
			t.Fatalf("search by record key: %v", deadIDs(d))
		}
		if n, err := admin.Redrive(ctx, queue.DeadFilter{Queue: "t", Group: "g", IDs: []string{ids[1], ids[2]}}); err != nil || n != 2 {
			t.Fatalf("Redrive = %d, %v; want 2", n, err)
		}
		if c, _ := admin.CountDead(ctx, queue.DeadFilter{Queue: "t", Group: "g"}, ""); c.Total != 28 {
			t.Errorf("%d left, want 28", c.Total)
		}
	})
}

func TestLiveMessageWindows(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	q := queue.New(queue.NewOpts{DB: db, Name: "q"})
	admin := queue.NewAdmin(queue.AdminOpts{DB: db})
	ctx := t.Context()
	var sent []string
	for i := range 30 {
		m := queue.Message{Body: fmt.Appendf(nil, `{"n":%d}`, i)}
		if i%3 == 0 {
			m.OrderKey = "chat-1" // the second and later of the key are held
		}
		res, err := q.Send(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, string(res.ID))
	}

	t.Run("newest-first windows over a queue and its held messages walk every message once", func(t *testing.T) {
		var seen []string
		f := queue.MessageFilter{Queue: "q", NewestFirst: true, Limit: 7}
		for range 10 {
			page, err := admin.ListMessages(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range page {
				seen = append(seen, string(m.ID))
			}
			if len(page) < f.Limit {
				break
			}
			f.Before = page[len(page)-1].Cursor
		}
		slices.Sort(seen)
		if !slices.Equal(seen, slices.Sorted(slices.Values(sent))) {
			t.Fatalf("walked %d messages, want all %d once", len(seen), len(sent))
		}
		c, err := admin.CountMessages(ctx, queue.MessageFilter{Queue: "q", State: queue.StateHeld}, "")
		if err != nil || c.Total != 9 {
			t.Fatalf("held count = %+v, %v; want 9", c, err)
		}
	})

	t.Run("search finds a live message by payload text and by order key", func(t *testing.T) {
		page, err := admin.ListMessages(ctx, queue.MessageFilter{Queue: "q", Search: `"n":17}`, NewestFirst: true})
		if err != nil || len(page) != 1 || string(page[0].ID) != sent[17] {
			t.Fatalf("by payload: %d, %v", len(page), err)
		}
		if c, _ := admin.CountMessages(ctx, queue.MessageFilter{Queue: "q", Search: "chat-1"}, ""); c.Total != 10 {
			t.Fatalf("by order key: %d, want 10", c.Total)
		}
	})
}

func TestDeadLetterAPI(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	api := adminAPI(t, db)
	ids := seedDead(t, db, "q", "", 25)

	t.Run("the list pages with a next cursor and counts what matches", func(t *testing.T) {
		var seen []string
		url := api + "/queues/q/dlq?order=newest&limit=10"
		for range 5 {
			r := call(t, http.MethodGet, url, "")
			if r.status != http.StatusOK || r.body["total"] != float64(25) {
				t.Fatalf("GET %s = %d %s", url, r.status, r.raw)
			}
			for _, m := range r.body["messages"].([]any) {
				seen = append(seen, m.(map[string]any)["id"].(string))
			}
			next, _ := r.body["next"].(string)
			if next == "" {
				break
			}
			url = api + "/queues/q/dlq?order=newest&limit=10&cursor=" + next
		}
		want := slices.Clone(ids)
		slices.Reverse(want)
		if !slices.Equal(seen, want) {
			t.Fatalf("paged %d ids, want the 25 newest first", len(seen))
		}
		r := call(t, http.MethodGet, api+"/queues/q/messages?state=dead&limit=2", "")
		if got := r.body["messages"].([]any); len(got) != 2 || got[0].(map[string]any)["id"] != ids[0] {
			t.Fatalf("state=dead keeps the oldest first: %s", r.raw)
		}
		r = call(t, http.MethodGet, api+`/queues/q/dlq?q=letter+number+7%7D`, "")
		if r.body["total"] != float64(0) {
			t.Errorf("search for a text no payload holds: %s", r.raw)
		}
		r = call(t, http.MethodGet, api+`/queues/q/dlq?q=number+7"`, "")
		if r.body["total"] != float64(1) {
			t.Errorf("search by payload text: %s", r.raw)
		}
		if r := call(t, http.MethodGet, api+"/queues/q/dlq?cursor=nope", ""); r.status != http.StatusBadRequest {
			t.Errorf("a bad cursor: %d %s", r.status, r.raw)
		}
	})

	t.Run("a redrive or purge body names ids or a search term; none means all", func(t *testing.T) {
		r := call(t, http.MethodPost, api+"/queues/q/dlq/redrive", fmt.Sprintf(`{"ids":[%q,%q]}`, ids[0], ids[1]))
		if r.status != http.StatusOK || r.body["redriven"] != float64(2) {
			t.Fatalf("redrive by ids: %d %s", r.status, r.raw)
		}
		r = call(t, http.MethodPost, api+"/queues/q/dlq/purge", `{"q":"number 2"}`)
		if r.status != http.StatusOK || r.body["purged"] != float64(6) {
			t.Fatalf("purge by search (2, 20–24): %d %s", r.status, r.raw)
		}
		r = call(t, http.MethodPost, api+"/queues/q/dlq/redrive", "")
		if r.status != http.StatusOK || r.body["redriven"] != float64(17) {
			t.Fatalf("redrive of the rest: %d %s", r.status, r.raw)
		}
		if r := call(t, http.MethodPost, api+"/queues/q/dlq/purge", `{"ids":[]}`); r.status != http.StatusBadRequest {
			t.Errorf("no ids: %d %s", r.status, r.raw)
		}
	})
}
