package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"switchyard/omni"
	"switchyard/testwait"
)

// Accessibility, dark mode and phone width in a real browser. axe-core
// (testdata/axe-core, vendored from npm) runs on every console page — the
// walk of the console's routes says which pages there are — with seeded data,
// so the detail pages show real rows: in light and dark mode, at 1280 px and
// at 390 px. A serious or critical finding fails the test, and so does a page
// that scrolls sideways at 390 px. SWITCHYARD_SCREENSHOTS=1 also saves the
// main pages dark and at phone width under docs/screenshots/.

// a11yPage is one console page the accessibility walk visits.
type a11yPage struct {
	name  string // the page's name in failures and screenshots
	route string // the console route template the page is an answer of
	path  string
	ready string // a data-testid the page shows once it is drawn; "" is any page
	shot  bool   // a screenshot of it dark and at phone width is kept in docs/
}

// a11ySeed is what the seeded data made, for the detail pages' addresses.
type a11ySeed struct {
	eventID          int64
	telegramID       string
	threadID         int64
	owner, referred  string
	queue, topic, gr string
	deadID           string // the identity topic's dead letter
}

// seedA11y puts one of everything the console shows into the app: a
// Telegram user who started the bot through a leader's code (funnel, bot
// user, sandbox chat), an outbox event, a chat thread, a referral link with
// its owner and a referred user, and a dead letter of the identity topic.
func seedA11y(t *testing.T, app *browserApp) a11ySeed {
	t.Helper()
	s := a11ySeed{
		telegramID: "5581234", owner: "aaaaaaaa-5555-4555-8555-555555555555", referred: "cccccccc-6666-4666-8666-666666666666",
		queue: omni.QueueReceiverFlow, topic: "pin.identity.users.v1", gr: "referral-identity-users",
	}
	app.api(t, http.MethodPost, "/users", `{"link":"a11y-leader","name":"Alice Leader"}`, nil)
	app.api(t, http.MethodPost, "/sandbox/users/"+s.telegramID+"/start", `{"payload":"a11y-leader","firstName":"Anna"}`, nil)
	var ev struct{ ID int64 }
	app.api(t, http.MethodPost, "/bot/events",
		`{"eventType":"wallet_connected","telegramId":"`+s.telegramID+`","payload":{"addr":"EQ00000000000000000000000000000000000000000000a11y"}}`, &ev)
	s.eventID = ev.ID
	app.api(t, http.MethodPost, "/sandbox/users/"+s.telegramID+"/business-message",
		`{"text":"Hello! Is the shop open today? My number is +79991234567","firstName":"Anna"}`, nil)

	app.api(t, http.MethodPost, "/topics/"+s.topic+"/messages", identityUpserted(s.owner, "Agent", "Olga", "+79990001234", ""), nil)
	testwait.Until(t, 30*time.Second, "the owner's replica", func() bool {
		status, _ := app.call(t, http.MethodGet, "/referral/replicas/"+s.owner, "")
		return status == http.StatusOK
	})
	app.api(t, http.MethodPost, "/referral/links",
		`{"url":"a11y-olga","ownerUserId":"`+s.owner+`","tenantId":"bbbbbbbb-2222-4222-8222-222222222222","channel":"web"}`, nil)
	app.api(t, http.MethodPost, "/topics/"+s.topic+"/messages", identityUpserted(s.referred, "Investor", "Ivan", "+79990005678", "a11y-olga"), nil)
	app.api(t, http.MethodPost, "/topics/"+s.topic+"/messages",
		`{"messageId":"6f1c1a52-0000-4000-8000-0000000a11ff","type":"pin.identity.user-upserted","aggregateId":"dddddddd-7777-4777-8777-777777777777","payload":{"UserId":"","PhoneNumber":"+79993332211"}}`, nil)

	testwait.Until(t, 30*time.Second, "the referred user's bond", func() bool {
		var r struct{ HasReferrer bool }
		status, raw := app.call(t, http.MethodGet, "/referral/users/"+s.referred+"/referrer", "")
		return status == http.StatusOK && json.Unmarshal(raw, &r) == nil && r.HasReferrer
	})
	testwait.Until(t, 30*time.Second, "the chat thread", func() bool {
		var r struct {
			Threads []struct {
				ID      int64
				Contact struct{ ProviderUserID string }
			}
		}
		status, raw := app.call(t, http.MethodGet, "/omni/threads", "")
		if status != http.StatusOK || json.Unmarshal(raw, &r) != nil {
			return false
		}
		for _, th := range r.Threads {
			if th.Contact.ProviderUserID == s.telegramID {
				s.threadID = th.ID
				return true
			}
		}
		return false
	})
	testwait.Until(t, 30*time.Second, "the identity topic's dead letter", func() bool {
		var r struct{ Messages []struct{ ID string } }
		status, raw := app.call(t, http.MethodGet, "/topics/"+s.topic+"/groups/"+s.gr+"/dlq", "")
		if status != http.StatusOK || json.Unmarshal(raw, &r) != nil || len(r.Messages) == 0 {
			return false
		}
		s.deadID = r.Messages[0].ID
		return true
	})
	return s
}

