// Package switchyardtest runs Switchyard inside a Go test and drives it the
// way the services around it do, for integration tests of those services:
//
//	app := switchyardtest.Start(t, switchyardtest.Options{})
//	user := app.TelegramUser(5001, "Ann")
//	user.Start(t, "leader-code")
//	app.WaitFor(t, switchyardtest.BotSaid(user, "Здравствуйте, Ann"))
//
// Start runs the whole application (`switchyard serve`, every role) in the
// test's process, on a SQLite file in the test's temporary folder, with
// both bots on the built-in sandbox Bot API and a manual clock that stands
// still until the test moves it (Advance). Its helpers act as Telegram users
// (Start, Write, Press, Block, WriteToBusiness), as the identity service
// (UpsertIdentityUser), as the backend (CreateAccount, Register, EmitEvent)
// and as an operator (Reply), and WaitFor waits, up to a deadline, for an
// outcome (BondCreated, EventDead, MessageSent, …). Everything goes through
// the instance's public HTTP paths — the admin API, the /bot/* contract,
// the sandbox — as any client's calls would: nothing reaches into its
// database.
//
// The helpers take a T (a *testing.T or *testing.B) and fail it on an
// error; Call and Get return errors instead, for a test's own conditions.
package switchyardtest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"switchyard/cli"
)

// T is what the kit needs of a test; *testing.T, *testing.B and *testing.F
// have it.
type T interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
	Context() context.Context
	Output() io.Writer
}

// Options configure Start. The zero value is a fresh instance on the
// manual clock at DefaultClockStart.
type Options struct {
	// ClockStart is where the manual clock starts (DefaultClockStart when
	// zero).
	ClockStart time.Time
	// RealClock runs the instance on the system clock instead: Advance
	// then fails.
	RealClock bool
	// DB is the database: a SQLite file, or a postgres:// URL of a test
	// database of its own. Default: switchyard.db in the test's
	// temporary folder.
	DB string
	// Args are more options of `switchyard serve`, after the kit's (a later
	// option wins): "--retention-outbox", "1h", ….
	Args []string
	// LogLevel is the instance's log level, written to the test's output
	// (shown for a failed test, or with -v): debug, info, warn (the
	// default) or error.
	LogLevel string
	// Log receives the instance's log instead of the test's output.
	Log io.Writer
	// Transport carries the kit's HTTP calls (http.DefaultTransport when
	// nil): a test may wrap it to record or validate every exchange.
	Transport http.RoundTripper
	// Wait is how long WaitFor waits before it fails the test (30 s when
	// zero): long enough for a loaded machine under -race; a condition
	// that holds ends the wait at once.
	Wait time.Duration
	// StartTimeout is how long Start waits for the instance to be ready
	// (60 s when zero).
	StartTimeout time.Duration
}

// DefaultClockStart is where the manual clock starts unless
// Options.ClockStart says otherwise.
var DefaultClockStart = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// Ready is what a started instance tells its test: the object of
// `switchyard serve --ready-json` (docs/testing.md).
type Ready struct {
	// URL is where the instance listens, e.g. http://127.0.0.1:41213.
	URL string `json:"url"`
	// AdminToken is the Bearer token of /admin/api.
	AdminToken string `json:"adminToken"`
	// BotSecret is the Bearer secret of the /bot/* contract.
	BotSecret string `json:"botSecret"`
	// WebhookSecrets are each bot's X-Telegram-Bot-Api-Secret-Token.
	WebhookSecrets BotSecrets `json:"webhookSecrets"`
	// SandboxBotTokens are each bot's token on the sandbox Bot API.
	SandboxBotTokens BotSecrets `json:"sandboxBotTokens"`
	PID              int        `json:"pid"`
}

// BotSecrets are one secret of each bot.
type BotSecrets struct {
	Onboarding string `json:"onboarding,omitempty"`
	Chat       string `json:"chat,omitempty"`
}

// App is a running instance and the client that drives it.
type App struct {
	Ready
	client *http.Client
	wait   time.Duration
	manual bool
}

