package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"switchyard/store"
)

// startConfig is how serve starts for a program rather than a person: on a
// database of its own (Ephemeral), and telling where it listens and what
// its secrets are once it is ready (ReadyFile, ReadyJSON), so that a test
// that starts it needs to read no banner.
type startConfig struct {
	ReadyFile string
	ReadyJSON bool
	Ephemeral bool
	// Seed is whether an instance with both bots on the sandbox seeds its
	// database with the demo's users, chats and events; a test starts empty.
	Seed bool
}

// options are the start's, for serve (and demo).
func (s *startConfig) options() []option {
	return []option{
		{"ready-file", "SWITCHYARD_READY_FILE", "", "once ready (as /readyz answers), write the URL, the secrets and the pid to this file as a JSON object: mode 0600, written whole (a temporary file renamed), removed at a clean exit; the admin token is then printed nowhere else", setString(&s.ReadyFile)},
		{"ready-json", "SWITCHYARD_READY_JSON", "false", "once ready, print the --ready-file object as one JSON line on stdout, in place of the banner", setBool(&s.ReadyJSON)},
		{"ephemeral", "SWITCHYARD_EPHEMERAL", "false", "run on a new SQLite file in a new temporary folder, removed at exit (for tests; refused with --db or SWITCHYARD_DB)", setBool(&s.Ephemeral)},
		{"seed", "SWITCHYARD_SEED", "true", "with both bots on the sandbox, seed the database with the demo's users, chats and events (false: start empty, as a test wants)", setBool(&s.Seed)},
	}
}

// errEphemeralDB refuses --ephemeral with a database named on the command
// line or in the environment.
var errEphemeralDB = errors.New("--ephemeral runs on a temporary database of its own")

// checkEphemeral refuses --ephemeral when a database is named as well (by
// --db or SWITCHYARD_DB, among opts parsed from args): the run would delete
// nothing of it, but whoever named it would expect its data to be used, or
// kept. A PostgreSQL URL is refused in its own words: --ephemeral is SQLite's.
func (c *config) checkEphemeral(opts []option, args []string, getenv func(string) string) error {
	if !c.Start.Ephemeral {
		return nil
	}
	var db []option
	for _, o := range opts {
		if o.flag == "db" {
			db = append(db, o)
		}
	}
	named, _ := takeOptions(db, args)
	if len(named) == 0 && getenv("SWITCHYARD_DB") == "" {
		return nil
	}
	if store.IsPostgresURL(c.DB) {
		return usageError{fmt.Errorf("%w, a SQLite file in a temporary folder, and never runs on PostgreSQL: drop --db (SWITCHYARD_DB), or give a PostgreSQL test database without --ephemeral", errEphemeralDB)}
	}
	return usageError{fmt.Errorf("%w, removed at exit: drop --db (SWITCHYARD_DB) to use one, or drop --ephemeral to keep %s", errEphemeralDB, c.DB)}
}

// ephemeralDB points cfg at a new SQLite file in a new temporary folder when
// it asks for --ephemeral, and returns what removes the folder (the database
// and its WAL with it) once the database is closed.
func ephemeralDB(cfg *config, log *slog.Logger) (remove func(), err error) {
	if !cfg.Start.Ephemeral {
		return func() {}, nil
	}
	dir, err := os.MkdirTemp("", "switchyard-ephemeral-")
	if err != nil {
		return nil, fmt.Errorf("ephemeral database: %w", err)
	}
	cfg.DB = filepath.Join(dir, "switchyard.db")
	return func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("ephemeral database not removed", slog.String("dir", dir), slog.Any("err", err))
		}
	}, nil
}

// readyInfo is what --ready-file and --ready-json tell a program that
// started serve: where it listens and every secret a client needs.
type readyInfo struct {
	// URL is where this process listens (its own address, whatever
	// --public-url says), with the port it got for port 0.
	URL string `json:"url"`
	// AdminToken is the Bearer token of /admin/api (and the console's login).
	AdminToken string `json:"adminToken"`
	// BotSecret is the Bearer secret of the /bot/* contract.
	BotSecret string `json:"botSecret"`
	// WebhookSecrets are the X-Telegram-Bot-Api-Secret-Token of each bot's
	// webhook: the onboarding bot's POST /webhooks/bot, the business-inbox
	// bot's POST /webhooks/telegram.
	WebhookSecrets botSecrets `json:"webhookSecrets"`
	// SandboxBotTokens are the tokens of the bots on the built-in sandbox
	// Bot API (/sandbox/telegram/bot<token>/…); a bot not on it has none.
	SandboxBotTokens botSecrets `json:"sandboxBotTokens"`
	PID              int        `json:"pid"`
}

// botSecrets are one secret of each bot: the onboarding bot's and the chat
// role's business-inbox bot's.
type botSecrets struct {
	Onboarding string `json:"onboarding,omitempty"`
	Chat       string `json:"chat,omitempty"`
}

// newReadyInfo is the readyInfo of a process listening at u with sec, and
// the sandbox sb (nil when no bot is on it).
func newReadyInfo(u urls, sec secrets, sb *sandbox) readyInfo {
	info := readyInfo{
		URL: u.self, AdminToken: sec.AdminToken, BotSecret: sec.BotToBackend,
		WebhookSecrets: botSecrets{Onboarding: sec.BotWebhook, Chat: sec.OmniWebhook},
		PID:            os.Getpid(),
	}
	if sb != nil {
		info.SandboxBotTokens = botSecrets{Onboarding: sb.onboardingToken, Chat: sb.omniToken}
	}
	return info
}

// announcer tells a program that started serve that it is ready, as
// cfg.Start asks: by a file, a line on stdout, or neither.
type announcer struct {
	cfg    *config
	db     *store.DB
	info   readyInfo
	stdout io.Writer
	log    *slog.Logger
}

// ready runs once the server takes connections and the workers run: when
// the database answers as /readyz would say ready, it writes the ready file
// and the JSON line. An error stops the process: whoever waits for the file
// would otherwise wait in vain.
func (a announcer) ready(ctx context.Context) error {
	st, err := a.db.Ready(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("not ready: %w", err)
	case st.Pending():
		return fmt.Errorf("not ready: schema at version %d, %d expected", st.Current, st.Latest)
	}
	line, err := json.Marshal(a.info)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	if f := a.cfg.Start.ReadyFile; f != "" {
		if err := writeReadyFile(f, line); err != nil {
			return err
		}
		// The path only: the file's content is secret.
		a.log.Info("ready file written", slog.String("path", f))
	}
	if a.cfg.Start.ReadyJSON {
		if _, err := a.stdout.Write(line); err != nil {
			return fmt.Errorf("ready line: %w", err)
		}
	}
	return nil
}

// writeReadyFile writes data to path whole or not at all: to a temporary
// file of mode 0600 in the same folder, synced, then renamed over path, so
// that a reader polling for path never sees part of it.
func writeReadyFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a rename, there is nothing to remove
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("ready file: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("ready file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("ready file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("ready file: %w", err)
	}
	return nil
}

// removeReadyFile removes the ready file, if cfg names one: a stale one
// before the start (left by a process that was killed) and this process's
// at its exit.
func removeReadyFile(cfg *config, log *slog.Logger) {
	f := cfg.Start.ReadyFile
	if f == "" {
		return
	}
	if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
		log.Warn("ready file not removed", slog.String("path", f), slog.Any("err", err))
	}
}
