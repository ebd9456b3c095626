package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds switchyard once per test run, so these tests drive the real
// process: flags, environment, signals and all.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "switchyard-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "switchyard")
		out, err := exec.Command("go", "build", "-o", binPath, "switchyard").CombinedOutput()
		if err != nil {
			buildErr = &buildError{out: string(out), err: err}
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return binPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// process is a running switchyard serve.
type process struct {
	cmd    *exec.Cmd
	base   string
	token  string
	stdout strings.Builder
	stderr syncLog // the logs
	mu     sync.Mutex
	done   chan error
}

var (
	runningAt = regexp.MustCompile(`running at (http://\S+)`)
	tokenLine = regexp.MustCompile(`Admin token:\s+([0-9a-f]{64})`)
)

func start(t *testing.T, db string, env ...string) *process {
	t.Helper()
	return startArgs(t, []string{"serve", "--db", db, "--addr", "127.0.0.1:0", "--log-format", "json"}, env)
}

// startArgs runs the binary with args and extra environment, and waits for
// its start-up banner.
func startArgs(t *testing.T, args, env []string) *process {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan error, 1)}
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			p.logProblems(t)
		}
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stdout.WriteString(line + "\n")
			if m := runningAt.FindStringSubmatch(line); m != nil {
				p.base = m[1]
			}
			if m := tokenLine.FindStringSubmatch(line); m != nil {
				p.token = m[1]
			}
			if p.base != "" && strings.TrimSpace(line) == "" && !signalled {
				signalled = true
				close(ready)
			}
			p.mu.Unlock()
		}
		p.done <- cmd.Wait()
	}()
	select {
	case <-ready:
	case err := <-p.done:
		p.done <- err
		t.Fatalf("switchyard exited before it was ready: %v\n%s", err, p.stdout.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("switchyard did not print its banner in time:\n%s", p.stdout.String())
	}
	return p
}

// logProblems shows the process's warnings and errors (at most the last
// 40), so that a failed test says what the process itself saw.
func (p *process) logProblems(t *testing.T) {
	t.Helper()
	var lines []string
	for line := range strings.Lines(p.stderr.String()) {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	if len(lines) > 0 {
		t.Logf("pid %d warned:\n%s", p.cmd.Process.Pid, strings.Join(lines, "\n"))
	}
}

func (p *process) stop(t *testing.T) {
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
	case <-time.After(20 * time.Second):
		t.Fatal("switchyard did not stop within 20 s of SIGTERM")
	}
}