// Start runs Switchyard in the test's process and returns once it is ready
// (its /readyz would answer 200); the test's cleanup stops it, as SIGTERM
// would, and fails the test when it did not stop cleanly.
func Start(t T, opts Options) *App {
	t.Helper()
	args := serveArgs(t, opts)
	logs := opts.Log
	if logs == nil {
		logs = t.Output()
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	stdout, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := cli.Run(ctx, args, stdoutW, logs)
		stdoutW.CloseWithError(fmt.Errorf("switchyard stopped: %w", err))
		done <- err
	}()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			return errors.New("switchyard did not stop within a minute of its cancellation")
		}
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("switchyardtest: %v", err)
		}
	})

	ready, err := readReady(stdout, cmp.Or(opts.StartTimeout, time.Minute))
	if err != nil {
		if serr := stop(); serr != nil {
			err = fmt.Errorf("%w (%w)", err, serr)
		}
		t.Fatalf("switchyardtest: start: %v", err)
	}
	// Nothing else is printed on stdout; whatever is, is not the test's.
	go io.Copy(io.Discard, stdout)

	transport := opts.Transport
	if transport == nil {
		transport = http.DefaultTransport
	}
	return &App{
		Ready:  ready,
		client: &http.Client{Transport: transport, Timeout: time.Minute},
		wait:   cmp.Or(opts.Wait, 30*time.Second),
		manual: !opts.RealClock,
	}
}

// serveArgs are the command line of the instance opts ask for.
func serveArgs(t T, opts Options) []string {
	db := opts.DB
	if db == "" {
		db = filepath.Join(t.TempDir(), "switchyard.db")
	}
	level := opts.LogLevel
	if level == "" {
		level = "warn"
	}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--ready-json", "--seed=false", "--log-level", level}
	if !opts.RealClock {
		start := opts.ClockStart
		if start.IsZero() {
			start = DefaultClockStart
		}
		args = append(args, "--clock", "manual", "--clock-start", start.UTC().Format(time.RFC3339Nano))
	}
	return append(args, opts.Args...)
}

// readReady reads the ready line from the instance's stdout, waiting up to
// timeout; an instance that stops first ends the wait with its error.
func readReady(stdout io.Reader, timeout time.Duration) (Ready, error) {
	type line struct {
		b   []byte
		err error
	}
	got := make(chan line, 1)
	go func() {
		b, err := bufio.NewReader(stdout).ReadBytes('\n')
		got <- line{b, err}
	}()
	select {
	case l := <-got:
		if l.err != nil {
			return Ready{}, l.err
		}
		var r Ready
		if err := json.Unmarshal(l.b, &r); err != nil {
			return Ready{}, fmt.Errorf("the ready line %q: %w", l.b, err)
		}
		return r, nil
	case <-time.After(timeout):
		return Ready{}, fmt.Errorf("not ready within %s", timeout)
	}
}

// APIError is an answer outside 2xx, with the instance's JSON error when it
// sent one.
type APIError struct {
	Method, Path string
	Status       int
	Code         string
	Message      string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.Path, e.Status, e.Code, e.Message)
}

// StatusOf is the HTTP status of an APIError, 0 for any other error.
func StatusOf(err error) int {
	if e, ok := errors.AsType[*APIError](err); ok {
		return e.Status
	}
	return 0
}

// Call sends in (as JSON, when not nil) to path — a path of the instance
// with its query, such as "/admin/api/bot/events?state=dead" — with the
// credential the path needs (the admin token under /admin/api, the bot
// secret under /bot and /auth), and decodes a 2xx answer into out (when not
// nil). An answer outside 2xx is an *APIError.
func (a *App) Call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.URL+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if secret := a.secretFor(path); secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Method: method, Path: path, Status: resp.StatusCode, Message: strings.TrimSpace(string(raw))}
		var shaped struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &shaped) == nil && shaped.Error.Code != "" {
			e.Code, e.Message = shaped.Error.Code, shaped.Error.Message
		}
		return e
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: the answer %.200s: %w", method, path, raw, err)
	}
	return nil
}

// Get is Call with GET and no body.
func (a *App) Get(ctx context.Context, path string, out any) error {
	return a.Call(ctx, http.MethodGet, path, nil, out)
}

// secretFor is the credential path needs.
func (a *App) secretFor(path string) string {
	switch {
	case strings.HasPrefix(path, "/admin/api/"):
		return a.AdminToken
	case strings.HasPrefix(path, "/bot/"), strings.HasPrefix(path, "/auth/"):
		return a.BotSecret
	}
	return ""
}

// Do is Call for a test: it fails t on an error.
func (a *App) Do(t T, method, path string, in, out any) {
	t.Helper()
	if err := a.Call(t.Context(), method, path, in, out); err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
}
