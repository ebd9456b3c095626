package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
)

// sandboxTokens reads the sandbox bots' tokens from the admin API, as an
// operator (or a test kit) does, by bot name: "onboarding" and "chat".
func sandboxTokens(t testing.TB, base, adminToken string) map[string]string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/admin/api/sandbox", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var view struct {
		Bots []struct {
			Bot   string `json:"bot"`
			Token string `json:"token"`
		} `json:"bots"`
	}
	if err := json.Unmarshal(body, &view); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("GET /admin/api/sandbox: %d %s %v", resp.StatusCode, body, err)
	}
	tokens := map[string]string{}
	for _, b := range view.Bots {
		tokens[b.Bot] = b.Token
	}
	return tokens
}

// botAPIAnswer is a Bot API answer as the sandbox gave it.
type botAPIAnswer struct {
	status      int
	ok          bool
	description string
	result      json.RawMessage
	body        string
}

func (a botAPIAnswer) String() string { return strconv.Itoa(a.status) + " " + a.body }

// sandboxCall posts form to the app's sandbox Bot API as a bot with token.
func sandboxCall(t *testing.T, base, token, method string, form url.Values, header http.Header) botAPIAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+sandboxPath+"/bot"+token+"/"+method, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var ans struct {
		Ok          bool            `json:"ok"`
		Description string          `json:"description"`
		Result      json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		t.Fatalf("%s: not a Bot API answer: %d %s", method, resp.StatusCode, body)
	}
	return botAPIAnswer{status: resp.StatusCode, ok: ans.Ok, description: ans.Description, result: ans.Result, body: string(body)}
}