// a11yPages are the pages of the walk: every console page with a GET route,
// the login page, the 404 page and a confirmation page.
func a11yPages(s a11ySeed) []a11yPage {
	return []a11yPage{
		{"login", "/admin/login", "/admin/login", "login-submit", false},
		{"overview", "/admin", "/admin", "card-chat", true},
		{"overview-slash", "/admin/", "/admin/", "card-chat", false},
		{"bot-outbox", "/admin/bot", "/admin/bot", "event-table", true},
		{"bot-event", "/admin/bot/events/{id:[0-9]+}", fmt.Sprint("/admin/bot/events/", s.eventID), "event-payload", true},
		{"funnel", "/admin/bot/funnel", "/admin/bot/funnel", "funnel", true},
		{"bot-user", "/admin/bot/users/{tg:[0-9]+}", "/admin/bot/users/" + s.telegramID, "", false},
		{"referral", "/admin/referral", "/admin/referral", "link-table", true},
		{"referral-user", "/admin/referral/users/{id}", "/admin/referral/users/" + s.referred, "referrer", true},
		{"referral-links", "/admin/referral/links", "/admin/referral/links", "link-table", true},
		{"referral-replicas", "/admin/referral/replicas", "/admin/referral/replicas", "replica-table", true},
		{"referral-find-user", "/admin/referral/users", "/admin/referral/users?id=" + s.owner, "", false},
		{"chat-inbox", "/admin/chat", "/admin/chat", "inbox", true},
		{"chat-thread", "/admin/chat/threads/{id:[0-9]+}", fmt.Sprint("/admin/chat/threads/", s.threadID), "messages", true},
		{"search", "/admin/search", "/admin/search?q=" + s.telegramID, "search-results", true},
		{"trace", "/admin/traces/{id}", "/admin/traces/0123456789abcdef0123456789abcdef", "", false},
		{"queues", "/admin/queues", "/admin/queues", "group-table", true},
		{"queue", "/admin/queues/{queue}", "/admin/queues/" + s.queue, "", true},
		{"queue-group", "/admin/queues/{queue}", "/admin/queues/" + s.topic + "?group=" + s.gr, "dead-list", false},
		{"dead-letter", "/admin/queues/{queue}/dead/{id}", "/admin/queues/" + s.topic + "/dead/" + s.deadID + "?group=" + s.gr, "dead-facts", true},
		{"sandbox", "/admin/sandbox", "/admin/sandbox", "sandbox-start", true},
		{"not-found", "", "/admin/no-such-page", "message", false},
	}
}

