package fakebot_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram/fakebot"
)

// rawCall posts form values to method with token, with extra headers, and
// returns the HTTP status and the Bot API error code of the answer (0 for
// an ok answer).
func rawCall(t *testing.T, apiURL, token, method string, form url.Values, header http.Header) (status, errorCode int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, apiURL+"/bot"+token+"/"+method, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, vs := range header {
		req.Header[k] = vs
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	var ans struct {
		Ok        bool `json:"ok"`
		ErrorCode int  `json:"error_code"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatalf("%s: not a Bot API answer: %d %s", method, res.StatusCode, body)
	}
	return res.StatusCode, ans.ErrorCode
}

func TestTokens(t *testing.T) {
	t.Parallel()
	const secretToken = "7000000001:Kp3_x-9QvR2mZt8LwYc4NhJd6sFb1aGeU0o"

	t.Run("a fake with listed tokens accepts them and refuses the computable Token", func(t *testing.T) {
		fake, apiURL := start(t, fakebot.Opts{Tokens: []string{secretToken}})
		bot, err := telego.NewBot(secretToken, telego.WithAPIServer(apiURL), telego.WithDiscardLogger())
		if err != nil {
			t.Fatal(err)
		}
		me, err := bot.GetMe(ctxFor(t, 5*time.Second))
		if err != nil || me.ID != 7000000001 {
			t.Fatalf("getMe with the listed token: %+v, %v", me, err)
		}
		for _, token := range []string{fakebot.Token(7000000001), fakebot.Token(7000000002), "7000000001:" + strings.Repeat("A", 35)} {
			if status, code := rawCall(t, apiURL, token, "getUpdates", nil, nil); status != 401 || code != 401 {
				t.Errorf("getUpdates with %s: %d (error_code %d), want 401", token, status, code)
			}
		}
		if _, err := fake.Bot(fakebot.Token(7000000001)).Send(alice, "hi"); !errors.Is(err, fakebot.ErrBadToken) {
			t.Errorf("a user wrote to a bot by an unlisted token: %v", err)
		}
		if _, err := fake.Bot(secretToken).Send(alice, "hi"); err != nil {
			t.Errorf("a user cannot write to the listed bot: %v", err)
		}
		if bots := fake.Bots(); len(bots) != 1 || bots[0].ID != 7000000001 {
			t.Errorf("the refused tokens made bots of their own: %+v", bots)
		}
	})

	t.Run("a fake without listed tokens accepts Token for any id", func(t *testing.T) {
		_, apiURL := start(t, fakebot.Opts{})
		if status, code := rawCall(t, apiURL, fakebot.Token(7000000003), "getMe", nil, nil); status != 200 || code != 0 {
			t.Fatalf("getMe with Token(id): %d (error_code %d)", status, code)
		}
		if status, _ := rawCall(t, apiURL, secretToken, "getMe", nil, nil); status != 401 {
			t.Fatalf("getMe with another token for the id: %d, want 401", status)
		}
	})
}

func TestCheckWebhook(t *testing.T) {
	t.Parallel()
	const own = "http://127.0.0.1:1/webhooks/telegram"
	var (
		mu      sync.Mutex
		checked []int64
	)
	fake, apiURL := start(t, fakebot.Opts{CheckWebhookFunc: func(botID int64, u string) error {
		mu.Lock()
		defer mu.Unlock()
		checked = append(checked, botID)
		if u != own {
			return errors.New("not this instance's webhook")
		}
		return nil
	}})
	bot := client(t, apiURL, 42)
	ctx := ctxFor(t, 5*time.Second)

	t.Run("a URL the check refuses is a 400 and sets nothing", func(t *testing.T) {
		err := bot.SetWebhook(ctx, &telego.SetWebhookParams{URL: "https://evil.example/steal"})
		wantAPIError(t, err, 400, "Bad Request: bad webhook: not this instance's webhook")
		if v, _ := fake.Bot(fakebot.Token(42)).View(); v.Webhook != "" {
			t.Fatalf("the refused URL was set: %q", v.Webhook)
		}
	})
	t.Run("the URL the check accepts is set", func(t *testing.T) {
		if err := bot.SetWebhook(ctx, &telego.SetWebhookParams{URL: own}); err != nil {
			t.Fatal(err)
		}
		if v, _ := fake.Bot(fakebot.Token(42)).View(); v.Webhook != own {
			t.Fatalf("webhook %q, want %q", v.Webhook, own)
		}
	})
	t.Run("deleteWebhook is not checked", func(t *testing.T) {
		if err := bot.DeleteWebhook(ctx, nil); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(checked) != 2 || checked[0] != 42 {
			t.Fatalf("the check saw %v, want bot 42 twice", checked)
		}
	})
}

func TestRefuseCrossOrigin(t *testing.T) {
	t.Parallel()
	fake, apiURL := start(t, fakebot.Opts{RefuseCrossOrigin: true})
	token := fakebot.Token(42)
	host := strings.TrimPrefix(apiURL, "http://")
	form := url.Values{"url": {"https://evil.example/steal"}}

	for _, tc := range []struct {
		name   string
		header http.Header
	}{
		{"a browser's cross-site form post is refused", http.Header{"Sec-Fetch-Site": {"cross-site"}}},
		{"a same-site page's post is refused", http.Header{"Sec-Fetch-Site": {"same-site"}}},
		{"a post from a foreign origin is refused", http.Header{"Origin": {"https://evil.example"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, code := rawCall(t, apiURL, token, "setWebhook", form, tc.header); status != 403 || code != 403 {
				t.Fatalf("%d (error_code %d), want 403", status, code)
			}
		})
	}
	t.Run("a cross-site GET is refused too", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, apiURL+"/bot"+token+"/getUpdates", nil)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 403 {
			t.Fatalf("%d, want 403", res.StatusCode)
		}
	})
	t.Run("nothing refused reached a bot", func(t *testing.T) {
		if calls := fake.Calls(); len(calls) != 0 {
			t.Fatalf("refused requests were served: %+v", calls)
		}
	})
	t.Run("programs and same-origin requests pass", func(t *testing.T) {
		for _, h := range []http.Header{nil, {"Sec-Fetch-Site": {"same-origin"}}, {"Origin": {"http://" + host}}} {
			if status, code := rawCall(t, apiURL, token, "getMe", nil, h); status != 200 || code != 0 {
				t.Errorf("getMe with %v: %d (error_code %d)", h, status, code)
			}
		}
		if _, err := client(t, apiURL, 42).GetMe(ctxFor(t, 5*time.Second)); err != nil {
			t.Fatalf("telego: %v", err)
		}
	})
}