func TestSandboxBotAPI(t *testing.T) {
	t.Parallel()
	w := newWiredApp(t, walkSecrets, nil)
	base := w.srv.URL
	tokens := sandboxTokens(t, base, w.sec.AdminToken)
	ids := map[string]int64{"onboarding": sandboxOnboardingBotID, "chat": sandboxOmniBotID}

	t.Run("each bot's token is generated and well formed, and the computable one is refused", func(t *testing.T) {
		for name, id := range ids {
			token := tokens[name]
			if !strings.HasPrefix(token, strconv.FormatInt(id, 10)+":") {
				t.Fatalf("%s bot's token %q is not its id's", name, token)
			}
			if _, err := telego.NewBot(token); err != nil {
				t.Fatalf("%s bot's token is not a well-formed Bot API token: %v", name, err)
			}
			if a := sandboxCall(t, base, token, "getMe", nil, nil); a.status != http.StatusOK || !a.ok {
				t.Fatalf("getMe with the %s bot's token: %+v", name, a)
			}
			for _, method := range []string{"getMe", "getUpdates", "setWebhook"} {
				if a := sandboxCall(t, base, fakebot.Token(id), method, nil, nil); a.status != http.StatusUnauthorized {
					t.Errorf("%s with fakebot.Token(%d): %+v, want 401", method, id, a)
				}
			}
		}
	})

	t.Run("another database gets other tokens", func(t *testing.T) {
		other := newWiredApp(t, walkSecrets, nil)
		theirs := sandboxTokens(t, other.srv.URL, walkSecrets.AdminToken)
		for name := range ids {
			if theirs[name] == "" || theirs[name] == tokens[name] {
				t.Errorf("%s bot: token %q on both databases", name, theirs[name])
			}
		}
		if a := sandboxCall(t, base, theirs["chat"], "getMe", nil, nil); a.status != http.StatusUnauthorized {
			t.Errorf("one database's token opened the other's sandbox: %+v", a)
		}
	})

	webhookURL := func(t *testing.T, token string) string {
		t.Helper()
		a := sandboxCall(t, base, token, "getWebhookInfo", nil, nil)
		var info telego.WebhookInfo
		if err := json.Unmarshal(a.result, &info); err != nil || !a.ok {
			t.Fatalf("getWebhookInfo: %+v %v", a, err)
		}
		return info.URL
	}
	own := map[string]string{"onboarding": base + "/webhooks/bot", "chat": base + "/webhooks/telegram"}

	t.Run("setWebhook to a URL other than the instance's own webhook is refused", func(t *testing.T) {
		for name := range ids {
			for _, foreign := range []string{
				"https://evil.example/steal",
				"http://127.0.0.1:1/webhooks/telegram",
				base + "/webhooks/telegram?copy=https://evil.example",
				base + "/admin/api/users",
				own[map[string]string{"onboarding": "chat", "chat": "onboarding"}[name]], // the other bot's route
			} {
				a := sandboxCall(t, base, tokens[name], "setWebhook", url.Values{"url": {foreign}}, nil)
				if a.status != http.StatusBadRequest || !strings.HasPrefix(a.description, "Bad Request: bad webhook:") {
					t.Errorf("%s bot, setWebhook %s: %+v, want 400 bad webhook", name, foreign, a)
				}
			}
			if got := webhookURL(t, tokens[name]); got != "" {
				t.Fatalf("%s bot's webhook is %q after refusals", name, got)
			}
		}
	})

	t.Run("setWebhook to the instance's own webhook is accepted, and deleteWebhook too", func(t *testing.T) {
		for name := range ids {
			if a := sandboxCall(t, base, tokens[name], "setWebhook", url.Values{"url": {own[name]}}, nil); a.status != http.StatusOK || !a.ok {
				t.Fatalf("%s bot, setWebhook %s: %+v", name, own[name], a)
			}
			if got := webhookURL(t, tokens[name]); got != own[name] {
				t.Fatalf("%s bot's webhook is %q, want %q", name, got, own[name])
			}
			if a := sandboxCall(t, base, tokens[name], "deleteWebhook", nil, nil); a.status != http.StatusOK || !a.ok {
				t.Fatalf("%s bot, deleteWebhook: %+v", name, a)
			}
		}
	})

	t.Run("sends meet Telegram's rate limits, checked after the request is validated", func(t *testing.T) {
		const userID = 424242
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/admin/api/sandbox/users/%d/start", base, userID),
			strings.NewReader(`{"bot":"chat","firstName":"Rate"}`))
		req.Header.Set("Authorization", "Bearer "+w.sec.AdminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("start: %d", resp.StatusCode)
		}
		// Twenty at once: a chat takes a short burst, then one a second,
		// however slowly this machine serves them.
		type answer struct {
			status int
			body   string
			err    error
		}
		answers := make([]answer, 20)
		var wg sync.WaitGroup
		for i := range answers {
			wg.Go(func() {
				form := url.Values{"chat_id": {strconv.Itoa(userID)}, "text": {"burst " + strconv.Itoa(i)}}
				resp, err := http.PostForm(base+sandboxPath+"/bot"+tokens["chat"]+"/sendMessage", form)
				if err != nil {
					answers[i].err = err
					return
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				answers[i] = answer{status: resp.StatusCode, body: string(body)}
			})
		}
		wg.Wait()
		sent, limited := 0, 0
		for _, a := range answers {
			switch {
			case a.err != nil:
				t.Fatal(a.err)
			case a.status == http.StatusOK:
				sent++
			case a.status == http.StatusTooManyRequests && strings.Contains(a.body, `"parameters":{"retry_after":`):
				limited++
			default:
				t.Errorf("sendMessage: %d %s", a.status, a.body)
			}
		}
		if sent < 3 || limited == 0 {
			t.Fatalf("%d sent and %d answered 429 of 20 sent at once", sent, limited)
		}
		// Over the limit, a wrong send still gets its own error.
		if a := sandboxCall(t, base, tokens["chat"], "sendMessage", url.Values{"chat_id": {strconv.Itoa(userID)}, "text": {""}}, nil); a.status != http.StatusBadRequest || a.description != "Bad Request: message text is empty" {
			t.Fatalf("an empty text over the limit: %+v", a)
		}
	})

	t.Run("a browser's cross-site request is refused with 403", func(t *testing.T) {
		for _, h := range []http.Header{
			{"Sec-Fetch-Site": {"cross-site"}},
			{"Origin": {"https://evil.example"}},
		} {
			a := sandboxCall(t, base, tokens["chat"], "getUpdates", nil, h)
			if a.status != http.StatusForbidden || a.ok {
				t.Errorf("getUpdates with %v: %+v, want 403", h, a)
			}
		}
	})
}

