package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
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
	// --count when set, else by defaultLoadDuration (defaultSoakDuration
	// with --soak).
	duration *time.Duration
	// soak is --soak; reportEvery --report-every, nil when unset (then
	// defaultSoakInterval with --soak, else no rows); users --user-count; json
	// --json, the file the rows go to.
	soak        bool
	reportEvery *time.Duration
	users       int
	json        string
}

// A soak lasts defaultSoakDuration and reports every defaultSoakInterval
// unless told otherwise.
const (
	defaultSoakDuration = 30 * time.Minute
	defaultSoakInterval = time.Minute
)

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
		{"webhook-probes", "", "true", "send a webhook probe every 250 ms and time accepted → handled through the operators' API (false: for an instance without the chat role, such as an ingest benchmark's)", func(v string) error {
			var probe bool
			err := setBool(&probe)(v)
			o.NoWebhookProbes = !probe
			return err
		}},
		{"drain", "", "30s", "how long to wait after the load for consumers to catch up", setDuration(&o.Drain)},
		{"db", "", "", "the instance's database (its SQLite file or postgres:// URL), to read generated secrets from when the environment has none; a row reads the file's size (and its -wal's) when /metrics has no store gauges", setString(&a.db)},
		{"soak", "", "false", "a soak: a fixed --rate on a bounded key space (--user-count, --chats) for --duration (default 30m), a row every --report-every (default 1m), and at the end a count of every accepted request's effect; the exit status is 1 when anything was lost or doubled", setBool(&a.soak)},
		{"report-every", "", "", "close a row of per-path throughput, p99 and accepted → handled lag, RSS, database and WAL size this often, e.g. 1m (unset: 1m with --soak, else none)", a.setReportEvery},
		{"user-count", "", "1000", "Telegram users the outbox events name, and with --soak the identity users the topic path cycles through, each publish a user's next version", setCount(&a.users, 1, "a number of users, 1 or more")},
		{"chats", "", "50", "customers whose webhooks the business inbox gets, each its own thread (with --soak at most 400)", setCount(&o.Customers, 1, "a number of chats, 1 or more")},
		{"json", "", "", "also write each row, and with --soak the final count, to this file as a line of JSON", setString(&a.json)},
		{"pid", "", "0", "the instance's process id, whose VmRSS a row reads when /metrics has no process_resident_memory_bytes", setCount(&o.PID, 0, "a process id, or 0")},
	}
}

func (a *loadtestArgs) setReportEvery(v string) error {
	if v == "" {
		a.reportEvery = nil
		return nil
	}
	var d time.Duration
	if err := setPositiveDuration(&d, "1m")(v); err != nil {
		return err
	}
	a.reportEvery = &d
	return nil
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
	opts, err := a.runOpts()
	if err != nil {
		return err
	}
	if err := a.secrets(ctx, &opts); err != nil {
		return err
	}
	opts.BaseURLs, opts.Progress = a.urls, stderr
	rows, err := newRowWriter(a.json, stdout, opts.Paths)
	if err != nil {
		return err
	}
	opts.OnInterval = rows.interval
	rep, err := loadtest.Run(ctx, opts)
	rep.Print(stdout)
	if rep.Tally != nil {
		rows.tally(*rep.Tally)
	}
	if werr := rows.close(); werr != nil && err == nil {
		err = werr
	}
	if errors.Is(err, context.Canceled) {
		return nil // Ctrl-C: the report of what ran is the answer
	}
	if err == nil && rep.Tally != nil && (rep.Tally.Lost() > 0 || rep.Tally.Doubled() > 0 || !rep.Tally.Drained) {
		return fmt.Errorf("soak: %d lost, %d doubled, drained %v", rep.Tally.Lost(), rep.Tally.Doubled(), rep.Tally.Drained)
	}
	return err
}

// runOpts are the load's options from the flags: a soak's defaults, and
// what it refuses.
func (a *loadtestArgs) runOpts() (loadtest.Opts, error) {
	opts := a.opts
	opts.OutboxUsers, opts.Database = a.users, a.db
	switch {
	case a.duration != nil:
		opts.Duration = *a.duration
	case a.soak:
		opts.Duration = defaultSoakDuration
	case opts.Count == 0:
		opts.Duration = defaultLoadDuration
	}
	switch {
	case a.reportEvery != nil:
		opts.ReportEvery = *a.reportEvery
	case a.soak:
		opts.ReportEvery = defaultSoakInterval
	}
	if !a.soak {
		return opts, nil
	}
	// A soak's load is bounded in its keys as retention bounds what each
	// request leaves behind, so that the database can level off.
	opts.TopicUsers, opts.Tally = a.users, true
	switch {
	case opts.Rate == 0:
		return opts, usageError{errors.New("--soak runs at a fixed rate: set --rate, e.g. 500")}
	case !opts.Consume && slices.Contains(opts.Paths, loadtest.PathOutbox):
		return opts, usageError{errors.New("--soak counts the outbox through its own consumer: it needs --consume")}
	case opts.Customers > loadtest.MaxTallyCustomers:
		return opts, usageError{fmt.Errorf("--soak counts every chat's messages from one page of threads: at most %d --chats", loadtest.MaxTallyCustomers)}
	}
	return opts, nil
}

// rowWriter prints a run's rows as they close, as a table on stdout and
// with --json as lines of JSON in a file.
type rowWriter struct {
	out   io.Writer
	paths []loadtest.Path
	file  *os.File
	n     int
	err   error // the first write to the file that failed
}

func newRowWriter(path string, out io.Writer, paths []loadtest.Path) (*rowWriter, error) {
	if len(paths) == 0 {
		paths = loadtest.AllPaths
	}
	w := &rowWriter{out: out, paths: paths}
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("--json: %w", err)
		}
		w.file = f
	}
	return w, nil
}

// rowLine and tallyLine are the lines of the --json file: each row as it
// closes, then the soak's count.
type (
	rowLine struct {
		Kind string `json:"kind"` // "interval"
		loadtest.Interval
	}
	tallyLine struct {
		Kind string `json:"kind"` // "tally"
		loadtest.Tally
		Lost    int64 `json:"lost"`
		Doubled int64 `json:"doubled"`
	}
)

func (w *rowWriter) interval(r loadtest.Interval) {
	if w.n == 0 {
		fmt.Fprintln(w.out)
		loadtest.PrintIntervalHeader(w.out, w.paths)
	}
	w.n++
	r.Print(w.out)
	w.line(rowLine{Kind: "interval", Interval: r})
}

func (w *rowWriter) tally(t loadtest.Tally) {
	w.line(tallyLine{Kind: "tally", Tally: t, Lost: t.Lost(), Doubled: t.Doubled()})
}

func (w *rowWriter) line(v any) {
	if w.file == nil || w.err != nil {
		return
	}
	raw, err := json.Marshal(v)
	if err == nil {
		_, err = w.file.Write(append(raw, '\n'))
	}
	if err != nil {
		w.err = fmt.Errorf("--json: %w", err)
	}
}

// close closes the file, and returns the first write or close that failed.
func (w *rowWriter) close() error {
	if w.file != nil {
		if err := w.file.Close(); err != nil && w.err == nil {
			w.err = fmt.Errorf("--json: %w", err)
		}
	}
	return w.err
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
