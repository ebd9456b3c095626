package cli

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard/store"
)

// The Bot outbox's list in a browser: paged forward and back with its
// position, searched by payload text, and two chosen dead letters redriven
// through a confirmation that states 2.
func TestOutboxListInBrowser(t *testing.T) {
	t.Parallel()
	app := startBrowserApp(t)
	ctx := newBrowser(t)

	// 120 processed struct_overtake events (the bot has nothing left to do
	// with them) and 3 dead letters, as the outbox leaves them.
	var dead []int64
	err := app.db.Tx(context.Background(), func(tx *sql.Tx) error {
		dead = dead[:0]
		now := store.TS(app.db.Now())
		for i := range 120 {
			if _, err := tx.Exec(`insert into bot_event_outbox (event_type, magnet_uid, payload, created_at, processed_at, user_key)
				values ('struct_overtake', ?, ?, ?, ?, ?)`, 5000+i, fmt.Sprintf(`{"overtakenBy":"runner-%03d"}`, i), now, now,
				fmt.Sprintf("uid:%020d", 5000+i)); err != nil {
				return err
			}
		}
		for i := range 3 {
			var id int64
			if err := tx.QueryRow(`insert into bot_event_outbox (event_type, magnet_uid, payload, created_at, attempts,
				last_error, last_attempt_at, dead_lettered_at, user_key)
				values ('registered', ?, '{"leaderUid":1}', ?, 10, 'telegram: 502 Bad Gateway', ?, ?, ?) returning id`,
				6000+i, now, now, now, fmt.Sprintf("uid:%020d", 6000+i)).Scan(&id); err != nil {
				return err
			}
			dead = append(dead, id)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	browse(t, ctx, "log in to the outbox of one type",
		chromedp.Navigate(app.base+"/admin/login?next="+"%2Fadmin%2Fbot%3Ftype%3Dstruct_overtake"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), app.token),
		chromedp.Click(css("login-submit")),
		chromedp.WaitVisible(css("events-pager-position")),
	)
	position := func() string { return inPage[string](t, ctx, textOf("events-pager-position")) }

	t.Run("the list pages forward and back with its position right", func(t *testing.T) {
		if got := position(); got != "1–50 of 120 events" {
			t.Fatalf("first window at %q", got)
		}
		for _, step := range []struct{ link, want string }{
			{"events-pager-older", "51–100 of 120 events"},
			{"events-pager-older", "101–120 of 120 events"},
			{"events-pager-newer", "51–100 of 120 events"},
			{"events-pager-newer", "1–50 of 120 events"},
		} {
			browse(t, ctx, "follow "+step.link, chromedp.Click(css(step.link)))
			// The whole page: a loaded machine parses a page in steps, the
			// pager before the rows.
			waitJS(t, ctx, 20*time.Second, "the window at "+step.want+" on a loaded page",
				`document.readyState === "complete" && `+textOf("events-pager-position")+` === "`+step.want+`"`)
		}
		if got := inPage[int](t, ctx, `document.querySelectorAll('[data-testid="event-table"] tbody tr[data-testid]').length`); got != 50 {
			t.Fatalf("the first window again shows %d events", got)
		}
	})

	t.Run("a search by payload text finds the event", func(t *testing.T) {
		browse(t, ctx, "search runner-077",
			chromedp.SendKeys(css("event-search-input"), "runner-077"),
			chromedp.Submit(css("event-search-input")),
			chromedp.WaitVisible(css("event-search-clear")),
		)
		waitJS(t, ctx, 20*time.Second, "the search's page loaded", `document.readyState === "complete"`)
		if got := position(); got != "1 of 1 events" && got != "1–1 of 1 events" {
			t.Fatalf("the search shows %q", got)
		}
		if got := inPage[string](t, ctx, `document.querySelector('[data-testid="event-table"] tbody tr[data-testid] td:nth-child(3)').textContent.trim()`); got != "uid 5077" {
			t.Fatalf("the search found the event of %q", got)
		}
	})

	t.Run("two chosen dead letters are redriven through a confirmation stating 2", func(t *testing.T) {
		browse(t, ctx, "open the dead letters and choose two",
			chromedp.Navigate(app.base+"/admin/bot?state=dead"),
			chromedp.WaitVisible(css(fmt.Sprint("choose-", dead[0]))),
			chromedp.Click(css(fmt.Sprint("choose-", dead[0]))),
			chromedp.Click(css(fmt.Sprint("choose-", dead[2]))),
			chromedp.Click(css("bulk-events-redrive")),
			chromedp.WaitVisible(css("confirm-page")),
		)
		if got := inPage[string](t, ctx, textOf("confirm-page")); !strings.Contains(got, "Redrive the 2 chosen dead-lettered events?") {
			t.Fatalf("the confirmation says %q", got)
		}
		browse(t, ctx, "confirm", chromedp.Click(css("confirm-submit")), chromedp.WaitVisible(css("flash")))
		if got := inPage[string](t, ctx, textOf("flash")); !strings.Contains(got, "2 dead-lettered events redriven") {
			t.Fatalf("the flash says %q", got)
		}
		var ev struct{ State string }
		app.api(t, "GET", fmt.Sprint("/bot/events/", dead[1]), "", &ev)
		if ev.State != "dead" {
			t.Fatalf("the event not chosen is %s", ev.State)
		}
		for _, id := range []int64{dead[0], dead[2]} {
			app.api(t, "GET", fmt.Sprint("/bot/events/", id), "", &ev)
			if ev.State == "dead" {
				t.Fatalf("chosen event %d is still dead", id)
			}
		}
	})
}