// TestSandboxTokensSurviveRestart restarts the binary on one database: the
// sandbox tokens stay, so bots and test kits configured with them keep
// working.
func TestSandboxTokensSurviveRestart(t *testing.T) {
	t.Parallel()
	db := storetest.Source(t)
	first := start(t, db)
	waitHealthy(t, first.base)
	before := sandboxTokens(t, first.base, first.token)
	if a := sandboxCall(t, first.base, fakebot.Token(sandboxOmniBotID), "getMe", nil, nil); a.status != http.StatusUnauthorized {
		t.Fatalf("the served sandbox took the computable token: %+v", a)
	}
	first.stop(t)

	second := start(t, db)
	waitHealthy(t, second.base)
	after := sandboxTokens(t, second.base, second.token)
	if len(before) != 2 || before["onboarding"] != after["onboarding"] || before["chat"] != after["chat"] {
		t.Fatalf("tokens before the restart %v, after %v", before, after)
	}
	if a := sandboxCall(t, second.base, after["chat"], "getMe", nil, nil); a.status != http.StatusOK {
		t.Fatalf("getMe with the kept token: %+v", a)
	}
	second.stop(t)
}

// TestSandboxExposure: serve refuses to put the sandbox on a non-loopback
// address unless told to, and then says so in its banner.
func TestSandboxExposure(t *testing.T) {
	t.Parallel()

	t.Run("a non-loopback address with no bot tokens refuses to start", func(t *testing.T) {
		db := storetest.Source(t)
		// A start that is not refused would serve until the deadline kills it.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary(t), "serve", "--db", db, "--addr", "0.0.0.0:0")
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("serve on 0.0.0.0 without tokens was not refused; it served until killed:\n%s", out)
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(string(out), "refusing to start") ||
			!strings.Contains(string(out), "--sandbox-public") || !strings.Contains(string(out), "BOT_TELEGRAM_TOKEN") {
			t.Fatalf("serve on 0.0.0.0 without tokens: %v\n%s", err, out)
		}
		assertUntouched(t, db)
	})

	t.Run("with --sandbox-public it starts and the banner says the sandbox is exposed", func(t *testing.T) {
		p := startArgs(t, []string{"serve", "--db", storetest.Source(t), "--addr", "0.0.0.0:0",
			"--sandbox-public", "--log-format", "json"}, nil)
		p.mu.Lock()
		banner := p.stdout.String()
		p.mu.Unlock()
		if !strings.Contains(banner, "WARNING: the sandbox Bot API") || !strings.Contains(banner, "reachable by anyone") ||
			!strings.Contains(banner, "set\n  BOT_TELEGRAM_TOKEN and OMNI_TELEGRAM_TOKEN") {
			t.Fatalf("the banner does not warn about the exposed sandbox:\n%s", banner)
		}
		p.stop(t)
	})

	t.Run("a loopback address starts with no warning", func(t *testing.T) {
		p := start(t, storetest.Source(t))
		p.mu.Lock()
		banner := p.stdout.String()
		p.mu.Unlock()
		if strings.Contains(banner, "WARNING") {
			t.Fatalf("a loopback start warns:\n%s", banner)
		}
		p.stop(t)
	})
}