func TestConsoleAccessibilityInBrowser(t *testing.T) {
	t.Parallel()
	axe, err := os.ReadFile(filepath.Join("testdata", "axe-core", "axe.min.js"))
	if err != nil {
		t.Fatal(err)
	}
	app := startBrowserApp(t)
	seed := seedA11y(t, app)
	pages := a11yPages(seed)

	t.Run("the walk visits every page the console answers", func(t *testing.T) {
		w := newWiredApp(t, walkSecrets, nil)
		routes, _ := allRoutes(t, w.app.handler)
		for _, r := range routes {
			if r.method != http.MethodGet || r.guard != guardConsole {
				continue
			}
			if !slices.ContainsFunc(pages, func(p a11yPage) bool { return p.route == r.template }) {
				t.Errorf("the console answers GET %s, which the accessibility walk does not visit: add it to a11yPages", r.template)
			}
		}
	})

	for _, scheme := range []string{"light", "dark"} {
		for _, width := range []int64{1280, 390} {
			t.Run(fmt.Sprintf("in %s mode at %d px no page has a serious or critical axe finding", scheme, width), func(t *testing.T) {
				ctx := newBrowser(t)
				viewport := chromedp.EmulateViewport(width, 800)
				if width < 600 {
					viewport = chromedp.EmulateViewport(width, 844, chromedp.EmulateMobile)
				}
				browse(t, ctx, "emulate "+scheme+" mode", viewport, prefersColorScheme(scheme))
				for _, p := range pages {
					if p.name == "overview" {
						a11yLogIn(t, ctx, app)
					}
					if p.name == "login" {
						browse(t, ctx, "open the login page", chromedp.Navigate(app.base+p.path), chromedp.WaitVisible(css(p.ready)))
					} else {
						a11yOpen(t, ctx, app, p)
					}
					a11yCheck(t, ctx, axe, p.name, width)
					if p.shot {
						a11yScreenshot(t, ctx, p.name, scheme, width)
					}
				}
				a11yConfirmPage(t, ctx, app, seed)
				a11yCheck(t, ctx, axe, "confirmation", width)
			})
		}
	}
}

// prefersColorScheme emulates the system's light or dark preference.
func prefersColorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}},
		})
		return err
	})
}

func a11yLogIn(t *testing.T, ctx context.Context, app *browserApp) {
	t.Helper()
	browse(t, ctx, "log in",
		chromedp.Navigate(app.base+"/admin/login"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), app.token),
		chromedp.Click(css("login-submit")),
		chromedp.WaitVisible(css("card-bot")),
	)
}

// a11yOpen opens a page of the walk and waits until it is drawn.
func a11yOpen(t *testing.T, ctx context.Context, app *browserApp, p a11yPage) {
	t.Helper()
	ready := chromedp.WaitVisible(chromedp.CSS("main h1"))
	if p.ready != "" {
		ready = chromedp.WaitVisible(css(p.ready))
	}
	browse(t, ctx, "open "+p.name+" ("+p.path+")", chromedp.Navigate(app.base+p.path), ready)
}

// a11yConfirmPage opens the confirmation page a destructive form answers
// with when it comes without its inline confirmation.
func a11yConfirmPage(t *testing.T, ctx context.Context, app *browserApp, s a11ySeed) {
	t.Helper()
	browse(t, ctx, "post a purge without its confirmation",
		chromedp.Evaluate[chromedp.Void](`(() => {
			const f = document.createElement("form");
			f.method = "post";
			f.action = "/admin/queues/`+s.queue+`/purge";
			document.body.append(f);
			f.submit();
		})()`),
		chromedp.WaitVisible(css("confirm-page")),
	)
}

// axeFinding is one axe-core violation and the nodes it was found on.
type axeFinding struct {
	ID, Impact, Help string
	Nodes            []string
}

