package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"switchyard/openapi/openapitest"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// The console in a real browser (Debian's chromium through chromedp), against
// the whole app as wire builds it: every role, a real database
// (storetest.Source: a SQLite file in t.TempDir(), or PostgreSQL), the
// sandbox Bot API. Under CI=true the test must run: a
// missing chromium fails it. SWITCHYARD_SCREENSHOTS=1 also saves one PNG per
// page (1280×800) under docs/screenshots/.

// browserApp is a wired Switchyard serving on an httptest server.
type browserApp struct {
	base  string
	token string
	db    *store.DB
}

func startBrowserApp(t *testing.T) *browserApp { return startServedApp(t) }

// startServedApp wires the whole application with serve's command line args
// on a new database and serves it on an httptest server, its workers
// running, until the test ends.
func startServedApp(t *testing.T, args ...string) *browserApp {
	t.Helper()
	ctx := context.Background()
	cfg, err := parseConfig("serve", append([]string{"--db", storetest.Source(t), "--sync", "NORMAL"}, args...),
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkClock(cfg); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	db, err := openStore(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	sec, err := loadSecrets(ctx, db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(nil)
	base := "http://" + srv.Listener.Addr().String()
	app, err := wire(ctx, cfg, db, sec, log, urls{self: base, public: base})
	if err != nil {
		t.Fatal(err)
	}
	// Every documented admin API call a test makes is validated against
	// the served OpenAPI document (the clock's routes with a manual clock).
	srv.Config.Handler = openapitest.Served(t, app.handler).Handler(t, app.handler)
	srv.Start()
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range app.workers {
		wg.Go(func() { _ = w.Run(workCtx) })
	}
	t.Cleanup(func() {
		for _, f := range app.onShutdown {
			f()
		}
		stopWork()
		wg.Wait()
		srv.Close()
		app.close()
		_ = db.Close()
	})
	return &browserApp{base: base, token: sec.AdminToken, db: db}
}

// api calls the admin API with the token and decodes the answer into out;
// an answer other than 2xx fails the test.
func (a *browserApp) api(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	status, raw := a.call(t, method, path, body)
	if status >= 300 {
		t.Fatalf("%s %s: status %d: %s", method, path, status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return status
}

// call calls the admin API with the token.
func (a *browserApp) call(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.base+"/admin/api"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// chromiumPath finds Debian's chromium. Under CI=true a missing browser
// fails the test; elsewhere it skips it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed; the browser tests must run under CI (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed; install it to run the browser tests")
	return ""
}

// newBrowser starts a headless chromium with a fresh profile.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 800))
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

func css(testid string) chromedp.CSS { return chromedp.CSS(`[data-testid="` + testid + `"]`) }

// browse runs browser actions, failing the test on an error.
func browse(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// inPage evaluates a JavaScript expression in the page.
func inPage[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitJS waits until a JavaScript expression is true in the page, without
// reloading it: what changes must come from the page's own live refresh.
func waitJS(t *testing.T, ctx context.Context, within time.Duration, what, js string) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !inPage[bool](t, ctx, js) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; the page says:\n%s", what, within,
				inPage[string](t, ctx, `document.querySelector("main")?.innerText ?? document.body.innerText`))
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		}
	}
}

func textOf(testid string) string {
	return `(document.querySelector('[data-testid="` + testid + `"]')?.textContent ?? "").trim()`
}

// screenshot saves the page as docs/screenshots/<name>.png when asked to.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("SWITCHYARD_SCREENSHOTS") != "1" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(filepath.Join("..", "docs", "screenshots"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("..", "docs", "screenshots", name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fitsWidth reports whether the page needs no sideways scrolling.
const fitsWidth = `document.documentElement.scrollWidth <= window.innerWidth`

func identityUpserted(user, userType, first, phone, referrer string) string {
	ref := "null"
	if referrer != "" {
		ref = `"` + referrer + `"`
	}
	return fmt.Sprintf(`{"messageId":"%s","type":"pin.identity.user-upserted","contractVersion":1,"aggregateId":"%s",`+
		`"aggregateType":"User","occurredAt":"2026-01-15T12:00:00Z","payload":{"UserId":"%s","Type":"%s","Status":"Active",`+
		`"Name":{"FirstName":"%s","LastName":"Demo"},"PhoneNumber":"%s","RegisteredVia":"Sms","ReferrerUrl":%s,"Version":1}}`,
		newUUID(), user, user, userType, first, phone, ref)
}

var uuidSeq struct {
	sync.Mutex
	n int
}

func newUUID() string {
	uuidSeq.Lock()
	defer uuidSeq.Unlock()
	uuidSeq.n++
	return fmt.Sprintf("6f1c1a52-0000-4000-8000-%012d", uuidSeq.n)
}

func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	app := startBrowserApp(t)
	ctx := newBrowser(t)

	t.Run("an operator logs in with the admin token", func(t *testing.T) {
		browse(t, ctx, "log in",
			chromedp.Navigate(app.base+"/admin"),
			chromedp.WaitVisible(chromedp.CSS("#token")),
			chromedp.SendKeys(chromedp.CSS("#token"), app.token),
			chromedp.Click(css("login-submit")),
			chromedp.WaitVisible(css("card-bot")),
		)
		if !inPage[bool](t, ctx, `!document.querySelector('[data-testid="live-toggle"]').hidden`) {
			t.Fatal("the Live switch stays hidden with JavaScript on")
		}
	})

	t.Run("the overview numbers move while events flow, without a reload", func(t *testing.T) {
		inPage[bool](t, ctx, `window.__noReload = true`)
		// The chart's total over its hour counts every handled event, whichever
		// minute it fell in (the card's number counts this minute only).
		handled := `Number(document.querySelector('[data-testid="chart-bot"] [data-testid="chart-svg"]').getAttribute("aria-label").match(/(\d+) in all/)[1])`
		before := inPage[int](t, ctx, handled)
		for i := range 5 {
			app.api(t, http.MethodPost, "/bot/events",
				fmt.Sprintf(`{"eventType":"wallet_connected","telegramId":"%d","payload":{"addr":"EQ%040d"}}`, 7770001+i, i), nil)
		}
		waitJS(t, ctx, 20*time.Second, fmt.Sprintf("the bot chart's total to move from %d by at least 5", before),
			fmt.Sprintf(`%s >= %d && !isNaN(Number(%s)) && document.querySelectorAll('[data-testid="chart-bot"] rect.bar').length > 0`,
				handled, before+5, textOf("bot-per-minute")))
		if !inPage[bool](t, ctx, `window.__noReload === true`) {
			t.Fatal("the page reloaded; the numbers should refresh in place")
		}
	})

	t.Run("pausing live updates stops the refresh", func(t *testing.T) {
		browse(t, ctx, "pause", chromedp.Click(chromedp.CSS("#live-toggle")))
		defer browse(t, ctx, "resume", chromedp.Click(chromedp.CSS("#live-toggle")))
		inPage[bool](t, ctx, `(() => { const n = document.querySelector('[data-testid="bot-pending"]'); n.dataset.mark = "kept"; return true })()`)
		app.api(t, http.MethodPost, "/bot/events", `{"eventType":"wallet_connected","telegramId":"7770100","payload":{"addr":"EQ1"}}`, nil)
		// More than a refresh period passes with the switch off: the marked
		// node must survive (a refresh swaps the region's nodes).
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if !inPage[bool](t, ctx, `document.querySelector('[data-testid="bot-pending"]')?.dataset.mark === "kept"`) {
				t.Fatal("the live region refreshed while paused")
			}
			time.Sleep(250 * time.Millisecond)
		}
	})

	t.Run("an operator redrives a dead-lettered outbox event", func(t *testing.T) {
		// Ten retries take the spec's backoff about 17 hours; the event is put
		// in the state they end in: attempts spent, dead-lettered, unprocessed.
		var id int64
		err := app.db.Tx(context.Background(), func(tx *sql.Tx) error {
			now := store.TS(app.db.Now())
			return tx.QueryRow(`insert into bot_event_outbox (event_type, magnet_uid, payload, created_at, attempts,
				last_error, last_attempt_at, dead_lettered_at, user_key)
				values ('registered', 4242, '{"leaderUid":1}', ?, 10, 'telegram: 502 Bad Gateway', ?, ?, 'uid:00000000000000004242')
				returning id`, now, now, now).Scan(&id)
		})
		if err != nil {
			t.Fatal(err)
		}
		row := fmt.Sprint("event-", id)
		browse(t, ctx, "open the dead letters",
			chromedp.Navigate(app.base+"/admin/bot"),
			chromedp.Click(css("tab-dead")),
			chromedp.WaitVisible(css(row)),
		)
		screenshot(t, ctx, "bot-outbox")
		browse(t, ctx, "open the event and redrive it",
			chromedp.Click(chromedp.CSS(`[data-testid="`+row+`"] a`)),
			chromedp.WaitVisible(css("event-payload")),
		)
		if got := inPage[string](t, ctx, textOf("event-error")); got != "telegram: 502 Bad Gateway" {
			t.Fatalf("last error shows %q", got)
		}
		screenshot(t, ctx, "bot-event")
		browse(t, ctx, "confirm the redrive",
			chromedp.Click(chromedp.CSS(`[data-testid="redrive"] summary`)),
			chromedp.Click(css("redrive-confirm")),
			chromedp.WaitVisible(css("flash")),
		)
		if got := inPage[string](t, ctx, textOf("flash")); !strings.Contains(got, "redriven") {
			t.Fatalf("flash says %q", got)
		}
		var ev struct{ State string }
		app.api(t, http.MethodGet, fmt.Sprint("/bot/events/", id), "", &ev)
		if ev.State == "dead" {
			t.Fatal("the event is still dead-lettered")
		}
	})

	t.Run("an operator replies in a chat thread and sees the status turn to sent", func(t *testing.T) {
		app.api(t, http.MethodPost, "/sandbox/users/5569901/business-message",
			`{"text":"Hello! Is the shop open today? My number is +79991234567","firstName":"Browsertest"}`, nil)
		browse(t, ctx, "open the inbox", chromedp.Navigate(app.base+"/admin/chat"))
		thread := `[...document.querySelectorAll('[data-testid="inbox"] li a')].find(a => a.textContent.includes("Browsertest"))`
		waitJS(t, ctx, 20*time.Second, "the thread in the inbox", `!!`+thread)
		screenshot(t, ctx, "chat-inbox")
		const reply = "Yes, we are open until 20:00."
		browse(t, ctx, "reply",
			chromedp.Navigate(app.base+inPage[string](t, ctx, thread+`.getAttribute("href")`)),
			chromedp.WaitVisible(chromedp.CSS("#reply-text")),
			chromedp.SendKeys(chromedp.CSS("#reply-text"), reply),
			chromedp.Click(css("reply-submit")),
			chromedp.WaitVisible(css("flash")),
		)
		status := `[...document.querySelectorAll('li.msg.out')].find(li => li.querySelector('.text')?.textContent === ` +
			fmt.Sprintf("%q", reply) + `)?.querySelector('[data-testid="status"]')?.textContent`
		waitJS(t, ctx, 20*time.Second, "the reply's status to turn to sent", status+` === "sent"`)
		if inPage[bool](t, ctx, `document.body.textContent.includes("79991234567")`) {
			t.Fatal("the thread shows a full phone number")
		}
		screenshot(t, ctx, "chat-thread")
	})

	t.Run("an operator creates a referral link", func(t *testing.T) {
		const owner, tenant, slug = "aaaaaaaa-1111-4111-8111-111111111111", "bbbbbbbb-2222-4222-8222-222222222222", "browser-olga"
		app.api(t, http.MethodPost, "/topics/pin.identity.users.v1/messages", identityUpserted(owner, "Agent", "Olga", "+79990001234", ""), nil)
		// The owner's replica first: a referral through a link whose owner has
		// no replica yet is retried with a backoff (REFERRAL_OWNER_REPLICA_MISSING).
		testwait.Until(t, 20*time.Second, "the owner's replica", func() bool {
			status, _ := app.call(t, http.MethodGet, "/referral/replicas/"+owner, "")
			return status == http.StatusOK
		})
		browse(t, ctx, "create a link",
			chromedp.Navigate(app.base+"/admin/referral"),
			chromedp.WaitVisible(css("link-form")),
			chromedp.SendKeys(chromedp.CSS("#link-url"), slug),
			chromedp.SendKeys(chromedp.CSS("#link-owner"), owner),
			chromedp.SendKeys(chromedp.CSS("#link-tenant"), tenant),
			chromedp.Click(css("link-submit")),
			chromedp.WaitVisible(css("link-"+slug)),
		)
		if got := inPage[string](t, ctx, textOf("flash")); !strings.Contains(got, slug+" created") {
			t.Fatalf("flash says %q", got)
		}
		// A user who registers through the link is bound to its owner.
		const referred = "cccccccc-3333-4333-8333-333333333333"
		app.api(t, http.MethodPost, "/topics/pin.identity.users.v1/messages", identityUpserted(referred, "Investor", "Ivan", "+79990005678", slug), nil)
		testwait.Until(t, 20*time.Second, "the bond", func() bool {
			var r struct{ HasReferrer bool }
			status, raw := app.call(t, http.MethodGet, "/referral/users/"+referred+"/referrer", "")
			return status == http.StatusOK && json.Unmarshal(raw, &r) == nil && r.HasReferrer
		})
		// A broken identity event goes to the DLQ, where the open page shows it.
		browse(t, ctx, "reload the referral page", chromedp.Navigate(app.base+"/admin/referral"))
		app.api(t, http.MethodPost, "/topics/pin.identity.users.v1/messages",
			`{"messageId":"6f1c1a52-0000-4000-8000-0000000000ff","type":"pin.identity.user-upserted","aggregateId":"dddddddd-4444-4444-8444-444444444444","payload":{"UserId":"","PhoneNumber":"+79993332211"}}`, nil)
		waitJS(t, ctx, 20*time.Second, "the DLQ entry, masked",
			`[...document.querySelectorAll('[data-testid="dead-list"] li')].some(li => li.textContent.includes("dddddddd-4444") && li.textContent.includes("+7***2211"))`)
		screenshot(t, ctx, "referral")
		browse(t, ctx, "open the referred user", chromedp.Navigate(app.base+"/admin/referral/users/"+referred),
			chromedp.WaitVisible(css("referrer")))
		if got := inPage[string](t, ctx, textOf("referrer")); !strings.Contains(got, owner) {
			t.Fatalf("referrer shows %q", got)
		}
		if got := inPage[string](t, ctx, textOf("replica-phone")); got != "+7***5678" {
			t.Fatalf("phone shows %q", got)
		}
	})

	t.Run("the sandbox shows the bot's chats and acts as a Telegram user", func(t *testing.T) {
		app.api(t, http.MethodPost, "/users", `{"link":"browser-leader","name":"Alice Leader"}`, nil)
		browse(t, ctx, "send /start with a code",
			chromedp.Navigate(app.base+"/admin/sandbox"),
			chromedp.WaitVisible(css("sandbox-start")),
			chromedp.SendKeys(chromedp.CSS("#start-name"), "Anna"),
			chromedp.SetValue(chromedp.CSS("#start-user"), "5559901"),
			chromedp.SendKeys(chromedp.CSS("#start-payload"), "browser-leader"),
			chromedp.Click(css("sandbox-start-submit")),
			chromedp.WaitVisible(css("flash")),
		)
		waitJS(t, ctx, 20*time.Second, "the bot's greeting with its buttons",
			`!!document.querySelector('[data-testid="chat-onboarding-5559901"] [data-testid="press-intro"]')`)
		browse(t, ctx, "press a button", chromedp.Click(chromedp.CSS(`[data-testid="chat-onboarding-5559901"] [data-testid="press-intro"]`)),
			chromedp.WaitVisible(css("flash")))
		waitJS(t, ctx, 20*time.Second, "the bot's answer to the button",
			`document.querySelectorAll('[data-testid="chat-onboarding-5559901"] .tg-msg.from-bot').length >= 2`)
		screenshot(t, ctx, "sandbox")
	})

	t.Run("every page is usable at 1280×800 and at phone width", func(t *testing.T) {
		pages := []struct{ name, path, ready string }{
			{"overview", "/admin", "card-chat"},
			{"queues", "/admin/queues", "group-table"},
			{"funnel", "/admin/bot/funnel", "funnel"},
		}
		for _, p := range pages {
			browse(t, ctx, "open "+p.path, chromedp.Navigate(app.base+p.path), chromedp.WaitVisible(css(p.ready)))
			screenshot(t, ctx, p.name)
		}
		browse(t, ctx, "phone width", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
		defer browse(t, ctx, "desktop width", chromedp.EmulateViewport(1280, 800))
		for _, path := range []string{"/admin", "/admin/bot", "/admin/chat", "/admin/referral", "/admin/sandbox"} {
			browse(t, ctx, "open "+path, chromedp.Navigate(app.base+path), chromedp.WaitVisible(css("nav-overview")))
			if !inPage[bool](t, ctx, fitsWidth) {
				t.Errorf("%s scrolls sideways at phone width (%d px wide)", path, inPage[int](t, ctx, `document.documentElement.scrollWidth`))
			}
		}
		browse(t, ctx, "open the overview", chromedp.Navigate(app.base+"/admin"), chromedp.WaitVisible(css("card-chat")))
		screenshot(t, ctx, "overview-phone")
	})
}
