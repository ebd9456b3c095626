package cli

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard/queue"
)

// A live region polls its page every two seconds; when its fragment did not
// change the server answers 304 with no body (issue 20). In a real browser
// the region must keep what it shows on a 304 — htmx would swap the empty
// body in — and still take in a change.
func TestLiveRefreshInBrowser(t *testing.T) {
	t.Parallel()
	app := startBrowserApp(t)
	ctx := newBrowser(t)
	browse(t, ctx, "log in and open the Queues page",
		chromedp.Navigate(app.base+"/admin/login?token="+app.token+"&next=/admin/queues"),
		chromedp.WaitVisible(css("queue-table")),
	)
	// Record each poll's status, and mark a node of the region: a swap
	// replaces the region's nodes, so the mark survives only while nothing
	// is swapped in.
	inPage[bool](t, ctx, `(() => {
		window.__noReload = true;
		window.__polls = [];
		document.addEventListener("htmx:afterRequest", e => window.__polls.push(e.detail.xhr.status));
		return true })()`)

	t.Run("an idle page's polls answer 304 and the region keeps what it shows", func(t *testing.T) {
		// The first poll fetches the fragment (the page itself carries no
		// tag); the ones after it find it unchanged.
		waitJS(t, ctx, 15*time.Second, "a 200 poll, then a 304",
			`window.__polls.indexOf(200) >= 0 && window.__polls.slice(window.__polls.indexOf(200)).filter(s => s === 304).length >= 1`)
		inPage[bool](t, ctx, `(() => { document.querySelector('[data-testid="queue-table"]').dataset.mark = "kept"; return true })()`)
		n := inPage[int](t, ctx, `window.__polls.length`)
		waitJS(t, ctx, 15*time.Second, "two more polls after the mark", `window.__polls.length >= `+strconv.Itoa(n+2))
		if got := inPage[[]int](t, ctx, `window.__polls.slice(`+strconv.Itoa(n)+`)`); got[0] != 304 || got[1] != 304 {
			t.Fatalf("polls of the idle page answered %v, want 304s", got)
		}
		if !inPage[bool](t, ctx, `document.querySelector('[data-testid="queue-table"]')?.dataset.mark === "kept"`) {
			t.Fatalf("the region was swapped (or blanked) on a 304; it shows:\n%s",
				inPage[string](t, ctx, `document.querySelector('[data-testid="queues-live"]').innerText`))
		}
	})

	t.Run("a change reaches the page without a reload", func(t *testing.T) {
		q := queue.New(queue.NewOpts{DB: app.db, Name: "live.browser"})
		if _, err := q.Send(context.Background(), queue.Message{Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, 15*time.Second, "the new queue's row", `document.querySelector('[data-testid="queue-live.browser"]') !== null`)
		if !inPage[bool](t, ctx, `window.__noReload === true && document.querySelector('[data-testid="queues-live"]').dataset.etag !== undefined`) {
			t.Fatal("the page reloaded, or the region keeps no tag to send back")
		}
	})
}
