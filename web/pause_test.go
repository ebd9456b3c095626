package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/web"
)

// The pause and resume buttons of the Overview's and the Queues page's
// tables, over real HTTP on real SQLite.
func TestPauseConsole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	c := newConsole(t, web.Options{DB: db, Queues: qa})
	queue.New(queue.NewOpts{DB: db, Name: "console.pausable"})
	topic, err := queue.NewTopic(ctx, queue.TopicOpts{DB: db, Name: "console.topic", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topic.CreateGroup(ctx, "console-group", queue.StartEarliest); err != nil {
		t.Fatal(err)
	}
	// press posts a pause or resume form from the page at from, as a
	// browser does (its Referer), and follows the redirect back.
	press := func(t *testing.T, from, action string, form url.Values) (landed, flash string) {
		t.Helper()
		resp, body := c.post(t, action, form, "Referer", c.base+from)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST %s: status %d\n%s", action, resp.StatusCode, body)
		}
		loc := resp.Header.Get("Location")
		return loc, trimmed(c.get(t, loc, http.StatusOK).Find(`[data-testid="flash"]`))
	}

	t.Run("a running queue shows a Pause button on the Overview and the Queues page", func(t *testing.T) {
		for _, page := range []string{"/admin", "/admin/queues"} {
			row := tid(c.get(t, page, http.StatusOK), "queue-console.pausable")
			if row.Find(`[data-testid="pause"]`).Length() != 1 || row.Find(`[data-testid="paused"]`).Length() != 0 {
				t.Errorf("%s: row %q", page, trimmed(row))
			}
			if action, _ := row.Find("form").Attr("action"); action != "/admin/queues/console.pausable/pause" {
				t.Errorf("%s: form posts to %q", page, action)
			}
		}
	})

	t.Run("Pause on the Overview pauses the queue, says so, and comes back to the Overview", func(t *testing.T) {
		landed, flash := press(t, "/admin", "/admin/queues/console.pausable/pause", url.Values{})
		if landed != "/admin" || !strings.Contains(flash, "console.pausable is paused") {
			t.Fatalf("landed %s, flash %q", landed, flash)
		}
		st, err := qa.PauseOf(ctx, queue.PauseTarget{Queue: "console.pausable"})
		if err != nil || !st.Paused || st.By != queue.ConsoleActor {
			t.Fatalf("pause state %+v, %v", st, err)
		}
		for _, page := range []string{"/admin", "/admin/queues", "/admin/queues/console.pausable"} {
			row := tid(c.get(t, page, http.StatusOK), "queue-console.pausable")
			text := trimmed(row.Find(`[data-testid="paused"]`))
			if !strings.HasPrefix(text, "Paused since "+st.At.UTC().Format("2006-01-02 15:04:05")+" by console") {
				t.Errorf("%s: says %q", page, text)
			}
			if row.Find(`[data-testid="resume"]`).Length() != 1 || row.Find(`[data-testid="pause"]`).Length() != 0 {
				t.Errorf("%s: no Resume button in %q", page, trimmed(row))
			}
		}
	})

	t.Run("Resume on the Queues page resumes it", func(t *testing.T) {
		landed, flash := press(t, "/admin/queues", "/admin/queues/console.pausable/resume", url.Values{})
		if landed != "/admin/queues" || !strings.Contains(flash, "running again") {
			t.Fatalf("landed %s, flash %q", landed, flash)
		}
		if st, _ := qa.PauseOf(ctx, queue.PauseTarget{Queue: "console.pausable"}); st.Paused {
			t.Fatal("still paused")
		}
	})

	t.Run("a consumer group is paused and resumed from its row", func(t *testing.T) {
		row := tid(c.get(t, "/admin/queues", http.StatusOK), "group-console.topic-console-group")
		if g, _ := row.Find(`input[name="group"]`).Attr("value"); g != "console-group" {
			t.Fatalf("the group's form names group %q", g)
		}
		press(t, "/admin/queues", "/admin/queues/console.topic/pause", url.Values{"group": {"console-group"}})
		row = tid(c.get(t, "/admin/queues", http.StatusOK), "group-console.topic-console-group")
		if !strings.Contains(trimmed(row.Find(`[data-testid="paused"]`)), "by console") {
			t.Fatalf("group row: %q", trimmed(row))
		}
		if st, _ := qa.PauseOf(ctx, queue.PauseTarget{Queue: "console.topic", Group: "console-group"}); !st.Paused {
			t.Fatal("the group is not paused")
		}
		press(t, "/admin/queues", "/admin/queues/console.topic/resume", url.Values{"group": {"console-group"}})
		if st, _ := qa.PauseOf(ctx, queue.PauseTarget{Queue: "console.topic", Group: "console-group"}); st.Paused {
			t.Fatal("the group is still paused")
		}
	})

	t.Run("pausing an unknown queue says there is none", func(t *testing.T) {
		_, flash := press(t, "/admin/queues", "/admin/queues/no.such.queue/pause", url.Values{})
		if !strings.Contains(flash, "no queue or consumer group by that name") {
			t.Fatalf("flash %q", flash)
		}
	})
}