// a11yCheck runs axe-core on the open page; a serious or critical finding
// fails the test, with the rule, its impact and the offending nodes. At
// phone width the page must not scroll sideways either.
func a11yCheck(t *testing.T, ctx context.Context, axe []byte, name string, width int64) {
	t.Helper()
	if !inPage[bool](t, ctx, `typeof axe !== "undefined"`) {
		browse(t, ctx, "inject axe-core", chromedp.Evaluate[chromedp.Void](string(axe)))
	}
	found, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeFinding](`axe.run(document, {resultTypes: ["violations"]}).then(r =>
		r.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v => ({
			ID: v.id, Impact: v.impact, Help: v.help,
			Nodes: v.nodes.map(n => n.target.join(" ") + (n.any[0]?.message ? " — " + n.any[0].message : "")),
		})))`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("axe on %s: %v", name, err)
	}
	for _, f := range found {
		t.Errorf("%s at %d px: %s (%s): %s\n\t%s", name, width, f.ID, f.Impact, f.Help, strings.Join(f.Nodes, "\n\t"))
	}
	if width < 600 && !inPage[bool](t, ctx, `document.documentElement.scrollWidth <= document.documentElement.clientWidth`) {
		wide := inPage[[]string](t, ctx, `[...document.querySelectorAll("main *")].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
			.slice(0, 8).map(e => e.tagName.toLowerCase() + (e.className && typeof e.className === "string" ? "." + e.className.trim().replace(/\s+/g, ".") : "") + " " + Math.round(e.getBoundingClientRect().right) + "px")`)
		t.Errorf("%s scrolls sideways at %d px: %d px wide; too wide: %s", name, width,
			inPage[int](t, ctx, `document.documentElement.scrollWidth`), strings.Join(wide, ", "))
	}
}

// a11yScreenshot saves the page dark (at desktop width) and at phone width
// (light) as docs/screenshots/<name>-dark.png and <name>-phone.png, when
// SWITCHYARD_SCREENSHOTS=1.
func a11yScreenshot(t *testing.T, ctx context.Context, name, scheme string, width int64) {
	t.Helper()
	switch {
	case scheme == "dark" && width >= 600:
		screenshot(t, ctx, name+"-dark")
	case scheme == "light" && width < 600:
		screenshot(t, ctx, name+"-phone")
	}
}

// The page's background colour in each theme (--bg in console.css).
const (
	lightBackground = "rgb(246, 247, 249)"
	darkBackground  = "rgb(14, 17, 22)"
)

const pageBackground = `getComputedStyle(document.body).backgroundColor`

// visibleSwitch is the theme switch's button on show: "theme-dark" or "theme-light".
const visibleSwitch = `[...document.querySelectorAll('.theme-switch button')].find(b => b.offsetParent !== null)?.dataset.testid ?? ""`

func TestThemeSwitchInBrowser(t *testing.T) {
	t.Parallel()
	app := startBrowserApp(t)
	ctx := newBrowser(t)
	a11yLogIn(t, ctx, app)

	t.Run("with no choice made the console follows the system's preference", func(t *testing.T) {
		for _, c := range []struct{ scheme, background, button string }{
			{"dark", darkBackground, "theme-light"},
			{"light", lightBackground, "theme-dark"},
		} {
			browse(t, ctx, "prefer "+c.scheme, prefersColorScheme(c.scheme), chromedp.Reload(), chromedp.WaitVisible(css("card-bot")))
			if got := inPage[string](t, ctx, pageBackground); got != c.background {
				t.Errorf("the system prefers %s; the page's background is %s, not %s", c.scheme, got, c.background)
			}
			if got := inPage[string](t, ctx, visibleSwitch); got != c.button {
				t.Errorf("the system prefers %s; the switch shows %q, not %q", c.scheme, got, c.button)
			}
		}
	})

	t.Run("the switch turns the console dark and the choice survives a reload and a new page", func(t *testing.T) {
		browse(t, ctx, "prefer light and switch to dark", prefersColorScheme("light"),
			chromedp.Click(css("theme-dark")))
		waitJS(t, ctx, 5*time.Second, "the page to turn dark", pageBackground+` === "`+darkBackground+`"`)
		if got := inPage[string](t, ctx, `document.activeElement?.dataset.testid ?? ""`); got != "theme-light" {
			t.Errorf("after the switch the focus is on %q, not on the button that switches back", got)
		}
		browse(t, ctx, "reload", chromedp.Reload(), chromedp.WaitVisible(css("card-bot")))
		if got := inPage[string](t, ctx, `document.documentElement.dataset.theme ?? ""`); got != "dark" {
			t.Errorf("after a reload the server drew data-theme=%q, not dark", got)
		}
		browse(t, ctx, "open another page", chromedp.Navigate(app.base+"/admin/queues"), chromedp.WaitVisible(css("group-table")))
		if got := inPage[string](t, ctx, pageBackground); got != darkBackground {
			t.Errorf("on a new page the background is %s, not dark", got)
		}
		browse(t, ctx, "switch back to light", chromedp.Click(css("theme-light")))
		waitJS(t, ctx, 5*time.Second, "the page to turn light", pageBackground+` === "`+lightBackground+`"`)
		browse(t, ctx, "prefer dark and reload", prefersColorScheme("dark"), chromedp.Reload(), chromedp.WaitVisible(css("group-table")))
		if got := inPage[string](t, ctx, pageBackground); got != lightBackground {
			t.Errorf("the operator chose light; with the system preferring dark the background is %s", got)
		}
	})

	t.Run("without JavaScript the switch is a form the server answers", func(t *testing.T) {
		browse(t, ctx, "switch JavaScript off", scriptsDisabled(true))
		defer browse(t, ctx, "switch JavaScript on", scriptsDisabled(false))
		browse(t, ctx, "prefer light, reload and switch to dark", prefersColorScheme("light"),
			chromedp.Navigate(app.base+"/admin/queues"), chromedp.WaitVisible(css("group-table")),
			chromedp.Click(css("theme-dark")), chromedp.WaitVisible(css("theme-light")))
		if got := inPage[string](t, ctx, `location.pathname`); got != "/admin/queues" {
			t.Errorf("the switch led to %s, not back to the page", got)
		}
		if got := inPage[string](t, ctx, pageBackground); got != darkBackground {
			t.Errorf("after the form the background is %s, not dark", got)
		}
	})
}

