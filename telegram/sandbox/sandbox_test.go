package sandbox_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/telegram/fakebot"
	"switchyard/telegram/sandbox"
)

// testBundle is a fake Bot API with the onboarding bot (and, when asked, the
// chat bot) on it, and the sandbox's admin API served under /admin/api.
type testBundle struct {
	fake *fakebot.Server
	sb   *sandbox.Sandbox
	base string
}

var (
	onboardingToken = fakebot.Token(7100000001)
	chatToken       = fakebot.Token(7100000002)
)

func setup(t *testing.T, withChat bool) *testBundle {
	t.Helper()
	fake := fakebot.New(fakebot.Opts{})
	t.Cleanup(fake.Close)
	opts := sandbox.Opts{Server: fake, OnboardingToken: onboardingToken}
	if withChat {
		opts.ChatToken = chatToken
	}
	sb := sandbox.New(opts)
	r := mux.NewRouter()
	sb.AdminRoutes(r.PathPrefix("/admin/api").Subrouter())
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return &testBundle{fake: fake, sb: sb, base: srv.URL + "/admin/api"}
}

// call sends a JSON body (none when empty) and returns the status and body.
func (b *testBundle) call(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func TestSandbox(t *testing.T) {
	t.Parallel()

	t.Run("the bots on the sandbox are listed, the onboarding bot first", func(t *testing.T) {
		t.Parallel()
		b := setup(t, true)
		bots := b.sb.Bots()
		if len(bots) != 2 || bots[0] != (sandbox.Bot{Name: sandbox.BotOnboarding, Token: onboardingToken}) ||
			bots[1] != (sandbox.Bot{Name: sandbox.BotChat, Token: chatToken}) {
			t.Fatalf("bots %+v", bots)
		}
		if only := setup(t, false).sb.Bots(); len(only) != 1 || only[0].Name != sandbox.BotOnboarding {
			t.Fatalf("without the chat bot: %+v", only)
		}
	})

	t.Run("a start reaches the bot as an update and answers the message", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		status, body := b.call(t, http.MethodPost, "/sandbox/users/42/start", `{"payload":" alice ","firstName":"Ann"}`)
		var m struct {
			MessageID int   `json:"messageId"`
			ChatID    int64 `json:"chatId"`
		}
		if err := json.Unmarshal(body, &m); status != http.StatusOK || err != nil || m.ChatID != 42 || m.MessageID == 0 {
			t.Fatalf("status %d body %s", status, body)
		}
		chat, ok := b.fake.Bot(onboardingToken).Chat(42)
		if !ok || len(chat.Messages) != 1 || chat.Messages[0].Text != "/start alice" || chat.User.FirstName != "Ann" {
			t.Fatalf("chat %+v", chat)
		}
		if status, _ := b.call(t, http.MethodPost, "/sandbox/users/42/start", ""); status != http.StatusOK {
			t.Fatalf("a start without a body: status %d", status)
		}
	})

	t.Run("bad input gets the status that says what is wrong", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		for _, tc := range []struct {
			name, path, body string
			want             int
		}{
			{"an unknown bot", "/sandbox/users/42/start", `{"bot":"other"}`, http.StatusBadRequest},
			{"the chat bot when it is not on the sandbox", "/sandbox/users/42/messages", `{"text":"hi","bot":"chat"}`, http.StatusNotFound},
			{"an empty text", "/sandbox/users/42/messages", `{"text":" "}`, http.StatusBadRequest},
			{"a press in a chat that does not exist", "/sandbox/users/43/press", `{"data":"bind:5"}`, http.StatusNotFound},
			{"a press without data", "/sandbox/users/42/press", `{}`, http.StatusBadRequest},
			{"a body of the wrong shape", "/sandbox/users/42/start", `{"payload":1}`, http.StatusBadRequest},
			{"a business message without the chat bot", "/sandbox/users/42/business-message", `{"text":"hi"}`, http.StatusNotFound},
			{"an owner id that is not positive", "/sandbox/business-connections", `{"ownerId":0}`, http.StatusBadRequest},
		} {
			if status, body := b.call(t, http.MethodPost, tc.path, tc.body); status != tc.want {
				t.Errorf("%s: status %d, want %d: %s", tc.name, status, tc.want, body)
			}
		}
	})

	t.Run("a blocked user can press nothing until they unblock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, false)
		u, err := b.sb.User(42, "Ann")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.sb.Start(sandbox.BotOnboarding, u, ""); err != nil {
			t.Fatal(err)
		}
		fakeSrv := httptest.NewServer(b.fake)
		t.Cleanup(fakeSrv.Close)
		prompt, _ := json.Marshal(map[string]any{"chat_id": 42, "text": "Is this your account?",
			"reply_markup": map[string]any{"inline_keyboard": [][]map[string]string{{{"text": "Yes", "callback_data": "bind:5"}}}}})
		resp, err := http.Post(fakeSrv.URL+"/bot"+onboardingToken+"/sendMessage", "application/json", strings.NewReader(string(prompt)))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("sendMessage: %v %v", resp, err)
		}
		resp.Body.Close()
		if status, _ := b.call(t, http.MethodPost, "/sandbox/users/42/block", ""); status != http.StatusNoContent {
			t.Fatalf("block: %d", status)
		}
		_, err = b.sb.Press("", u, 0, "bind:5")
		var herr *httpjson.Error
		if !errors.As(err, &herr) || herr.Status != http.StatusConflict {
			t.Fatalf("a blocked user's press: %v", err)
		}
		if status, _ := b.call(t, http.MethodPost, "/sandbox/users/42/unblock", `{"bot":"onboarding"}`); status != http.StatusNoContent {
			t.Fatalf("unblock: %d", status)
		}
		status, body := b.call(t, http.MethodPost, "/sandbox/users/42/press", `{"data":"bind:5"}`)
		if status != http.StatusOK || !strings.Contains(string(body), `"callbackQueryId"`) {
			t.Fatalf("a press after unblocking: %d %s", status, body)
		}
	})

	t.Run("a customer's message connects a business account when none exists, and the view shows it", func(t *testing.T) {
		t.Parallel()
		b := setup(t, true)
		status, body := b.call(t, http.MethodPost, "/sandbox/users/77/business-message", `{"text":"hello shop","firstName":"Bob"}`)
		if status != http.StatusOK || !strings.Contains(string(body), `"businessConnectionId"`) {
			t.Fatalf("status %d body %s", status, body)
		}
		status, body = b.call(t, http.MethodGet, "/sandbox", "")
		var view struct {
			Bots []struct {
				Bot         string `json:"bot"`
				Token       string `json:"token"`
				Connections []struct {
					OwnerID  int64 `json:"ownerId"`
					Enabled  bool  `json:"enabled"`
					CanReply bool  `json:"canReply"`
				} `json:"connections"`
				Chats []struct {
					UserID   int64 `json:"userId"`
					Messages []struct {
						From string `json:"from"`
						Text string `json:"text"`
					} `json:"messages"`
				} `json:"chats"`
			} `json:"bots"`
		}
		if err := json.Unmarshal(body, &view); status != http.StatusOK || err != nil || len(view.Bots) != 2 {
			t.Fatalf("GET /sandbox: %d %s %v", status, body, err)
		}
		chat := view.Bots[1]
		if chat.Bot != "chat" || chat.Token != chatToken || len(chat.Connections) != 1 || !chat.Connections[0].CanReply ||
			len(chat.Chats) != 1 || chat.Chats[0].UserID != 77 || chat.Chats[0].Messages[0].Text != "hello shop" {
			t.Fatalf("chat bot %+v", chat)
		}
		if view.Bots[0].Connections == nil || view.Bots[0].Chats == nil {
			t.Fatal("an empty list is null, not []")
		}
	})
}
