package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"switchyard/omni"
	"switchyard/testwait"
)

// readyProcess is the binary started the way a program starts it: on
// --ephemeral, told it is ready by --ready-file or --ready-json, never by
// the banner.
type readyProcess struct {
	cmd            *exec.Cmd
	stdout, stderr syncLog
	// tmp is its TMPDIR, where --ephemeral makes its folder.
	tmp  string
	done chan error
}

// startReady runs the binary with args, its TMPDIR a folder of the test's.
func startReady(t *testing.T, args ...string) *readyProcess {
	t.Helper()
	p := &readyProcess{tmp: t.TempDir(), done: make(chan error, 1)}
	p.cmd = exec.Command(binary(t), args...)
	p.cmd.Env = append(os.Environ(), "TMPDIR="+p.tmp)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		p.done <- nil
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// exited reports whether the process has ended (keeping its outcome for stop).
func (p *readyProcess) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// waitFile waits for the ready file path and decodes it, failing the test
// when the process ends first.
func (p *readyProcess) waitFile(t *testing.T, path string) (readyObject, []byte) {
	t.Helper()
	testwait.Until(t, 20*time.Second, "the ready file "+path, func() bool {
		if p.exited() {
			t.Fatalf("switchyard exited before it was ready: %v", <-p.done)
		}
		_, err := os.Stat(path)
		return err == nil
	})
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeReady(t, data), data
}

// readyObject is the ready object as docs/testing.md documents it, spelled
// out apart from readyInfo so that a renamed field fails the tests.
type readyObject struct {
	URL            string `json:"url"`
	AdminToken     string `json:"adminToken"`
	BotSecret      string `json:"botSecret"`
	WebhookSecrets struct {
		Onboarding string `json:"onboarding"`
		Chat       string `json:"chat"`
	} `json:"webhookSecrets"`
	SandboxBotTokens struct {
		Onboarding string `json:"onboarding"`
		Chat       string `json:"chat"`
	} `json:"sandboxBotTokens"`
	PID int `json:"pid"`
}

// decodeReady decodes a ready object, refusing a field the test does not
// know of.
func decodeReady(t *testing.T, data []byte) readyObject {
	t.Helper()
	var info readyObject
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&info); err != nil {
		t.Fatalf("the ready object %q: %v", data, err)
	}
	if dec.More() {
		t.Fatalf("the ready object %q is followed by more", data)
	}
	return info
}

// stop sends SIGTERM and waits for a clean exit.
func (p *readyProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("switchyard exited with %v after SIGTERM", err)
		}
	case <-time.After(20 * time.Second * testwait.Slack):
		t.Fatal("switchyard did not stop after SIGTERM")
	}
}

// assertTmpEmpty fails t unless the process's TMPDIR is empty: its
// ephemeral database is gone.
func (p *readyProcess) assertTmpEmpty(t *testing.T) {
	t.Helper()
	left, err := os.ReadDir(p.tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("the temporary folder still holds %s", left[0].Name())
	}
}

// ephemeralDBFile is the SQLite file --ephemeral made in the process's
// TMPDIR, or "" when there is none.
func (p *readyProcess) ephemeralDBFile() string {
	files, _ := filepath.Glob(filepath.Join(p.tmp, "switchyard-ephemeral-*", "switchyard.db"))
	if len(files) != 1 {
		return ""
	}
	return files[0]
}

