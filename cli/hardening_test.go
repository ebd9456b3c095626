package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"switchyard/store/storetest"
)

// servedApp is the wired app behind serve's own listener and http.Server
// (listen, httpServer), with the configuration args on top of the walk's.
type servedApp struct {
	base string
	logs *syncLog
}

func newServedApp(t *testing.T, args ...string) *servedApp {
	t.Helper()
	cfg, err := parseConfig("serve", append([]string{"--addr", "127.0.0.1:0", "--log-format", "json"}, args...),
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncLog{}
	log := newLogger(cfg, logs)
	ln, err := listen(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	self := "http://" + ln.Addr().String()
	a, err := wire(context.Background(), cfg, storetest.New(t), walkSecrets, log, urls{self: self, public: self})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv := httpServer(cfg, a.handler, ln, log)
	for _, f := range a.onShutdown {
		srv.RegisterOnShutdown(f)
	}
	go srv.Serve(ln)
	t.Cleanup(a.close)
	t.Cleanup(func() { srv.Close() })
	return &servedApp{base: self, logs: logs}
}

func TestServeTimeouts(t *testing.T) {
	t.Parallel()
	// The timeouts are short so the test is; the long polls wait longer
	// than either.
	s := newServedApp(t, "--read-timeout", "1s", "--write-timeout", "3s")
	const wait = 4 * time.Second

	for _, c := range []struct{ name, head string }{
		{"the console login", "POST /admin/login HTTP/1.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"},
		{"a JSON body", "POST /bot/events/ack HTTP/1.1\r\nContent-Type: application/json\r\nAuthorization: Bearer " + walkSecrets.BotToBackend + "\r\n"},
	} {
		t.Run("a slow body is cut by the read timeout: "+c.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			// 1,000 bytes announced, one sent every 100 ms: 100 s for the body.
			fmt.Fprintf(conn, "%sHost: switchyard\r\nContent-Length: 1000\r\n\r\n", c.head)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := conn.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			}()
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			status, err := bufio.NewReader(conn).ReadString('\n')
			took := time.Since(start)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the slow body still held the connection after %v", took)
			}
			// The answer is a 408 when it can still be written; a connection
			// closed without an answer is cut too.
			if err == nil && !strings.HasPrefix(status, "HTTP/1.1 408") {
				t.Fatalf("the cut request was answered %q, want 408", status)
			}
			if took > 20*time.Second {
				t.Fatalf("the slow body was cut only after %v", took)
			}
		})
	}

	longPoll := func(t *testing.T, req *http.Request) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatalf("the long poll failed after %v: %v", time.Since(start), err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("after %v: %d %s %v", time.Since(start), resp.StatusCode, body, err)
		}
		if took := time.Since(start); took < wait {
			t.Fatalf("the poll answered after %v, before its %v wait", took, wait)
		}
	}

	t.Run("GET /bot/events/pending answers after its full wait", func(t *testing.T) {
		t.Parallel()
		req, _ := http.NewRequest(http.MethodGet, s.base+"/bot/events/pending?wait=4", nil)
		req.Header.Set("Authorization", "Bearer "+walkSecrets.BotToBackend)
		longPoll(t, req)
	})

	t.Run("the sandbox's getUpdates answers after its full timeout", func(t *testing.T) {
		t.Parallel()
		token := sandboxTokens(t, s.base, walkSecrets.AdminToken)["onboarding"]
		req, _ := http.NewRequest(http.MethodPost, s.base+sandboxPath+"/bot"+token+"/getUpdates",
			strings.NewReader(url.Values{"timeout": {"4"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		longPoll(t, req)
	})
}

func TestServeAuthThrottle(t *testing.T) {
	t.Parallel()
	s := newServedApp(t)
	const guess = "a-wrong-guess-0123456789abcdef"
	call := func(method, path string, header http.Header, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, vs := range header {
			req.Header[k] = vs
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}

	// One failure on each surface, five in all, from this test's address.
	for _, f := range []struct {
		name string
		resp *http.Response
	}{
		{"the admin API", call("GET", "/admin/api/queues", bearer(guess), "")},
		{"the bot contract", call("GET", "/bot/user/state?telegramId=1", bearer(guess), "")},
		{"the chat webhook", call("POST", "/webhooks/telegram", http.Header{"X-Telegram-Bot-Api-Secret-Token": {guess}}, `{"update_id":1}`)},
		{"the bot webhook", call("POST", "/webhooks/bot", http.Header{"X-Telegram-Bot-Api-Secret-Token": {guess}}, `{"update_id":1}`)},
		{"the console login", call("POST", "/admin/login", form, url.Values{"token": {guess}}.Encode())},
	} {
		if f.resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong secret on %s: %d, want 401", f.name, f.resp.StatusCode)
		}
	}
	for _, c := range []struct {
		name string
		resp *http.Response
	}{
		{"the admin API", call("GET", "/admin/api/queues", bearer(walkSecrets.AdminToken), "")},
		{"the bot contract", call("GET", "/bot/user/state?telegramId=1", bearer(walkSecrets.BotToBackend), "")},
		{"the chat webhook", call("POST", "/webhooks/telegram", http.Header{"X-Telegram-Bot-Api-Secret-Token": {walkSecrets.OmniWebhook}}, `{"update_id":1}`)},
		{"the console login", call("POST", "/admin/login", form, url.Values{"token": {walkSecrets.AdminToken}}.Encode())},
	} {
		if c.resp.StatusCode != http.StatusTooManyRequests || c.resp.Header.Get("Retry-After") == "" {
			t.Errorf("the right secret on %s after five failures across the surfaces: %d (Retry-After %q), want 429",
				c.name, c.resp.StatusCode, c.resp.Header.Get("Retry-After"))
		}
	}
	logs := s.logs.String()
	if n := strings.Count(logs, `"msg":"authentication failed"`); n != 5 {
		t.Errorf("%d failure lines for five failures:\n%s", n, logs)
	}
	if strings.Contains(logs, guess) {
		t.Errorf("a guess is in the log:\n%s", logs)
	}
}

func TestServeTrustedProxies(t *testing.T) {
	t.Parallel()
	if _, err := parseConfig("serve", []string{"--trusted-proxies", "10.0.0.0/8,nope"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Fatal("a trusted proxy that is no address was accepted")
	}
	// This test's requests come from 127.0.0.1, declared a proxy: each
	// X-Forwarded-For is another client.
	s := newServedApp(t, "--trusted-proxies", "127.0.0.1")
	login := func(client, token string) int {
		req, _ := http.NewRequest(http.MethodPost, s.base+"/admin/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", client)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 5 {
		if code := login("203.0.113.9", "a-wrong-guess-0123456789"); code != http.StatusUnauthorized {
			t.Fatalf("wrong login: %d", code)
		}
	}
	if code := login("203.0.113.9", walkSecrets.AdminToken); code != http.StatusTooManyRequests {
		t.Fatalf("the guesser behind the proxy: %d, want 429", code)
	}
	if code := login("198.51.100.4", walkSecrets.AdminToken); code != http.StatusSeeOther {
		t.Fatalf("another client behind the same proxy: %d, want 303", code)
	}
	if !strings.Contains(s.logs.String(), `"client":"203.0.113.9"`) {
		t.Fatalf("the failure lines do not name the client behind the proxy:\n%s", s.logs.String())
	}
}

func TestServeRefusesShortSecrets(t *testing.T) {
	t.Parallel()
	const short = "fifteen-bytes!!" // one byte short of the minimum
	for _, env := range []string{"SWITCHYARD_ADMIN_TOKEN", "BOT_TO_BACKEND_SECRET", "BOT_TELEGRAM_WEBHOOK_SECRET", "OMNI_WEBHOOK_SECRET"} {
		t.Run(env+" shorter than 16 bytes is refused, naming the variable and not the value", func(t *testing.T) {
			_, err := parseConfig("serve", nil, func(k string) string {
				if k == env {
					return short
				}
				return ""
			}, io.Discard)
			if !errors.Is(err, ErrWeakSecret) || !strings.Contains(err.Error(), env) || strings.Contains(err.Error(), short) {
				t.Fatalf("error %v", err)
			}
		})
	}
	t.Run("16 bytes are accepted, and other commands do not judge secrets", func(t *testing.T) {
		get := func(k string) string {
			if k == "SWITCHYARD_ADMIN_TOKEN" {
				return short + "!"
			}
			return ""
		}
		if _, err := parseConfig("serve", nil, get, io.Discard); err != nil {
			t.Fatal(err)
		}
		tooShort := func(k string) string {
			if strings.Contains(k, "SECRET") || strings.HasSuffix(k, "_TOKEN") {
				return "a"
			}
			return ""
		}
		if _, err := parseConfig("migrate", nil, tooShort, io.Discard); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the process exits at start with the message", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary(t), "serve", "--db", storetest.Source(t), "--addr", "127.0.0.1:0")
		cmd.Env = append(cmd.Environ(), "SWITCHYARD_ADMIN_TOKEN=a")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("serve with SWITCHYARD_ADMIN_TOKEN=a: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "SWITCHYARD_ADMIN_TOKEN must be at least 16 bytes") || strings.Contains(string(out), "running at") {
			t.Fatalf("output:\n%s", out)
		}
	})
	t.Run("serve --help lists the new limits", func(t *testing.T) {
		var help strings.Builder
		parseConfig("serve", []string{"--help"}, func(string) string { return "" }, &help)
		for _, env := range []string{"SWITCHYARD_READ_TIMEOUT", "SWITCHYARD_WRITE_TIMEOUT", "SWITCHYARD_MAX_CONNECTIONS", "SWITCHYARD_TRUSTED_PROXIES"} {
			if !strings.Contains(help.String(), env) {
				t.Errorf("help does not list %s:\n%s", env, help.String())
			}
		}
	})
}
