package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"switchyard/store/storetest"
)

// clockApp is a wired Switchyard serving on an httptest server, started
// with serve's command line args (startServedApp).
type clockApp struct {
	base, token string
}

func startClockApp(t *testing.T, args ...string) *clockApp {
	t.Helper()
	a := startServedApp(t, args...)
	return &clockApp{base: a.base, token: a.token}
}

// call calls the admin API with the token; a body goes as JSON.
func (a *clockApp) call(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.base+"/admin/api"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
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

// clockNow reads {"now": …} from an answer of the clock's API.
func clockNow(t *testing.T, raw []byte) time.Time {
	t.Helper()
	var v struct {
		Now time.Time `json:"now"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || v.Now.IsZero() {
		t.Fatalf("not a clock answer: %s (%v)", raw, err)
	}
	return v.Now
}

func TestManualClockOption(t *testing.T) {
	t.Parallel()

	t.Run("--clock manual is refused unless both bots run on the sandbox", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			args    []string
			env     map[string]string
			refused bool
		}{
			{"the default clock", nil, nil, false},
			{"manual on the sandbox", []string{"--clock", "manual"}, nil, false},
			{"manual with a start on the sandbox", []string{"--clock", "manual", "--clock-start", "2026-01-01T00:00:00Z"}, nil, false},
			{"manual with the onboarding bot on Telegram", []string{"--clock", "manual"}, map[string]string{"BOT_TELEGRAM_TOKEN": "1:x"}, true},
			{"manual with the inbox bot on Telegram", []string{"--clock", "manual"}, map[string]string{"OMNI_TELEGRAM_TOKEN": "2:y"}, true},
			{"manual without the bot role", []string{"--clock", "manual", "--roles", "backend,referral,inbound,chat,outbound"}, nil, true},
			{"manual without the inbox bot's roles", []string{"--clock", "manual", "--roles", "backend,bot,referral,chat"}, nil, true},
			{"a start without --clock manual", []string{"--clock-start", "2026-01-01T00:00:00Z"}, nil, true},
		} {
			cfg, err := parseConfig("serve", tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			err = checkClock(cfg)
			if refused := errors.Is(err, errManualClock) && errors.Is(err, errUsage); refused != tc.refused {
				t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
			}
			if !tc.refused && (cfg.Clock.storeClock() == nil) != (cfg.Clock.Mode != clockManual) {
				t.Errorf("%s: the store's clock %v for --clock %q", tc.name, cfg.Clock.storeClock(), cfg.Clock.Mode)
			}
		}
		for _, bad := range [][]string{{"--clock", "fake"}, {"--clock", "manual", "--clock-start", "yesterday"}} {
			if _, err := parseConfig("serve", bad, func(string) string { return "" }, io.Discard); !errors.Is(err, errUsage) {
				t.Errorf("%v: %v, want a usage error", bad, err)
			}
		}
	})

	t.Run("the binary refuses --clock manual with a bot token, exit status 2, before it opens the database", func(t *testing.T) {
		db := storetest.Source(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, binary(t), "serve", "--db", db, "--addr", "127.0.0.1:0", "--clock", "manual")
		cmd.Env = append(os.Environ(), "BOT_TELEGRAM_TOKEN=1:x")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("--clock manual with a token was not refused; it served until killed:\n%s", out)
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "refusing --clock manual") ||
			!strings.Contains(string(out), "sandbox") {
			t.Fatalf("--clock manual with a token: %v\n%s", err, out)
		}
		assertUntouched(t, db)
	})

	t.Run("the clock's API is not served with the real clock", func(t *testing.T) {
		t.Parallel()
		a := startClockApp(t)
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/clock", ""}, {"POST", "/clock/advance", `{"by":"10m"}`},
		} {
			if status, raw := a.call(t, c.method, c.path, c.body); status != http.StatusNotFound {
				t.Fatalf("%s %s with the real clock: %d %s, want 404", c.method, c.path, status, raw)
			}
		}
	})

	t.Run("with --clock manual the clock reads its start and moves only forward", func(t *testing.T) {
		t.Parallel()
		a := startClockApp(t, "--clock", "manual", "--clock-start", "2026-01-01T00:00:00Z")
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		status, raw := a.call(t, "GET", "/clock", "")
		if status != 200 || !clockNow(t, raw).Equal(start) {
			t.Fatalf("GET /clock: %d %s, want %v", status, raw, start)
		}
		resp, err := http.Get(a.base + "/openapi.json")
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Paths map[string]map[string]json.RawMessage
		}
		err = json.NewDecoder(resp.Body).Decode(&doc)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for path, method := range map[string]string{"/admin/api/clock": "get", "/admin/api/clock/advance": "post"} {
			if _, ok := doc.Paths[path][method]; !ok {
				t.Errorf("/openapi.json does not describe %s %s", method, path)
			}
		}
		status, raw = a.call(t, "POST", "/clock/advance", `{"by":"10m"}`)
		if status != 200 || !clockNow(t, raw).Equal(start.Add(10*time.Minute)) || !strings.Contains(string(raw), `"advancedBy":"10m0s"`) {
			t.Fatalf("advance by 10m: %d %s", status, raw)
		}
		for _, bad := range []struct {
			body string
			want int
		}{
			{`{"by":"-5m"}`, 400}, {`{"by":"0s"}`, 400}, {`{"by":"ten minutes"}`, 400}, {`{"by":""}`, 400},
			{`{}`, 400}, {`{"by":10}`, 400}, {`{"by":"10m","to":"x"}`, 400}, {`{"by":"99999999999h"}`, 400}, {`not json`, 400},
		} {
			status, raw := a.call(t, "POST", "/clock/advance", bad.body)
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if status != bad.want || json.Unmarshal(raw, &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Errorf("advance %s: %d %s, want %d with a JSON error", bad.body, status, raw, bad.want)
			}
		}
		if status, raw := a.call(t, "GET", "/clock", ""); status != 200 || !clockNow(t, raw).Equal(start.Add(10*time.Minute)) {
			t.Fatalf("after the refused advances: %d %s, want the clock where the good one left it", status, raw)
		}
		req, _ := http.NewRequest("POST", a.base+"/admin/api/clock/advance", strings.NewReader(`{"by":"1m"}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("an advance without the admin token: %v %v, want 401", resp.StatusCode, err)
		}
	})
}
