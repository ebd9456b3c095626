package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"switchyard/loadtest"
	"switchyard/store"
)

// loadtestCmd is `switchyard loadtest`: it drives a running instance through
// its public paths and prints throughput, latency and errors per path.
func loadtestCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("switchyard loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		url         = fs.String("url", "http://127.0.0.1:8080", "base URL of the running instance")
		paths       = fs.String("paths", "all", "paths to load: all, or a comma-separated subset of webhook,outbox,topic")
		rate        = fs.Float64("rate", 0, "requests per second per path (0: flat out)")
		duration    = fs.Duration("duration", 10*time.Second, "how long to load (0 with --count: until the count is sent)")
		count       = fs.Int("count", 0, "requests per path (0: until --duration ends)")
		concurrency = fs.Int("concurrency", 0, "connections per path (default 64 for webhooks, 16 otherwise)")
		consume     = fs.Bool("consume", true, "drain the outbox through /bot/events/pending + ack and time emit → ack (run the instance with --roles that leave out bot)")
		drain       = fs.Duration("drain", 30*time.Second, "how long to wait after the load for consumers to catch up")
		dbPath      = fs.String("db", "", "the instance's database file, to read generated secrets from when the environment has none")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: switchyard loadtest [options]\n\nSecrets come from SWITCHYARD_ADMIN_TOKEN, BOT_TO_BACKEND_SECRET and OMNI_WEBHOOK_SECRET,\nor from the instance's database file with --db.\n\nOptions:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	ps, err := loadtest.ParsePaths(*paths)
	if err != nil {
		return err
	}
	if *count > 0 && !isFlagSet(fs, "duration") {
		*duration = 0
	}
	sec := map[string]string{
		"secret.admin_token":    getenv("SWITCHYARD_ADMIN_TOKEN"),
		"secret.bot_to_backend": getenv("BOT_TO_BACKEND_SECRET"),
		"secret.omni_webhook":   getenv("OMNI_WEBHOOK_SECRET"),
	}
	if *dbPath != "" {
		if err := secretsFromFile(ctx, *dbPath, sec); err != nil {
			return err
		}
	}
	if sec["secret.admin_token"] == "" {
		return errors.New("no admin token: set SWITCHYARD_ADMIN_TOKEN or pass --db")
	}
	rep, err := loadtest.Run(ctx, loadtest.Opts{
		BaseURL: *url, AdminToken: sec["secret.admin_token"], BotSecret: sec["secret.bot_to_backend"],
		WebhookSecret: sec["secret.omni_webhook"],
		Paths:         ps, Rate: *rate, Duration: *duration, Count: *count, Concurrency: *concurrency,
		Consume: *consume, Drain: *drain, Progress: stderr,
	})
	rep.Print(stdout)
	if errors.Is(err, context.Canceled) {
		return nil // Ctrl-C: the report of what ran is the answer
	}
	return err
}

// secretsFromFile fills the secrets the environment left empty from the
// settings an instance generated on its first start.
func secretsFromFile(ctx context.Context, path string, sec map[string]string) error {
	db, err := store.Open(ctx, store.Options{Path: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer db.Close()
	for k, v := range sec {
		if v != "" {
			continue
		}
		stored, ok, err := db.Setting(ctx, k)
		if err != nil {
			return fmt.Errorf("read %s from %s: %w", k, path, err)
		}
		if ok {
			sec[k] = stored
		}
	}
	return nil
}

func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
