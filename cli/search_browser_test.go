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

// The console's search in a real browser: one Telegram user's journey is
// driven through the sandbox across two flows — they /start the onboarding
// bot with a leader's code, the backend emits two events about them which
// the bot handles and answers with DMs, and they write to a business account
// and get the automatic acknowledgement — then the operator types the user's
// Telegram id into the search box and sees every step.
func TestSearchFindsAJourneyInBrowser(t *testing.T) {
	t.Parallel()
	app := startBrowserApp(t)
	ctx := newBrowser(t)
	const tg = "5571234"

	app.api(t, http.MethodPost, "/users", `{"link":"search-leader","name":"Lena Leader"}`, nil)
	app.api(t, http.MethodPost, "/sandbox/users/"+tg+"/start", `{"payload":"search-leader","firstName":"Sofia"}`, nil)
	var ids []int64
	for _, body := range []string{
		`{"eventType":"wallet_connected","telegramId":"` + tg + `","payload":{"addr":"EQ0000000000000000000000000000000000000001"}}`,
		`{"eventType":"new_partner","telegramId":"` + tg + `","payload":{"partnerUid":77,"partnerName":"Pavel Partner","partnerLink":"pavel"}}`,
	} {
		var ev struct{ ID int64 }
		app.api(t, http.MethodPost, "/bot/events", body, &ev)
		ids = append(ids, ev.ID)
	}
	app.api(t, http.MethodPost, "/sandbox/users/"+tg+"/business-message",
		`{"text":"Hello! Is the shop open today? Call me at +79991234567","firstName":"Sofia"}`, nil)

	testwait.Until(t, 60*time.Second, "both events processed", func() bool {
		for _, id := range ids {
			var ev struct{ State string }
			status, raw := app.call(t, http.MethodGet, fmt.Sprint("/bot/events/", id), "")
			if status != http.StatusOK || json.Unmarshal(raw, &ev) != nil || ev.State != "processed" {
				return false
			}
		}
		return true
	})
	testwait.Until(t, 60*time.Second, "the greeting and the new-partner DM delivered", func() bool {
		var r struct{ DMs []struct{ Cause string } }
		status, raw := app.call(t, http.MethodGet, "/bot/dms?status=sent&chatId="+tg, "")
		if status != http.StatusOK || json.Unmarshal(raw, &r) != nil {
			return false
		}
		greeted, partner := false, false
		for _, d := range r.DMs {
			greeted = greeted || strings.HasPrefix(d.Cause, "update:")
			partner = partner || d.Cause == fmt.Sprint("event:", ids[1])
		}
		return greeted && partner
	})
	testwait.Until(t, 60*time.Second, "the automatic acknowledgement sent", func() bool {
		var threads struct {
			Threads []struct {
				ID      int64
				Contact struct{ ProviderUserID string }
			}
		}
		status, raw := app.call(t, http.MethodGet, "/omni/threads", "")
		if status != http.StatusOK || json.Unmarshal(raw, &threads) != nil {
			return false
		}
		for _, th := range threads.Threads {
			if th.Contact.ProviderUserID != tg {
				continue
			}
			var msgs struct {
				Messages []struct{ Direction, Origin, Status string }
			}
			status, raw := app.call(t, http.MethodGet, fmt.Sprint("/omni/threads/", th.ID, "/messages"), "")
			if status != http.StatusOK || json.Unmarshal(raw, &msgs) != nil {
				return false
			}
			for _, m := range msgs.Messages {
				if m.Direction == "outbound" && m.Origin == "rule" && m.Status == "sent" {
					return true
				}
			}
		}
		return false
	})

	browse(t, ctx, "log in",
		chromedp.Navigate(app.base+"/admin"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), app.token),
		chromedp.Click(css("login-submit")),
		chromedp.WaitVisible(css("card-bot")),
	)
	browse(t, ctx, "search the user's Telegram id from the header",
		chromedp.SendKeys(chromedp.CSS("#search-q"), tg),
		chromedp.Click(css("search-submit")),
		chromedp.WaitVisible(css("search-results")),
	)
	if got := inPage[string](t, ctx, `location.pathname + location.search`); got != "/admin/search?q="+tg {
		t.Fatalf("the search box led to %s", got)
	}
	steps := inPage[[]string](t, ctx,
		`[...document.querySelectorAll('[data-testid="search-item"]')].map(li => li.dataset.flow + ": " + li.dataset.kind)`)
	for _, want := range []string{
		"bot outbox: outbox event emitted", "bot outbox: acked", "bot outbox: outbox event handled",
		"bot outbox: funnel stage", "bot outbox: DM sent", "bot outbox: inbound update",
		"chat: inbound update", "chat: thread message", "chat: delivery attempt",
	} {
		if !containsString(steps, want) {
			t.Errorf("the search shows no %q; it shows %q", want, steps)
		}
	}
	for _, id := range ids {
		if !inPage[bool](t, ctx, fmt.Sprintf(`!!document.querySelector('[data-testid="search-results"] a[href="/admin/bot/events/%d"]')`, id)) {
			t.Errorf("no link to event %d", id)
		}
	}
	if !inPage[bool](t, ctx, `[...document.querySelectorAll('[data-testid="item-summary"]')].some(p => p.textContent.includes("sent to Telegram"))`) {
		t.Error("the acknowledgement's delivery does not say it was sent")
	}
	times := inPage[[]float64](t, ctx, `[...document.querySelectorAll('[data-testid="search-item"] time')].map(t => Date.parse(t.dateTime))`)
	for i := 1; i < len(times); i++ {
		if times[i] < times[i-1] {
			t.Fatalf("the items are not in time order: %v", times)
		}
	}
	for _, secret := range []string{"79991234567", "Sofia", "Pavel", "Lena"} {
		if inPage[bool](t, ctx, `document.querySelector("main").textContent.includes("`+secret+`")`) {
			t.Errorf("the search page shows %q", secret)
		}
	}
	screenshot(t, ctx, "search")

	// The chat update's idempotency key, searched from the page's own form,
	// finds the update and the receiver.flow message it was sent as.
	key := inPage[string](t, ctx, `[...document.querySelectorAll('[data-testid="search-item"][data-flow="chat"][data-kind="inbound update"] .mono')][0]?.textContent ?? ""`)
	if !strings.HasPrefix(key, "telegram:") {
		t.Fatalf("the chat update shows the idempotency key %q", key)
	}
	browse(t, ctx, "search the idempotency key",
		chromedp.SetValue(chromedp.CSS("#search-term"), key),
		chromedp.Submit(chromedp.CSS("#search-term")),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="search-item"][data-flow="queues"]`)),
	)
	steps = inPage[[]string](t, ctx,
		`[...document.querySelectorAll('[data-testid="search-item"]')].map(li => li.dataset.flow + ": " + li.dataset.kind)`)
	for _, want := range []string{"chat: inbound update", "queues: message sent"} {
		if !containsString(steps, want) {
			t.Errorf("the key's search shows no %q; it shows %q", want, steps)
		}
	}

	browse(t, ctx, "phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(app.base+"/admin/search?q="+tg), chromedp.WaitVisible(css("search-results")))
	if !inPage[bool](t, ctx, fitsWidth) {
		t.Errorf("the search scrolls sideways at phone width (%d px wide)", inPage[int](t, ctx, `document.documentElement.scrollWidth`))
	}
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