// call sends method url with header and body (none when ""), and returns the
// status and the answer.
func call(t *testing.T, method, url string, header http.Header, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

func TestReadyFile(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "switchyard.ready.json")
	p := startReady(t, "serve", "--addr", "127.0.0.1:0", "--ready-file", ready, "--ephemeral", "--log-format", "json")
	info, data := p.waitFile(t, ready)

	t.Run("the file is the owner's only, one line, and names the real port and pid", func(t *testing.T) {
		st, err := os.Stat(ready)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, want 0600", st.Mode().Perm())
		}
		if bytes.Count(data, []byte("\n")) != 1 || !bytes.HasSuffix(data, []byte("\n")) {
			t.Fatalf("not one line: %q", data)
		}
		u, err := url.Parse(info.URL)
		if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" || u.Port() == "0" {
			t.Fatalf("url %q: %v", info.URL, err)
		}
		if !strings.Contains(p.stdout.String(), "running at "+info.URL+"\n") {
			t.Fatalf("the banner names another URL than %s:\n%s", info.URL, p.stdout.String())
		}
		if info.PID != p.cmd.Process.Pid {
			t.Fatalf("pid %d, want %d", info.PID, p.cmd.Process.Pid)
		}
		if files, _ := os.ReadDir(filepath.Dir(ready)); len(files) != 1 {
			t.Fatalf("the folder holds %d files, want the ready file alone (no temporary file left)", len(files))
		}
	})
	t.Run("it is written once the instance is ready", func(t *testing.T) {
		if status, body := call(t, http.MethodGet, info.URL+"/readyz", nil, ""); status != http.StatusOK {
			t.Fatalf("/readyz: %d %s", status, body)
		}
	})
	t.Run("the admin token opens the admin API", func(t *testing.T) {
		if status, body := call(t, http.MethodGet, info.URL+"/admin/api/bot/events", bearer(info.AdminToken), ""); status != http.StatusOK {
			t.Fatalf("with the token: %d %s", status, body)
		}
		if status, _ := call(t, http.MethodGet, info.URL+"/admin/api/bot/events", bearer(info.BotSecret), ""); status != http.StatusUnauthorized {
			t.Fatalf("with another secret: %d, want 401", status)
		}
	})
	t.Run("the bot secret opens the /bot/* contract", func(t *testing.T) {
		status, body := call(t, http.MethodGet, info.URL+"/bot/events/pending", bearer(info.BotSecret), "")
		if status != http.StatusOK || !strings.Contains(body, `"events"`) {
			t.Fatalf("with the secret: %d %s", status, body)
		}
		if status, _ := call(t, http.MethodGet, info.URL+"/bot/events/pending", bearer(info.AdminToken), ""); status != http.StatusUnauthorized {
			t.Fatalf("with another secret: %d, want 401", status)
		}
	})
	t.Run("each sandbox bot token is its bot's on the sandbox Bot API", func(t *testing.T) {
		for token, id := range map[string]int64{info.SandboxBotTokens.Onboarding: sandboxOnboardingBotID, info.SandboxBotTokens.Chat: sandboxOmniBotID} {
			status, body := call(t, http.MethodGet, info.URL+sandboxPath+"/bot"+token+"/getMe", nil, "")
			if status != http.StatusOK || !strings.Contains(body, `"id":`+strconv.FormatInt(id, 10)) {
				t.Fatalf("getMe of bot %d: %d %s", id, status, body)
			}
		}
		if status, _ := call(t, http.MethodGet, info.URL+sandboxPath+"/bot7000000001:"+strings.Repeat("x", 35)+"/getMe", nil, ""); status == http.StatusOK {
			t.Fatal("a made-up token was taken")
		}
	})
	t.Run("the webhook secrets open each bot's webhook", func(t *testing.T) {
		secret := func(s string) http.Header { return http.Header{omni.WebhookSecretHeader: {s}} }
		update := `{"update_id":1,"message":{"message_id":1,"from":{"id":42,"is_bot":false,"first_name":"Ann"},"chat":{"id":42,"type":"private"},"date":1771668000,"text":"hello"}}`
		if status, body := call(t, http.MethodPost, info.URL+omni.WebhookPath, secret(info.WebhookSecrets.Chat), update); status != http.StatusOK {
			t.Fatalf("the chat webhook with its secret: %d %s", status, body)
		}
		if status, _ := call(t, http.MethodPost, info.URL+omni.WebhookPath, secret(info.WebhookSecrets.Onboarding), update); status != http.StatusUnauthorized {
			t.Fatalf("the chat webhook with the other bot's secret: %d, want 401", status)
		}
		// The onboarding bot polls here: its webhook takes the secret, then
		// says it does not take updates this way.
		if status, body := call(t, http.MethodPost, info.URL+onboardingWebhookPath, secret(info.WebhookSecrets.Onboarding), update); status != http.StatusNotFound || !strings.Contains(body, "long polling") {
			t.Fatalf("the onboarding webhook with its secret: %d %s", status, body)
		}
	})
	t.Run("it runs on a database in a temporary folder", func(t *testing.T) {
		if p.ephemeralDBFile() == "" {
			t.Fatalf("no switchyard-ephemeral-*/switchyard.db in TMPDIR")
		}
	})

	p.stop(t)
	t.Run("no secret reached the log or stdout", func(t *testing.T) {
		for name, s := range map[string]string{
			"adminToken": info.AdminToken, "botSecret": info.BotSecret,
			"onboarding webhook secret": info.WebhookSecrets.Onboarding, "chat webhook secret": info.WebhookSecrets.Chat,
			"onboarding sandbox token": info.SandboxBotTokens.Onboarding, "chat sandbox token": info.SandboxBotTokens.Chat,
		} {
			if s == "" {
				t.Fatalf("the ready file has no %s: %s", name, data)
			}
			_, secretPart, _ := strings.Cut(s, ":")
			if secretPart == "" {
				secretPart = s
			}
			if strings.Contains(p.stderr.String(), secretPart) || strings.Contains(p.stdout.String(), secretPart) {
				t.Errorf("the %s is in the output", name)
			}
		}
	})
	t.Run("a clean exit removes the ready file and the database", func(t *testing.T) {
		if _, err := os.Stat(ready); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the ready file is still there: %v", err)
		}
		p.assertTmpEmpty(t)
	})
}

