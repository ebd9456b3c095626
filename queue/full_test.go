package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"switchyard/queue"
	"switchyard/store/storetest"
)

func TestFullDatabase(t *testing.T) {
	t.Parallel()

	t.Run("a publish answers 5xx while the database is full and appends nothing, and 202 once room is back", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		const topic = "full.topic"
		if _, err := queue.NewTopic(context.Background(), queue.TopicOpts{DB: db, Name: topic, Partitions: 3}); err != nil {
			t.Fatal(err)
		}
		api := adminAPI(t, db)
		logged := func() int {
			var n int
			if err := db.Read.QueryRow(`select count(*) from queue_topic_log where topic = ?`, topic).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		publish := func(i int) reply {
			return call(t, http.MethodPost, fmt.Sprintf("%s/topics/%s/messages?key=k%d", api, topic, i%5),
				fmt.Sprintf(`{"n":%d,"pad":%q}`, i, strings.Repeat("p", 500)))
		}
		makeRoom := storetest.FillUp(t, db, false)
		refused := 0
		for i := 0; i < 60; i++ {
			before := logged()
			r := publish(i)
			switch {
			case r.status == http.StatusAccepted && logged() == before+1:
			case r.status >= 500 && logged() == before:
				if e, _ := r.body["error"].(map[string]any); e == nil || e["code"] == "" {
					t.Fatalf("publish %d: %d without the JSON error: %s", i, r.status, r.raw)
				}
				refused++
			default:
				t.Fatalf("publish %d on a full database: %d %s (log %d → %d), want 202 and appended or a 5xx and not", i, r.status, r.raw, before, logged())
			}
		}
		if refused == 0 {
			t.Fatal("no publish was refused on a full database")
		}
		makeRoom()
		before := logged()
		for i := range 5 {
			if r := publish(100 + i); r.status != http.StatusAccepted {
				t.Fatalf("publish with room again: %d %s", r.status, r.raw)
			}
		}
		if got := logged(); got != before+5 {
			t.Fatalf("%d records appended once room was back, want 5", got-before)
		}
		t.Logf("%d of 60 publishes refused on a full database", refused)
	})
}
