package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/mymmrac/telego"

	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
	"switchyard/telegram/sandbox"
	"switchyard/web"
)

// sandboxPageLimit is the most a Sandbox page (or its live fragment) may
// weigh, however long the sandbox ran (issue 20).
const sandboxPageLimit = 200 << 10

// The Sandbox page after a long demo's worth of traffic: hundreds of users
// who each opened the onboarding bot and were answered with buttons, a user
// who talked to it for hundreds of messages, and customers writing to the
// business account. The page shows a window of it, and paging reaches the
// rest.
func TestSandboxPageStaysSmall(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	const (
		onboardingToken = "7100000001:onboarding_Secret-0123456789abcdefg"
		chatToken       = "7100000002:chat_Secret-0123456789abcdefghijklm"
		users           = 1000
		customers       = 200
		longChat        = int64(7_000_000)
		longMessages    = 400 // 200 from the user, 200 from the bot
	)
	fake := fakebot.New(fakebot.Opts{Tokens: []string{onboardingToken, chatToken}})
	fakeSrv := httptest.NewServer(fake)
	t.Cleanup(func() { fakeSrv.Close(); fake.Close() })
	sbx := sandbox.New(sandbox.Opts{Server: fake, OnboardingToken: onboardingToken, ChatToken: chatToken})
	c := newConsole(t, web.Options{DB: db, Sandbox: sbx})

	welcome := strings.Repeat("Welcome to the club! Connect your wallet to get your status and your partners' bonuses. ", 3)
	bot := &botClient{t: t, url: fakeSrv.URL + "/bot" + onboardingToken}
	for i := range users {
		u := telego.User{ID: int64(5_000_000 + i), FirstName: fmt.Sprint("User", i)}
		if _, err := sbx.Start(sandbox.BotOnboarding, u, fmt.Sprint("code", i%37)); err != nil {
			t.Fatal(err)
		}
		bot.send(u.ID, welcome, "wallet", "status", "help")
		if _, err := sbx.Press(sandbox.BotOnboarding, u, 0, "status"); err != nil {
			t.Fatal(err)
		}
	}
	long := telego.User{ID: longChat, FirstName: "Talkative"}
	for i := range longMessages / 2 {
		if _, err := sbx.Send(sandbox.BotOnboarding, long, fmt.Sprintf("question %d", i)); err != nil {
			t.Fatal(err)
		}
		bot.send(longChat, fmt.Sprintf("answer %d: %s", i, welcome), "more")
	}
	for i := range customers {
		u := telego.User{ID: int64(6_000_000 + i), FirstName: fmt.Sprint("Customer", i)}
		for j := range 3 {
			if _, err := sbx.BusinessMessage("", u, fmt.Sprintf("Hello, is the shop open today? (%d)", j)); err != nil {
				t.Fatal(err)
			}
		}
	}

	fetch := func(t *testing.T, path string, fragment bool) (*goquery.Document, int) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, c.base+path, nil)
		if fragment {
			req.Header.Set("HX-Request", "true")
		}
		resp, err := c.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: status %d\n%s", path, resp.StatusCode, b)
		}
		if len(b) >= sandboxPageLimit {
			t.Errorf("GET %s (fragment %v) is %d KB, want under %d KB", path, fragment, len(b)>>10, sandboxPageLimit>>10)
		}
		doc, err := goquery.NewDocumentFromReader(strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return doc, len(b)
	}

	t.Run("the page and its live fragment stay under 200 KB", func(t *testing.T) {
		doc, size := fetch(t, "/admin/sandbox", false)
		_, fragment := fetch(t, "/admin/sandbox", true)
		t.Logf("after %d messages: page %d KB, fragment %d KB", users*3+longMessages+customers*3, size>>10, fragment>>10)
		if got := trimmed(tid(doc, "sandbox-count-onboarding")); !strings.HasPrefix(got, fmt.Sprintf("10 of %d chat(s)", users+1)) {
			t.Errorf("onboarding count %q", got)
		}
		if got := trimmed(tid(doc, "sandbox-count-chat")); !strings.HasPrefix(got, fmt.Sprintf("10 of %d chat(s)", customers)) {
			t.Errorf("chat bot count %q", got)
		}
		if n := doc.Find(`[data-testid="sandbox-bot-onboarding"] article.tg-chat`).Length(); n != 10 {
			t.Errorf("%d onboarding chats on the page, want 10", n)
		}
	})

	t.Run("older chats are reachable by paging, each once", func(t *testing.T) {
		seen := map[string]int{}
		path, pages := "/admin/sandbox", 0
		for path != "" {
			doc, _ := fetch(t, path, false)
			pages++
			doc.Find(`[data-testid="sandbox-bot-onboarding"] article.tg-chat`).Each(func(_ int, s *goquery.Selection) {
				id, _ := s.Attr("id")
				seen[id]++
			})
			if pages == 2 {
				back, _ := doc.Find(`[data-testid="sandbox-bot-onboarding"] article.tg-chat input[name="back"]`).First().Attr("value")
				if !strings.HasPrefix(back, path+"#chat-onboarding-") {
					t.Errorf("a chat on %s returns its forms to %q, not to the page it is on", path, back)
				}
			}
			path, _ = tid(doc, "sandbox-older-onboarding").Attr("href")
			if pages > users {
				t.Fatal("the older-chats links do not end")
			}
		}
		if len(seen) != users+1 {
			t.Fatalf("paging showed %d chats, want %d", len(seen), users+1)
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("chat %s shown on %d pages", id, n)
			}
		}
		if seen["chat-onboarding-5000000"] != 1 {
			t.Error("the first user's chat was never shown")
		}
	})

	t.Run("a chat's earlier messages are reachable by paging", func(t *testing.T) {
		anchor := fmt.Sprint("chat-onboarding-", longChat)
		doc, _ := fetch(t, "/admin/sandbox", false)
		open, ok := tid(doc, "sandbox-open-"+anchor).Attr("href")
		if !ok || !strings.Contains(trimmed(tid(doc, "sandbox-open-"+anchor)), fmt.Sprint(longMessages-5, " earlier message(s)")) {
			t.Fatalf("no link to the long chat's earlier messages: %q", trimmed(tid(doc, "sandbox-open-"+anchor)))
		}
		seen := map[string]bool{}
		path, pages := open, 0
		var newer string
		for path != "" {
			doc, _ := fetch(t, path, false)
			if _, size := fetch(t, path, true); size == 0 {
				t.Fatalf("the open chat's live fragment is empty at %s", path)
			}
			pages++
			doc.Find(`#` + anchor + ` li.tg-msg p.text`).Each(func(_ int, s *goquery.Selection) { seen[s.Text()] = true })
			if pages == 2 {
				newer, _ = tid(doc, "sandbox-later-messages").Attr("href")
			}
			path, _ = tid(doc, "sandbox-earlier-messages").Attr("href")
			if pages > longMessages {
				t.Fatal("the earlier-messages links do not end")
			}
		}
		if len(seen) != longMessages || !seen["question 0"] || !seen[fmt.Sprintf("question %d", longMessages/2-1)] {
			t.Fatalf("paging showed %d distinct messages, want %d", len(seen), longMessages)
		}
		if newer == "" {
			t.Fatal("the second page has no link to later messages")
		}
		doc, _ = fetch(t, newer, false)
		if last := doc.Find(`#` + anchor + ` li.tg-msg p.text`).Last().Text(); !strings.HasPrefix(last, fmt.Sprintf("answer %d:", longMessages/2-1)) {
			t.Fatalf("the later-messages link from the second page ends at %q, want the newest", last)
		}
	})
}

// botClient sends messages as a bot through the fake's Bot API.
type botClient struct {
	t   *testing.T
	url string
}

// send sends text with one row of inline buttons, one per callback data.
func (b *botClient) send(chat int64, text string, data ...string) {
	b.t.Helper()
	var row []map[string]string
	for _, d := range data {
		row = append(row, map[string]string{"text": strings.ToUpper(d[:1]) + d[1:], "callback_data": d})
	}
	body, _ := json.Marshal(map[string]any{"chat_id": chat, "text": text,
		"reply_markup": map[string]any{"inline_keyboard": [][]map[string]string{row}}})
	resp, err := http.Post(b.url+"/sendMessage", "application/json", strings.NewReader(string(body)))
	if err != nil {
		b.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.t.Fatalf("sendMessage: status %d", resp.StatusCode)
	}
}