func TestReadyJSON(t *testing.T) {
	t.Parallel()
	p := startReady(t, "serve", "--addr", "127.0.0.1:0", "--ready-json", "--ephemeral")
	var line string
	testwait.Until(t, 20*time.Second, "a line on stdout", func() bool {
		if p.exited() {
			t.Fatalf("switchyard exited before it was ready: %v", <-p.done)
		}
		out := p.stdout.String()
		var ok bool
		line, _, ok = strings.Cut(out, "\n")
		return ok
	})
	info := decodeReady(t, []byte(line))
	if info.URL == "" || info.AdminToken == "" || info.BotSecret == "" || info.PID != p.cmd.Process.Pid ||
		info.WebhookSecrets.Onboarding == "" || info.WebhookSecrets.Chat == "" ||
		info.SandboxBotTokens.Onboarding == "" || info.SandboxBotTokens.Chat == "" {
		t.Fatalf("a field is missing: %s", line)
	}
	if status, body := call(t, http.MethodGet, info.URL+"/admin/api/bot/events", bearer(info.AdminToken), ""); status != http.StatusOK {
		t.Fatalf("the admin token: %d %s", status, body)
	}
	if p.ephemeralDBFile() == "" {
		t.Fatal("no ephemeral database in TMPDIR")
	}
	p.stop(t)
	if out := p.stdout.String(); out != line+"\n" {
		t.Fatalf("stdout holds more than the JSON line:\n%s", out)
	}
	p.assertTmpEmpty(t)
}

