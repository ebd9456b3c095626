package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"switchyard/demo"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
)

// progressLine is one of the simulator's progress lines.
var progressLine = regexp.MustCompile(`(?m)^demo \d+:\d\d  bot: \d+ started, \d+ done, \d+ failed · referral: `)

// TestDemoTraffic runs the whole application in-process on the sandbox, lets
// the simulator drive all three flows for a bounded time, and checks the
// invariants: the simulator's own checks through the admin API, and, apart
// from them, the sandbox's record of every message the bots sent.
func TestDemoTraffic(t *testing.T) {
	t.Parallel()
	w := newWiredApp(t, walkSecrets, nil, "--log-level", "warn")
	var dw *demoWorker
	for _, wk := range w.app.workers {
		if d, ok := wk.(*demoWorker); ok {
			dw = d
		}
	}
	if dw == nil {
		t.Fatal("a process with both bots on the sandbox has no demo worker")
	}
	runWorkers(t, w.app)

	out := &syncLog{}
	opts := dw.opts
	// Drain is time without progress: on a loaded machine the bot's answers
	// come slower and the stop takes longer, which is no failure.
	opts.Rate, opts.Duration, opts.Drain = 6, 12*time.Second, 30*time.Second
	opts.Progress, opts.ProgressEvery, opts.Seed = out, 3*time.Second, 42
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sum, err := demo.Run(ctx, opts)
	if err != nil {
		t.Fatalf("demo.Run: %v\n%s", err, out)
	}
	if !sum.OK() {
		t.Fatalf("the run failed: %q\n%s\nwarnings and errors of the app:\n%s", sum.Problems(), out, w.logs)
	}
	t.Log(out.String())

	t.Run("every flow completed journeys and none failed", func(t *testing.T) {
		for name, f := range map[string]demo.FlowStats{"bot": sum.Bot, "referral": sum.Referral, "chat": sum.Chat} {
			if f.Completed == 0 || f.Failed > 0 {
				t.Errorf("%s: %d completed, %d failed: %v", name, f.Completed, f.Failed, f.Errors)
			}
		}
	})
	t.Run("every invariant was checked on something", func(t *testing.T) {
		for _, inv := range sum.Invariants {
			if inv.Checked == 0 {
				t.Errorf("%q checked nothing", inv.Name)
			}
		}
	})
	t.Run("progress was printed while traffic flowed", func(t *testing.T) {
		if !progressLine.MatchString(out.String()) || !strings.Contains(out.String(), "all invariants hold") {
			t.Errorf("no progress line or summary:\n%s", out)
		}
	})
	t.Run("the bots sent no message twice", func(t *testing.T) {
		sent := map[string]int{}
		for _, c := range opts.Sandbox.CallsTo("sendMessage") {
			if !c.OK {
				continue
			}
			text := c.Params["text"]
			// Every message of the inbox bot is unique in its chat (replies carry a
			// number, the acknowledgement comes once per thread); of the onboarding
			// bot, the new-partner DMs and the wallet prompts are.
			if c.BotID == sandboxOnboardingBotID && !strings.Contains(text, "Код приглашения партнёра") &&
				!strings.HasPrefix(text, "Кошелёк ") {
				continue
			}
			key := strings.Join([]string{c.Token, c.Params["chat_id"], c.Params["business_connection_id"], text}, "\x00")
			if sent[key]++; sent[key] == 2 {
				t.Errorf("bot %d sent %q to chat %s twice", c.BotID, text, c.Params["chat_id"])
			}
		}
		if len(sent) == 0 {
			t.Error("the sandbox recorded no message the bots sent")
		}
	})
}

// TestDemoCommand runs `switchyard demo` as a user would and stops it with
// Ctrl-C: the traffic stops, the summary is printed, the process exits 0.
func TestDemoCommand(t *testing.T) {
	t.Parallel()
	db := storetest.Source(t)
	cmd := exec.Command(binary(t), "demo", "--db", db, "--addr", "127.0.0.1:0", "--rate", "5")
	cmd.Env = os.Environ()
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen strings.Builder
	// waitFor waits for a line that starts with prefix while the demo keeps
	// printing: it fails when no line came for idle (the progress lines come
	// every 5 s, while traffic flows and while it stops).
	waitFor := func(prefix string, idle time.Duration) {
		t.Helper()
		quiet := time.NewTimer(idle)
		defer quiet.Stop()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("switchyard demo ended before printing %q:\n%s", prefix, seen.String())
				}
				seen.WriteString(l + "\n")
				if strings.HasPrefix(l, prefix) {
					return
				}
				quiet.Reset(idle)
			case <-quiet.C:
				t.Fatalf("switchyard demo printed nothing for %s while we waited for %q:\n%s", idle, prefix, seen.String())
			}
		}
	}
	waitFor("demo: simulating traffic at 5 arrivals/s", 30*time.Second)
	waitFor("demo 0:05", 20*time.Second)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor("all invariants hold", 60*time.Second)
	for range lines {
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("switchyard demo exited with %v after Ctrl-C:\n%s", err, seen.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("switchyard demo did not exit within 20 s of its summary:\n%s", seen.String())
	}
}

