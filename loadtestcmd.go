package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"switchyard/loadtest"
	"switchyard/store"
)

// loadtestSecrets are what loadtest reads from the environment only.
var loadtestSecrets = []secretEnv{
	{"SWITCHYARD_ADMIN_TOKEN", "the instance's admin token (required, here or in --db)"},
	{"BOT_TO_BACKEND_SECRET", "the instance's /bot/* Bearer secret, for the outbox path"},
	{"OMNI_WEBHOOK_SECRET", "the instance's webhook secret, for the webhook path"},
}

// defaultLoadDuration is how long loadtest loads when neither --duration
// nor --count bounds it.
const defaultLoadDuration = 10 * time.Second

// loadtestArgs are loadtest's options.
type loadtestArgs struct {
	// urls are the instances to load, --url once each.
	urls []string
	db   string
	opts loadtest.Opts
	// duration is --duration, nil when unset: then the run is bounded by
	// --count when set, else by defaultLoadDuration.
	duration *time.Duration
}

func (a *loadtestArgs) options() []option {
	o := &a.opts
	return []option{
		{"url", "", "http://127.0.0.1:8080", "base URL of a running instance; repeat it for several instances of one deployment, which then get the requests in turn (one that refuses connections passes its turn on)", func(v string) error {
			a.urls = append(a.urls, v)
			return nil
		}},
		{"paths", "", "all", "paths to load: all, or a comma-separated subset of webhook,outbox,topic", func(v string) error {
			ps, err := loadtest.ParsePaths(v)
			o.Paths = ps
			return err
		}},
		{"rate", "", "0", "requests per second per path (0: flat out)", setRate(&o.Rate)},
		{"duration", "", "", "how long to load, e.g. 30s (unset: 10s, or with --count until the count is sent)", a.setDuration},
		{"count", "", "0", "requests per path (0: until --duration ends)", setCount(&o.Count, 0, "a number of requests, 0 or more")},
		{"concurrency", "", "0", "connections per path (0: 64 for webhooks, 16 otherwise)", setCount(&o.Concurrency, 0, "a number of connections, 0 or more")},
		{"batch", "", "1", "records per request of the topic path (1: one JSON object a request; more: one JSON-lines batch, and --rate and --count count records)", setCount(&o.Batch, 1, "a number of records, 1 or more")},
		{"consume", "", "true", "drain the outbox through /bot/events/pending + ack and time emit → ack (run the instance with --roles that leave out bot)", setBool(&o.Consume)},
		{"drain", "", "30s", "how long to wait after the load for consumers to catch up", setDuration(&o.Drain)},
		{"db", "", "", "the instance's database (its SQLite file or postgres:// URL), to read generated secrets from when the environment has none", setString(&a.db)},
	}
}

func (a *loadtestArgs) setDuration(v string) error {
	if v == "" {
		a.duration = nil
		return nil
	}
	var d time.Duration
	if err := setDuration(&d)(v); err != nil {
		return err
	}
	a.duration = &d
	return nil
}

// loadtestCmd is `switchyard loadtest`: it drives a running instance through
// its public paths and prints throughput, latency and errors per path.
func loadtestCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var a loadtestArgs
	if err := parseOptions("loadtest", a.options(), args, getenv, stdout); err != nil {
		return err
	}
	opts := a.opts
	switch {
	case a.duration != nil:
		opts.Duration = *a.duration
	case opts.Count == 0:
		opts.Duration = defaultLoadDuration
	}
	if err := a.secrets(ctx, &opts); err != nil {
		return err
	}
	opts.BaseURLs, opts.Progress = a.urls, stderr
	rep, err := loadtest.Run(ctx, opts)
	rep.Print(stdout)
	if errors.Is(err, context.Canceled) {
		return nil // Ctrl-C: the report of what ran is the answer
	}
	return err
}

// secrets sets opts' secrets from the environment, or else from --db.
func (a *loadtestArgs) secrets(ctx context.Context, opts *loadtest.Opts) error {
	sec := map[string]string{
		"secret.admin_token":    getenv("SWITCHYARD_ADMIN_TOKEN"),
		"secret.bot_to_backend": getenv("BOT_TO_BACKEND_SECRET"),
		"secret.omni_webhook":   getenv("OMNI_WEBHOOK_SECRET"),
	}
	if a.db != "" {
		if err := secretsFromDB(ctx, a.db, sec); err != nil {
			return err
		}
	}
	if sec["secret.admin_token"] == "" {
		return errors.New("no admin token: set SWITCHYARD_ADMIN_TOKEN or pass --db")
	}
	opts.AdminToken, opts.BotSecret, opts.WebhookSecret = sec["secret.admin_token"], sec["secret.bot_to_backend"], sec["secret.omni_webhook"]
	return nil
}

// secretsFromDB fills the secrets the environment left empty from the
// settings an instance generated on its first start, in its database: a
// SQLite file, which must exist (opening a mistyped path would create an
// empty database and report no secrets), or a PostgreSQL URL, which is
// never shown with its password.
func secretsFromDB(ctx context.Context, source string, sec map[string]string) error {
	shown := store.Redact(source)
	if !store.IsPostgresURL(source) {
		if _, err := os.Stat(source); err != nil {
			return fmt.Errorf("the database %s: %w", shown, err)
		}
	}
	db, err := store.Open(ctx, store.Options{Path: source, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("open %s for its secrets: %w", shown, err)
	}
	defer db.Close()
	for k, v := range sec {
		if v != "" {
			continue
		}
		stored, ok, err := db.Setting(ctx, k)
		if err != nil {
			return fmt.Errorf("read %s from %s: %w", k, shown, err)
		}
		if ok {
			sec[k] = stored
		}
	}
	return nil
}