func TestReadyFileOfAnotherStartIsReplaced(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "ready.json")
	if err := os.WriteFile(ready, []byte(`{"url":"http://127.0.0.1:1","pid":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startReady(t, "serve", "--addr", "127.0.0.1:0", "--ready-file", ready, "--ephemeral", "--roles", "backend")
	testwait.Until(t, 20*time.Second, "this start's ready file", func() bool {
		if p.exited() {
			t.Fatalf("switchyard exited before it was ready: %v", <-p.done)
		}
		data, err := os.ReadFile(ready)
		return err == nil && strings.Contains(string(data), `"pid":`+strconv.Itoa(p.cmd.Process.Pid))
	})
	info, _ := p.waitFile(t, ready)
	if st, _ := os.Stat(ready); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	if info.SandboxBotTokens.Onboarding != "" || info.SandboxBotTokens.Chat != "" {
		t.Fatalf("a process with no bot on the sandbox names sandbox tokens: %+v", info.SandboxBotTokens)
	}
	p.stop(t)
	if _, err := os.Stat(ready); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the ready file is still there: %v", err)
	}
	p.assertTmpEmpty(t)
}

func TestReadyFileNotWritableStopsTheStart(t *testing.T) {
	t.Parallel()
	ready := filepath.Join(t.TempDir(), "no such folder", "ready.json")
	p := startReady(t, "serve", "--addr", "127.0.0.1:0", "--ready-file", ready, "--ephemeral", "--roles", "backend", "--log-format", "json")
	var err error
	select {
	case err = <-p.done:
		p.done <- err
	case <-time.After(20 * time.Second * testwait.Slack):
		t.Fatal("switchyard runs on although it could not say it is ready")
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(p.stderr.String(), "ready file") {
		t.Fatalf("exit %v, stderr:\n%s", err, p.stderr.String())
	}
	p.assertTmpEmpty(t)
}

func TestEphemeralRefusals(t *testing.T) {
	t.Parallel()
	t.Run("--ephemeral with --db is a usage error that opens nothing", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "named.db")
		for _, cmd := range []string{"serve", "demo"} {
			code, _, errOut := runArgs(t, cmd, "--ephemeral", "--db", db, "--addr", "127.0.0.1:0")
			if code != 2 || !strings.Contains(errOut, "--ephemeral runs on a temporary database of its own") || !strings.Contains(errOut, "drop --db") {
				t.Fatalf("%s: exit %d, stderr %q", cmd, code, errOut)
			}
		}
		if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused start touched the database: %v", err)
		}
	})
	t.Run("--ephemeral is never on PostgreSQL", func(t *testing.T) {
		_, err := parseConfig("serve", []string{"--ephemeral", "--db", "postgres://user@localhost/tests"}, func(string) string { return "" }, io.Discard)
		if !errors.Is(err, errEphemeralDB) || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "never runs on PostgreSQL") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a database named by the environment is refused as well", func(t *testing.T) {
		for _, tc := range []struct{ env, db, want string }{
			{"SWITCHYARD_EPHEMERAL", "postgres://user@localhost/tests", "never runs on PostgreSQL"},
			{"SWITCHYARD_EPHEMERAL", "./kept.db", "to keep ./kept.db"},
		} {
			env := map[string]string{tc.env: "true", "SWITCHYARD_DB": tc.db}
			_, err := parseConfig("serve", nil, func(k string) string { return env[k] }, io.Discard)
			if !errors.Is(err, errEphemeralDB) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SWITCHYARD_DB=%s: got %v", tc.db, err)
			}
		}
	})
	t.Run("--ephemeral alone is taken", func(t *testing.T) {
		cfg, err := parseConfig("serve", []string{"--ephemeral", "--ready-file", "r.json", "--ready-json"}, func(string) string { return "" }, io.Discard)
		if err != nil || !cfg.Start.Ephemeral || cfg.Start.ReadyFile != "r.json" || !cfg.Start.ReadyJSON {
			t.Fatalf("got %+v, %v", cfg, err)
		}
	})
}

// docExample is the first sh block of docs/testing.md's section heading.
func docExample(t *testing.T, heading string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "testing.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/testing.md has no %q", heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "\n```sh\n")
	if !ok {
		t.Fatalf("%q has no sh block", heading)
	}
	block, _, ok = strings.Cut(block, "\n```\n")
	if !ok {
		t.Fatalf("%q's sh block does not end", heading)
	}
	return block + "\n"
}

func TestTestingDocExample(t *testing.T) {
	t.Parallel()
	runDocExample(t, "## Starting Switchyard from a test", "ok: event 1 emitted, pending, acknowledged")
}

// TestTestingDocClockExample runs docs/testing.md's example of a referral
// whose owner arrives 20 minutes late, on a manual clock, against the
// built binary.
func TestTestingDocClockExample(t *testing.T) {
	t.Parallel()
	runDocExample(t, "## Example: a referral whose owner arrives 20 minutes late",
		"ok: bonded once the owner arrived; the store's clock reads 2026-01-01T09:4")
}

// runDocExample runs the sh block under heading in docs/testing.md with the
// built binary first on PATH and a TMPDIR of its own, and checks that it
// ends well (printing want) and leaves nothing in TMPDIR.
func runDocExample(t *testing.T, heading, want string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("docs/testing.md's example needs curl: install it")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "example.sh")
	if err := os.WriteFile(script, []byte(docExample(t, heading)), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second*testwait.Slack)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(binary(t))+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+tmp)
	// The script's own trap stops switchyard when it fails; a script cut
	// short by the deadline leaves it to the process group's kill.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("the example failed: %v\n%s", err, out)
	}
	left, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("the example left %s in TMPDIR", left[0].Name())
	}
}
