package cli

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard/queue/queuetest"
)

// A queue with 10,000 dead letters in a real browser: the operator pages
// through them (newer, older, the oldest window), ticks three rows, redrives
// them through the confirmation that states 3, and finds one by the text of
// its payload. The dead letters are written by the queue package's test kit
// (10,000 permanent failures through a worker would take the test's time).
func TestDeadLettersAtSizeInBrowser(t *testing.T) {
	t.Parallel()
	app := startBrowserApp(t)
	const name, n = "acceptance.parcels", 10000
	ids, err := queuetest.SeedDead(t.Context(), app.db, queuetest.DeadOpts{Queue: name, N: n,
		Body: func(i int) []byte { return fmt.Appendf(nil, `{"parcel":"P-%05d","note":"for customer %05d"}`, i, i) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := newBrowser(t)
	position := func(t *testing.T, want string) {
		t.Helper()
		// The whole page, not only its top: a loaded machine parses a long
		// page in steps, and the pager comes before the list's rows.
		waitJS(t, ctx, 10*time.Second, "the pager to say "+want+" on a loaded page",
			`document.readyState === "complete" && `+textOf("dead-pager-position")+` === `+fmt.Sprintf("%q", want))
	}
	firstRow := func(t *testing.T) string {
		return inPage[string](t, ctx, `document.querySelector('[data-testid="dead-list"] li').dataset.testid`)
	}

	browse(t, ctx, "log in and open the queue",
		chromedp.Navigate(app.base+"/admin/login?next="+url.QueryEscape("/admin/queues/"+name)+"&token="+url.QueryEscape(app.token)),
		chromedp.WaitVisible(css("dead-pager")),
	)

	t.Run("the operator pages through 10,000 dead letters, newest first, to the oldest and back", func(t *testing.T) {
		position(t, "1–50 of 10000 dead letters")
		if got := firstRow(t); got != "dead-"+ids[n-1] {
			t.Fatalf("the first row is %s, want the newest %s", got, ids[n-1])
		}
		browse(t, ctx, "older", chromedp.Click(css("dead-pager-older")))
		position(t, "51–100 of 10000 dead letters")
		if got := firstRow(t); got != "dead-"+ids[n-51] {
			t.Fatalf("the second window starts at %s, want %s", got, ids[n-51])
		}
		browse(t, ctx, "newer", chromedp.Click(css("dead-pager-newer")))
		position(t, "1–50 of 10000 dead letters")
		browse(t, ctx, "oldest", chromedp.Click(css("dead-pager-last")))
		position(t, "9951–10000 of 10000 dead letters")
		if got := inPage[string](t, ctx, `[...document.querySelectorAll('[data-testid="dead-list"] li')].at(-1).dataset.testid`); got != "dead-"+ids[0] {
			t.Fatalf("the last row is %s, want the oldest %s", got, ids[0])
		}
		if inPage[bool](t, ctx, `!!document.querySelector('[data-testid="dead-pager-older"]')`) {
			t.Fatal("the oldest window links to an older one")
		}
		browse(t, ctx, "newer from the oldest", chromedp.Click(css("dead-pager-newer")))
		position(t, "9901–9950 of 10000 dead letters")
		screenshot(t, ctx, "dead-letters")
	})

	chosen := []string{ids[60], ids[75], ids[99]} // all in the window 9901–9950
	t.Run("three chosen dead letters are redriven through a confirmation that states 3", func(t *testing.T) {
		for _, id := range chosen {
			browse(t, ctx, "choose "+id, chromedp.Click(css("choose-"+id)))
		}
		browse(t, ctx, "redrive chosen", chromedp.Click(css("dead-bulk-redrive")), chromedp.WaitVisible(css("confirm-page")))
		question := inPage[string](t, ctx, textOf("confirm-page"))
		if want := "Redrive the 3 chosen dead letters of " + name + "?"; !strings.Contains(question, want) {
			t.Fatalf("the confirmation asks %q, want %q", question, want)
		}
		browse(t, ctx, "confirm", chromedp.Click(css("confirm-submit")), chromedp.WaitVisible(css("flash")))
		if got := inPage[string](t, ctx, textOf("flash")); !strings.Contains(got, "Redrove 3 dead letter(s)") {
			t.Fatalf("flash %q", got)
		}
		// The window is the 50 newer than a key, so the three gone from it
		// are made up by the next three newer ones: 9898–9947 of 9,997.
		position(t, "9898–9947 of 9997 dead letters")
		var dead struct{ Total int64 }
		app.api(t, http.MethodGet, "/queues/"+name+"/dlq?limit=1", "", &dead)
		if dead.Total != n-3 {
			t.Fatalf("%d dead letters left, want %d", dead.Total, n-3)
		}
		for _, id := range chosen {
			var d, live struct {
				Total    int64
				Messages []struct{ ID, State string }
			}
			app.api(t, http.MethodGet, "/queues/"+name+"/dlq?q="+id, "", &d)
			app.api(t, http.MethodGet, "/queues/"+name+"/messages?q="+id, "", &live)
			if d.Total != 0 || len(live.Messages) != 1 || live.Messages[0].ID != id {
				t.Errorf("%s: %d dead, live %+v; want it back in the queue only", id, d.Total, live.Messages)
			}
			if inPage[bool](t, ctx, `!!document.querySelector('[data-testid="dead-`+id+`"]')`) {
				t.Errorf("%s is still listed", id)
			}
		}
	})

	t.Run("the list's search finds a dead letter by its payload text", func(t *testing.T) {
		browse(t, ctx, "search",
			chromedp.SetValue(css("dead-search-input"), "customer 04242"),
			chromedp.Submit(css("dead-search-input")),
		)
		position(t, "1–1 of 1 dead letters")
		if got := firstRow(t); got != "dead-"+ids[4242] {
			t.Fatalf("found %s, want %s", got, ids[4242])
		}
	})
}