func waitHealthy(t *testing.T, base string) {
	t.Helper()
	testwait.Until(t, 10*time.Second, base+"/healthz to answer 200", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

func TestServe(t *testing.T) {
	t.Parallel()
	db := storetest.Source(t)

	first := start(t, db)
	waitHealthy(t, first.base)
	if first.token == "" || !strings.Contains(first.stdout.String(), first.base+"/admin/login?token="+first.token) {
		t.Fatalf("the banner does not show the admin URL and token:\n%s", first.stdout.String())
	}
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(first.base + "/admin/login?token=" + first.token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.Path != "/admin" {
		t.Fatalf("the one-click login link led to %d %s", resp.StatusCode, resp.Request.URL)
	}
	resp, err = (&http.Client{Jar: jar}).Get(first.base + "/admin/queues")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, q := range []string{"receiver.flow", "sender.flow"} {
		if !strings.Contains(string(page), `data-testid="queue-`+q+`"`) {
			t.Fatalf("the Queues page does not list %s:\n%s", q, page)
		}
	}
	// Data written through the first start must be there after a restart.
	create, _ := http.NewRequest(http.MethodPost, first.base+"/admin/api/users", strings.NewReader(`{"link":"kept-leader","name":"Kept"}`))
	create.Header.Set("Authorization", "Bearer "+first.token)
	create.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(create)
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		UID int64 `json:"uid"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || created.UID == 0 {
		t.Fatalf("create a user: status %d, uid %d", resp.StatusCode, created.UID)
	}
	first.stop(t)

	second := start(t, db)
	waitHealthy(t, second.base)
	if second.token != first.token {
		t.Fatalf("the second start printed another token: %q, first %q", second.token, first.token)
	}
	req, _ := http.NewRequest(http.MethodGet, second.base+"/admin/api/anything", nil)
	req.Header.Set("Authorization", "Bearer "+first.token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		t.Fatal("the first start's token is refused after a restart")
	}
	resolve, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/admin/api/users/%d", second.base, created.UID), nil)
	resolve.Header.Set("Authorization", "Bearer "+first.token)
	resp, err = http.DefaultClient.Do(resolve)
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(kept), `"kept-leader"`) {
		t.Fatalf("the user created before the restart is gone: %d %s", resp.StatusCode, kept)
	}
	second.stop(t)

	t.Run("a token from the environment is used and not printed", func(t *testing.T) {
		p := start(t, db, "SWITCHYARD_ADMIN_TOKEN=from-the-environment-0123456789")
		waitHealthy(t, p.base)
		if strings.Contains(p.stdout.String(), "from-the-environment") || p.token != "" {
			t.Fatalf("the banner shows a token from the environment:\n%s", p.stdout.String())
		}
		p.stop(t)
	})
}

func TestMigrateCommand(t *testing.T) {
	t.Parallel()
	db := storetest.Source(t)
	run := func() string {
		out, err := exec.Command(binary(t), "migrate", "--db", db).CombinedOutput()
		if err != nil {
			t.Fatalf("migrate: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := run(); !strings.Contains(out, "applied ") {
		t.Fatalf("first migrate: %s", out)
	}
	if out := run(); !strings.Contains(out, "nothing to apply") {
		t.Fatalf("second migrate applied something: %s", out)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{"SWITCHYARD_ADDR": "0.0.0.0:9000", "SWITCHYARD_ROLES": "inbound, chat", "SWITCHYARD_SYNC": "normal"}
	get := func(k string) string { return env[k] }
	cfg, err := parseConfig("serve", []string{"--addr", "127.0.0.1:1"}, get, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:1" || cfg.Sync != "NORMAL" || strings.Join(cfg.Roles, ",") != "inbound,chat" || cfg.DB != "./switchyard.db" {
		t.Fatalf("flag, env and default precedence wrong: %+v", cfg)
	}
	if _, err := parseConfig("serve", []string{"--roles", "inbound,nope"}, get, io.Discard); err == nil {
		t.Fatal("an unknown role was accepted")
	}
	var help strings.Builder
	if _, err := parseConfig("serve", []string{"--help"}, get, &help); err == nil || !strings.Contains(help.String(), "SWITCHYARD_ROLES") {
		t.Fatalf("help does not list the environment names: %v\n%s", err, help.String())
	}
	if err := Run(context.Background(), []string{"nonsense"}, io.Discard, io.Discard); err == nil {
		t.Fatal("an unknown command was accepted")
	}
}

func TestPublishCommand(t *testing.T) {
	t.Parallel()
	db := storetest.Source(t)
	file := filepath.Join(t.TempDir(), "events.jsonl")
	lines := []string{
		`{"messageId":"6f1c1a52-0000-4000-8000-000000000001","type":"pin.identity.user-upserted","contractVersion":1,"aggregateId":"11111111-1111-4111-8111-111111111111","aggregateType":"User","occurredAt":"2026-01-01T00:00:00Z","correlationId":"c1","payload":{"UserId":"11111111-1111-4111-8111-111111111111","Type":"Agent","Status":"Active","Name":{"FirstName":"A"},"PhoneNumber":"+79990001234","RegisteredVia":"Sms","Version":1}}`,
		``,
		`{"messageId":"6f1c1a52-0000-4000-8000-000000000002","type":"pin.identity.user-upserted","contractVersion":1,"aggregateId":"22222222-2222-4222-8222-222222222222","aggregateType":"User","occurredAt":"2026-01-01T00:00:00Z","correlationId":"c2","payload":{"UserId":"22222222-2222-4222-8222-222222222222","Type":"Investor","Status":"Active","Name":{"FirstName":"B"},"PhoneNumber":"+79990005678","RegisteredVia":"Sms","Version":1}}`,
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary(t), "publish", "--db", db, "--topic", "pin.identity.users.v1", file).CombinedOutput()
	if err != nil {
		t.Fatalf("publish: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "published 2 record(s) to pin.identity.users.v1 (1 blank line(s) skipped)") {
		t.Fatalf("summary missing:\n%s", out)
	}
	if err := os.WriteFile(file, []byte("{not json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(binary(t), "publish", "--db", db, file).CombinedOutput(); err == nil {
		t.Fatalf("a bad line was published:\n%s", out)
	}
}

func TestBackupCommand(t *testing.T) {
	t.Parallel()
	storetest.SQLiteOnly(t, "it backs the file up to a file and checks both files' modes; TestPostgresRefusesBackupAndCheck is PostgreSQL's")
	dir := t.TempDir()
	db := filepath.Join(dir, "live.db")
	p := start(t, db)
	waitHealthy(t, p.base)
	dest := filepath.Join(dir, "copy.db")
	out, err := exec.Command(binary(t), "backup", "--db", db, dest).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "backed up") {
		t.Fatalf("backup while serving: %v\n%s", err, out)
	}
	// The database and the copy hold every secret: only their owner reads them.
	for _, f := range []string{db, db + "-wal", db + "-shm", dest} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, want 0600", filepath.Base(f), st.Mode().Perm())
		}
	}
	p.stop(t)
	// The copy is a whole database: it serves and keeps the first start's token.
	q := start(t, dest)
	waitHealthy(t, q.base)
	if q.token != p.token {
		t.Fatalf("the backup serves another admin token: %q, want %q", q.token, p.token)
	}
	q.stop(t)
}

// assertUntouched fails t when src, a location from storetest.Source, was
// opened by a process that had to refuse first: the SQLite file exists, or
// the PostgreSQL database (which Source creates empty) has tables.
func assertUntouched(t *testing.T, src string) {
	t.Helper()
	if !store.IsPostgresURL(src) {
		if _, err := os.Stat(src); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused start touched the database: %v", err)
		}
		return
	}
	db, err := store.Open(context.Background(), store.Options{Path: src})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.Read.QueryRow(`select count(*) from pg_tables where schemaname = 'public'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("the refused start touched the database: it has %d tables", tables)
	}
}