// scriptsDisabled switches the page's JavaScript off or on.
func scriptsDisabled(off bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: off})
		return err
	})
}

func TestKeyboardShortcutsInBrowser(t *testing.T) {
	t.Parallel()
	app := startBrowserApp(t)
	var ids []int64
	for i := range 3 {
		var ev struct{ ID int64 }
		app.api(t, http.MethodPost, "/bot/events", fmt.Sprintf(`{"eventType":"wallet_connected","telegramId":"%d","payload":{"addr":"EQ%d"}}`, 5590001+i, i), &ev)
		ids = append(ids, ev.ID)
	}
	ctx := newBrowser(t)
	a11yLogIn(t, ctx, app)
	browse(t, ctx, "open the outbox", chromedp.Navigate(app.base+"/admin/bot"), chromedp.WaitVisible(css(fmt.Sprint("event-", ids[0]))))
	selected := `document.querySelector(".kb-row")?.dataset.testid ?? ""`
	// The outbox lists the newest first.
	first, second := fmt.Sprint("event-", ids[2]), fmt.Sprint("event-", ids[1])

	t.Run("j and k move the selection through the rows", func(t *testing.T) {
		browse(t, ctx, "press j", keystroke("j"))
		if got := inPage[string](t, ctx, selected); got != first {
			t.Fatalf("after j the selected row is %q, not %q", got, first)
		}
		browse(t, ctx, "press j", keystroke("j"))
		if got := inPage[string](t, ctx, selected); got != second {
			t.Fatalf("after j j the selected row is %q, not %q", got, second)
		}
		if !inPage[bool](t, ctx, `document.activeElement === document.querySelector(".kb-row")`) {
			t.Error("the selected row does not have the focus")
		}
		if got := inPage[string](t, ctx, `getComputedStyle(document.querySelector(".kb-row")).outlineStyle`); got != "solid" {
			t.Errorf("the selected row shows no outline (outline-style %q)", got)
		}
		browse(t, ctx, "press k", keystroke("k"))
		if got := inPage[string](t, ctx, selected); got != first {
			t.Fatalf("after k the selected row is %q, not %q", got, first)
		}
	})

	t.Run("slash focuses the search box, where j and k are letters", func(t *testing.T) {
		browse(t, ctx, "press / and type", keystroke("/"), chromedp.KeyEvent("jk"))
		if got := inPage[string](t, ctx, `document.activeElement?.id + "=" + document.activeElement?.value`); got != "search-q=jk" {
			t.Fatalf("after / j k the focus and its value are %q", got)
		}
		if got := inPage[string](t, ctx, selected); got != first {
			t.Errorf("typing in the search box moved the selection to %q", got)
		}
		browse(t, ctx, "clear and leave the box",
			chromedp.Evaluate[chromedp.Void](`document.getElementById("search-q").value = ""; document.querySelector(".kb-row").focus()`))
	})

	t.Run("question mark lists the keys and Esc closes the list", func(t *testing.T) {
		browse(t, ctx, "press ?", keystroke("?"))
		if !inPage[bool](t, ctx, `document.getElementById("keys-dialog").open`) {
			t.Fatal("? opened no dialog")
		}
		if got := inPage[string](t, ctx, textOf("keys-dialog")); !strings.Contains(got, "Open the selected row") {
			t.Errorf("the dialog says %q", got)
		}
		browse(t, ctx, "press Esc", chromedp.KeyEvent(kb.Escape))
		waitJS(t, ctx, 5*time.Second, "the dialog to close", `!document.getElementById("keys-dialog").open`)
	})

	t.Run("Enter opens the selected row", func(t *testing.T) {
		browse(t, ctx, "press Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(css("event-payload")))
		if got := inPage[string](t, ctx, `location.pathname`); got != fmt.Sprint("/admin/bot/events/", ids[2]) {
			t.Errorf("Enter opened %s", got)
		}
	})

	t.Run("a chart is one tab stop whose arrow keys move through its bars", func(t *testing.T) {
		browse(t, ctx, "open the overview", chromedp.Navigate(app.base+"/admin"), chromedp.WaitVisible(css("chart-bot")))
		stops := `[...document.querySelectorAll('[data-testid="chart-bot"] .bar-g[tabindex="0"]')].map(b => b.dataset.testid).join()`
		last := inPage[string](t, ctx, `[...document.querySelectorAll('[data-testid="chart-bot"] .bar-g')].pop().dataset.testid`)
		if got := inPage[string](t, ctx, stops); got != last {
			t.Fatalf("the chart's tab stops are %q, want its newest bar %q alone", got, last)
		}
		focused := `document.activeElement?.dataset?.testid ?? ""`
		browse(t, ctx, "focus the newest bar and press ←",
			chromedp.Evaluate[chromedp.Void](`document.querySelector('[data-testid="chart-bot"] .bar-g[tabindex="0"]').focus()`),
			chromedp.KeyEvent(kb.ArrowLeft))
		n, _ := strconv.Atoi(strings.TrimPrefix(last, "bar-"))
		if got, want := inPage[string](t, ctx, focused), fmt.Sprint("bar-", n-1); got != want {
			t.Fatalf("after ← the focus is on %q, want %q", got, want)
		}
		if got, want := inPage[string](t, ctx, stops), fmt.Sprint("bar-", n-1); got != want {
			t.Errorf("after ← the tab stop is %q, want it to move with the focus to %q", got, want)
		}
		browse(t, ctx, "press Home", chromedp.KeyEvent(kb.Home))
		if got := inPage[string](t, ctx, focused); got != "bar-0" {
			t.Errorf("after Home the focus is on %q, want bar-0", got)
		}
		if !inPage[bool](t, ctx, `getComputedStyle(document.activeElement.querySelector(".tip")).visibility === "visible"`) {
			t.Error("the focused bar does not show its value")
		}
	})
}

// keystroke presses a printable key as a person does: one keyDown that
// carries the text, so a page that cancels the keydown types nothing
// (chromedp.KeyEvent sends the text in a separate char event, which a
// cancelled keydown does not stop).
func keystroke(key string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		k := kb.Keys[[]rune(key)[0]]
		down := input.DispatchKeyEventParams{Type: kb.KeyDown, Key: k.Key, Code: k.Code, Text: k.Text,
			UnmodifiedText: k.Unmodified, WindowsVirtualKeyCode: k.Windows, NativeVirtualKeyCode: k.Native}
		if k.Shift {
			down.Modifiers = int64(kb.ModifierShift)
		}
		if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, down); err != nil {
			return err
		}
		up := down
		up.Type, up.Text, up.UnmodifiedText = kb.KeyUp, "", ""
		_, err := cdp.Call(ctx, t, input.DispatchKeyEvent, up)
		return err
	})
}