func TestSandboxExposureRule(t *testing.T) {
	t.Parallel()
	t.Run("loopback addresses are told from reachable ones", func(t *testing.T) {
		for addr, want := range map[string]bool{
			"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true, "127.0.0.2:80": true,
			":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "192.168.1.10:8080": false,
			"myhost:8080": false, "127.0.0.1": false,
		} {
			if got := loopbackAddr(addr); got != want {
				t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
			}
		}
	})
	t.Run("only a process with a bot on the sandbox is refused", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			args    []string
			env     map[string]string
			refused bool
		}{
			{"every role, no tokens", []string{"--addr", ":8080"}, nil, true},
			{"only the inbox bot on the sandbox", []string{"--addr", ":8080"}, map[string]string{"BOT_TELEGRAM_TOKEN": "1:x"}, true},
			{"only the onboarding bot on the sandbox", []string{"--addr", ":8080"}, map[string]string{"OMNI_TELEGRAM_TOKEN": "1:x"}, true},
			{"both tokens", []string{"--addr", ":8080"}, map[string]string{"BOT_TELEGRAM_TOKEN": "1:x", "OMNI_TELEGRAM_TOKEN": "2:y"}, false},
			{"no bot role", []string{"--addr", ":8080", "--roles", "backend,referral,chat"}, nil, false},
			{"explicit flag", []string{"--addr", ":8080", "--sandbox-public"}, nil, false},
			{"explicit environment", []string{"--addr", ":8080"}, map[string]string{"SWITCHYARD_SANDBOX_PUBLIC": "true"}, false},
			{"a bare flag before another flag", []string{"--sandbox-public", "--addr", ":8080"}, nil, false},
			{"the flag set false over the environment", []string{"--addr", ":8080", "--sandbox-public=false"}, map[string]string{"SWITCHYARD_SANDBOX_PUBLIC": "true"}, true},
			{"loopback", []string{"--addr", "127.0.0.1:8080"}, nil, false},
		} {
			cfg, err := parseConfig("serve", tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			err = checkSandboxExposure(cfg)
			if refused := errors.Is(err, errSandboxExposed); refused != tc.refused {
				t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
			}
		}
	})
}

// TestSandboxClaims starts the sandbox of two processes on one database:
// a sandbox bot lives in one process's memory, so a second live process
// that would run the same bot on a sandbox of its own is refused, naming
// the first, while a start after the first stopped — or was killed and
// its claim expired — goes ahead.
func TestSandboxClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	configOf := func(t *testing.T, args ...string) *config {
		t.Helper()
		cfg, err := parseConfig("serve", args, func(string) string { return "" }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	log := newLogger(configOf(t), io.Discard)
	u := urls{self: "http://127.0.0.1:1", public: "http://127.0.0.1:1"}
	// second opens the database of db as a second process does.
	second := func(t *testing.T, db *store.DB) *store.DB {
		t.Helper()
		return storetest.NewWith(t, store.Options{Path: db.Path()})
	}
	// running starts the first process's sandbox and keeps its claims
	// until the returned stop.
	running := func(t *testing.T, cfg *config, db *store.DB) (stop func()) {
		t.Helper()
		sb, err := newSandbox(ctx, cfg, db, u, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sb.server.Close)
		hctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = sb.holdClaims(hctx, db, log)
		}()
		return sync.OnceFunc(func() { cancel(); <-done })
	}

	t.Run("a second live process with the same sandbox bot is refused, naming the first", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		running(t, configOf(t), db)
		holder, _, err := db.Lease(ctx, sandboxLeaseName(sandboxOnboardingBotID))
		if err != nil {
			t.Fatal(err)
		}
		_, err = newSandbox(ctx, configOf(t), second(t, db), u, log)
		if !errors.Is(err, errSandboxTaken) || !strings.Contains(err.Error(), holder.Owner) {
			t.Fatalf("the second process's sandbox: %v; want %v naming %s", err, errSandboxTaken, holder.Owner)
		}
	})

	t.Run("a start after the first process stopped goes ahead at once", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		stop := running(t, configOf(t), db)
		stop()
		began := time.Now()
		sb, err := newSandbox(ctx, configOf(t), second(t, db), u, log)
		if err != nil {
			t.Fatal(err)
		}
		sb.server.Close()
		if d := time.Since(began); d > sandboxLeaseTTL/2 {
			t.Fatalf("the start waited %s after a stop that released the claims", d)
		}
	})

	t.Run("a start after the first process was killed waits for its claims to expire", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		killed, err := newSandbox(ctx, configOf(t), db, u, log) // claims taken, never renewed nor released
		if err != nil {
			t.Fatal(err)
		}
		killed.server.Close()
		sb, err := newSandbox(ctx, configOf(t), second(t, db), u, log)
		if err != nil {
			t.Fatalf("the start after a kill: %v", err)
		}
		sb.server.Close()
	})

	t.Run("processes that run different sandbox bots share the database", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		running(t, configOf(t, "--roles", "backend,bot"), db)
		sb, err := newSandbox(ctx, configOf(t, "--roles", "inbound,chat,outbound"), second(t, db), u, log)
		if err != nil {
			t.Fatalf("the inbox bot's process beside the onboarding bot's: %v", err)
		}
		sb.server.Close()
	})
}
