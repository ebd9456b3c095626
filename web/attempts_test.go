package web_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"switchyard/bot/backend"
	"switchyard/queue"
	"switchyard/store/storetest"
	"switchyard/testwait"
	"switchyard/web"
)

// attemptCells reads a rendered attempts table: per row, its cells by testid.
func attemptCells(table *goquery.Selection) []map[string]string {
	var rows []map[string]string
	table.Find(`[data-testid="attempt"]`).Each(func(_ int, tr *goquery.Selection) {
		row := map[string]string{}
		for _, k := range []string{"number", "outcome", "at", "duration", "instance", "error"} {
			row[k] = trimmed(tr.Find(`[data-testid="attempt-` + k + `"]`))
		}
		rows = append(rows, row)
	})
	return rows
}

func TestAttemptPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	qa := queue.NewAdmin(queue.AdminOpts{DB: db})
	ob := backend.NewOutbox(backend.OutboxOpts{DB: db})
	deadEventID := deadEvent(t, ob, clock, 5)
	c := newConsole(t, web.Options{DB: db, Queues: qa, Outbox: ob})

	q := queue.New(queue.NewOpts{DB: db, Name: "console.flaky", Retry: queue.RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	sent, err := q.Send(ctx, queue.Message{Body: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	w := q.Start(ctx, queue.WorkerOpts{PollInterval: 5 * time.Millisecond, Handler: func(ctx context.Context, m queue.Message) error {
		if m.Attempt == 1 {
			return errors.New("provider 503 for +79995550011")
		}
		return queue.Permanent(errors.New("chat not found"))
	}})
	testwait.Until(t, 10*time.Second, "a dead letter with two attempts", func() bool {
		clock.Advance(10 * time.Millisecond) // the store's clock is the test's: the retry is due once it moves
		_, attempts, err := qa.DeadLetterDetail(ctx, queue.DeadFilter{Queue: "console.flaky", ID: string(sent.ID)})
		return err == nil && len(attempts) == 2
	})
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("the queue's page links each dead letter to its own page", func(t *testing.T) {
		doc := c.get(t, "/admin/queues/console.flaky", http.StatusOK)
		href, _ := tid(doc, "dead-"+string(sent.ID)).Find(`[data-testid="dead-link"]`).Attr("href")
		if href != "/admin/queues/console.flaky/dead/"+string(sent.ID) {
			t.Errorf("dead letter link %q", href)
		}
	})

	t.Run("a dead letter's page lists its attempts with outcome, time, duration, instance and masked error", func(t *testing.T) {
		doc := c.get(t, "/admin/queues/console.flaky/dead/"+string(sent.ID), http.StatusOK)
		rows := attemptCells(tid(doc, "attempts"))
		if len(rows) != 2 {
			t.Fatalf("%d attempt rows, want 2:\n%s", len(rows), trimmed(doc.Selection))
		}
		if rows[0]["number"] != "1" || rows[0]["outcome"] != "retry" || rows[1]["number"] != "2" || rows[1]["outcome"] != "dead" {
			t.Errorf("attempts %v", rows)
		}
		if rows[0]["error"] != "provider 503 for +7***0011" || rows[1]["error"] != "permanent: chat not found" {
			t.Errorf("errors %q, %q: want them masked", rows[0]["error"], rows[1]["error"])
		}
		for i, r := range rows {
			if r["instance"] != queue.Instance() || !strings.HasSuffix(r["duration"], "s") || r["at"] == "—" {
				t.Errorf("attempt %d: %v; want this instance, a duration and a time", i+1, r)
			}
		}
		if got := trimmed(tid(doc, "dead-attempts")); got != "2" {
			t.Errorf("attempts fact %q", got)
		}
		if tid(doc, "redrive").Length() != 1 || tid(doc, "purge").Length() != 1 {
			t.Error("the dead letter's page has no redrive or delete")
		}
		c.get(t, "/admin/queues/console.flaky/dead/m_0123", http.StatusNotFound)
	})

	t.Run("an outbox event's page lists its attempts", func(t *testing.T) {
		doc := c.get(t, fmt.Sprintf("/admin/bot/events/%d", deadEventID), http.StatusOK)
		rows := attemptCells(tid(doc, "event-attempt-history"))
		if len(rows) != 10 {
			t.Fatalf("%d attempt rows, want 10", len(rows))
		}
		if rows[0]["number"] != "1" || rows[0]["outcome"] != "retry" || rows[0]["error"] != "telegram: 502 Bad Gateway" ||
			rows[9]["number"] != "10" || rows[9]["outcome"] != "dead_letter" || rows[9]["instance"] != queue.Instance() || rows[9]["duration"] != "—" {
			t.Errorf("event attempts %v … %v", rows[0], rows[9])
		}
		fresh, err := ob.Emit(ctx, backend.NewEvent{Type: "wallet_connected", Target: backend.Target{TelegramID: "100"}, Payload: []byte(`{"addr":"EQ"}`)})
		if err != nil {
			t.Fatal(err)
		}
		doc = c.get(t, fmt.Sprintf("/admin/bot/events/%d", fresh), http.StatusOK)
		if tid(doc, "event-attempt-history-empty").Length() != 1 {
			t.Error("an event without attempts does not say so")
		}
	})
}