func TestDemoFlags(t *testing.T) {
	t.Parallel()
	d, rest, err := demoFlags([]string{"--db", "x.db", "--rate=2.5", "-duration", "90s", "--fresh", "--addr", ":0"})
	if err != nil || d.rate != 2.5 || d.duration != 90*time.Second || !d.fresh || strings.Join(rest, " ") != "--db x.db --addr :0" {
		t.Fatalf("got %+v, rest %q, err %v", d, rest, err)
	}
	for _, bad := range [][]string{{"--rate", "0"}, {"--rate", "many"}, {"--duration", "-1s"}, {"--rate"}, {"--fresh=perhaps"}} {
		if _, _, err := demoFlags(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	t.Run("a real bot token refuses the demo", func(t *testing.T) {
		db := storetest.Source(t)
		cmd := exec.Command(binary(t), "demo", "--addr", "127.0.0.1:0", "--db", db)
		cmd.Env = append(os.Environ(), "OMNI_TELEGRAM_TOKEN="+fakebot.Token(42))
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "never writes to real Telegram users") {
			t.Fatalf("demo with a bot token: %v\n%s", err, out)
		}
		assertUntouched(t, db)
	})
}

// TestDemoStartsOnAFreshDatabase: demo's own file is started afresh on
// every run; a database file it was given is refused (exit 2, the file
// untouched) unless --fresh says to delete it.
func TestDemoStartsOnAFreshDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	full := func(name string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		for _, f := range []string{path, path + "-wal"} {
			if err := os.WriteFile(f, []byte("a database"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return path
	}
	gone := func(path string) {
		t.Helper()
		for _, f := range []string{path, path + "-wal"} {
			if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s is still there (%v)", f, err)
			}
		}
	}

	t.Run("a database it was given is refused, exit 2, and left as it was", func(t *testing.T) {
		db := full("mine.db")
		cmd := exec.Command(binary(t), "demo", "--addr", "127.0.0.1:0", "--db", db)
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "--fresh") {
			t.Fatalf("demo on an existing database: %v\n%s", err, out)
		}
		if b, err := os.ReadFile(db); err != nil || string(b) != "a database" {
			t.Fatalf("the database was touched: %q, %v", b, err)
		}
	})
	t.Run("--fresh deletes the file and its WAL", func(t *testing.T) {
		db := full("fresh.db")
		var out strings.Builder
		if err := freshDemoDB(db, true, &out); err != nil {
			t.Fatal(err)
		}
		gone(db)
		if !strings.Contains(out.String(), "fresh database") {
			t.Errorf("it did not say so: %q", out.String())
		}
	})
	t.Run("demo's own file starts afresh without asking", func(t *testing.T) {
		own := full(filepath.Base(demoDB))
		cmd := exec.Command(binary(t), "demo", "--addr", "127.0.0.1:0", "--duration", "1s")
		cmd.Dir, cmd.Env, cmd.Stderr = dir, os.Environ(), io.Discard
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		sc := bufio.NewScanner(stdout)
		for sc.Scan() && !strings.HasPrefix(sc.Text(), "demo: starting on a fresh database, "+demoDB) {
		}
		if b, err := os.ReadFile(own); err == nil && string(b) == "a database" {
			t.Fatal("demo's own file still holds the old database")
		}
	})
	t.Run("a missing file is simply created later", func(t *testing.T) {
		if err := freshDemoDB(filepath.Join(dir, "new.db"), false, io.Discard); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("--fresh is refused on PostgreSQL", func(t *testing.T) {
		if err := freshDemoDB("postgres://u@localhost/db", true, io.Discard); err == nil {
			t.Fatal("--fresh on a PostgreSQL URL was accepted")
		}
	})
}
