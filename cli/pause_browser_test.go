package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard/testwait"
)

// Pausing a queue in the console, in a real browser against the wired app:
// the operator pauses sender.flow (the chat platform's outbound queue) on
// the Queues page; customers write to a business account, and their
// messages go through receiver.flow into the inbox while the automatic
// acknowledgements wait in the paused sender.flow, as the page shows by its
// own live refresh; Resume sends them.
func TestPauseQueueInBrowser(t *testing.T) {
	t.Parallel()
	app := startBrowserApp(t)
	ctx := newBrowser(t)
	customers := []string{"5580001", "5580002", "5580003"}

	browse(t, ctx, "log in and open the Queues page",
		chromedp.Navigate(app.base+"/admin/queues"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), app.token),
		chromedp.Click(css("login-submit")),
		chromedp.WaitVisible(css("queue-sender.flow")),
	)
	const (
		senderRow   = `[data-testid="queue-sender.flow"]`
		receiverRow = `[data-testid="queue-receiver.flow"]`
	)
	depthOf := func(row string) string {
		return `Number(document.querySelector('` + row + ` [data-testid="depth"]')?.textContent ?? "-1")`
	}

	browse(t, ctx, "pause sender.flow",
		chromedp.Click(chromedp.CSS(senderRow+` [data-testid="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(senderRow+` [data-testid="paused"]`)),
	)
	if got := inPage[string](t, ctx, textOf("flash")); !strings.Contains(got, "sender.flow is paused") {
		t.Fatalf("flash says %q", got)
	}
	if got := inPage[string](t, ctx, `document.querySelector('`+senderRow+` [data-testid="paused"]').textContent.trim()`); !strings.HasPrefix(got, "Paused since ") || !strings.HasSuffix(got, " by console") {
		t.Fatalf("the row says %q", got)
	}
	if !inPage[bool](t, ctx, `!!document.querySelector('`+receiverRow+` [data-testid="pause"]')`) {
		t.Fatal("receiver.flow should still be running")
	}
	var queues struct {
		Queues []struct {
			Name     string
			Ready    int
			Paused   bool
			PausedBy string
		}
	}
	app.api(t, http.MethodGet, "/queues", "", &queues)
	for _, q := range queues.Queues {
		if (q.Name == "sender.flow") != q.Paused || (q.Paused && q.PausedBy != "console") {
			t.Errorf("the admin API lists %+v", q)
		}
	}

	inPage[bool](t, ctx, `window.__noReload = true`)
	for _, tg := range customers {
		app.api(t, http.MethodPost, "/sandbox/users/"+tg+"/business-message", `{"text":"Is the shop open today?","firstName":"Client"}`, nil)
	}
	// receiver.flow flows: every message reaches the inbox. The automatic
	// acknowledgements are queued in sender.flow and wait there.
	testwait.Until(t, 60*time.Second, "the three messages in the inbox, their acknowledgements queued", func() bool {
		return len(acknowledgements(t, app, customers, "queued")) == len(customers)
	})
	waitJS(t, ctx, 20*time.Second, "the Queues page to show the acknowledgements waiting in sender.flow and receiver.flow empty",
		depthOf(senderRow)+` >= 3 && `+depthOf(receiverRow)+` === 0`)
	if sent := acknowledgements(t, app, customers, "sent"); len(sent) != 0 {
		t.Fatalf("acknowledgements sent while sender.flow was paused: %v", sent)
	}
	screenshot(t, ctx, "queues-paused")

	browse(t, ctx, "resume sender.flow",
		chromedp.Click(chromedp.CSS(senderRow+` [data-testid="resume"]`)),
		chromedp.WaitVisible(chromedp.CSS(senderRow+` [data-testid="pause"]`)),
	)
	if got := inPage[string](t, ctx, textOf("flash")); !strings.Contains(got, "sender.flow is running again") {
		t.Fatalf("flash says %q", got)
	}
	testwait.Until(t, 60*time.Second, "the three acknowledgements sent after the resume", func() bool {
		return len(acknowledgements(t, app, customers, "sent")) == len(customers)
	})
	inPage[bool](t, ctx, `window.__noReload = true`)
	waitJS(t, ctx, 20*time.Second, "the Queues page to show sender.flow empty and running", depthOf(senderRow)+` === 0 &&
		!document.querySelector('`+senderRow+` [data-testid="paused"]')`)

	// On a phone the state and the button sit under the queue's name, in
	// the table's first column: on screen without scrolling sideways.
	browse(t, ctx, "pause again at 390 px",
		chromedp.EmulateViewport(390, 844),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(senderRow+` [data-testid="pause"]`)),
		chromedp.Click(chromedp.CSS(senderRow+` [data-testid="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(senderRow+` [data-testid="paused"]`)),
	)
	for _, el := range []string{`[data-testid="paused"]`, `[data-testid="resume"]`} {
		if !inPage[bool](t, ctx, `(() => { const r = document.querySelector('`+senderRow+` `+el+`').getBoundingClientRect();
			return r.left >= 0 && r.right <= window.innerWidth && r.width > 0 })()`) {
			t.Errorf("at 390 px %s is not on screen", el)
		}
	}
	screenshot(t, ctx, "queues-paused-phone")
	browse(t, ctx, "resume at 390 px",
		chromedp.Click(chromedp.CSS(senderRow+` [data-testid="resume"]`)),
		chromedp.WaitVisible(chromedp.CSS(senderRow+` [data-testid="pause"]`)),
		chromedp.EmulateViewport(1280, 800),
	)
}

// acknowledgements lists the customers whose thread has an automatic
// acknowledgement (an outbound message of a rule) with the given status.
func acknowledgements(t *testing.T, app *browserApp, customers []string, status string) []string {
	t.Helper()
	var threads struct {
		Threads []struct {
			ID      int64
			Contact struct{ ProviderUserID string }
		}
	}
	if code, raw := app.call(t, http.MethodGet, "/omni/threads", ""); code != http.StatusOK || json.Unmarshal(raw, &threads) != nil {
		return nil
	}
	var out []string
	for _, th := range threads.Threads {
		if !containsString(customers, th.Contact.ProviderUserID) {
			continue
		}
		var msgs struct {
			Messages []struct{ Direction, Origin, Status string }
		}
		code, raw := app.call(t, http.MethodGet, fmt.Sprint("/omni/threads/", th.ID, "/messages"), "")
		if code != http.StatusOK || json.Unmarshal(raw, &msgs) != nil {
			continue
		}
		for _, m := range msgs.Messages {
			if m.Direction == "outbound" && m.Origin == "rule" && m.Status == status {
				out = append(out, th.Contact.ProviderUserID)
				break
			}
		}
	}
	return out
}
