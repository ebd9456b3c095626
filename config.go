package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"switchyard/authlimit"
	"switchyard/omni"
)

// allRoles are the workers one process can run; the admin API, console,
// health and metrics are always served.
var allRoles = []string{"backend", "bot", "referral", "inbound", "chat", "outbound"}

// config is everything `serve` reads from flags and the environment.
type config struct {
	Addr            string
	DB              string
	LogFormat       string
	LogLevel        string
	Sync            string
	Roles           []string
	PublicURL       string
	ShutdownTimeout time.Duration
	BodyLimit       int64
	// SandboxPublic allows the sandbox Bot API on a non-loopback Addr.
	SandboxPublic bool

	// The HTTP server's limits: how long a request may take to arrive and
	// its answer to leave (long polls extend their own), how many
	// connections are open at once, and which reverse proxies'
	// X-Forwarded-For names the client the auth throttle counts.
	ReadTimeout    time.Duration
	WriteTimeout   time.Duration
	MaxConnections int
	TrustedProxies []netip.Prefix

	// Telegram: one Bot API base URL for both bots; each bot's own token.
	TelegramAPIURL string
	BotUpdates     string
	BotUsername    string
	BackendURL     string
	// OmniGroupChats is what the chat role does with group, supergroup and
	// channel chats (omni.GroupChats).
	OmniGroupChats omni.GroupChats

	// Secrets come from the environment only (flags show up in ps), or are
	// generated on first start and kept in the database.
	AdminToken       string
	BotToBackend     string
	BotTelegramToken string
	BotWebhookSecret string
	OmniToken        string
	OmniWebhook      string
}

// option is one flag with its environment fallback, so help can list both.
type option struct {
	flag, env, def, usage string
	set                   func(string) error
}

// boolean reports whether the option is a switch: one whose default is true
// or false, which may stand alone on the command line (--flag is
// --flag=true).
func (o option) boolean() bool { return o.def == "true" || o.def == "false" }

// boolText is a boolean flag's text, kept for the option's set to parse.
type boolText struct{ v *string }

func (b boolText) String() string {
	if b.v == nil {
		return ""
	}
	return *b.v
}
func (b boolText) Set(v string) error { *b.v = v; return nil }
func (b boolText) IsBoolFlag() bool   { return true }

type secretEnv struct{ env, usage string }

var secretEnvs = []secretEnv{
	{"SWITCHYARD_ADMIN_TOKEN", "admin token for /admin and /admin/api, at least 16 bytes (generated on first start when unset)"},
	{"BOT_TO_BACKEND_SECRET", "Bearer secret of the /bot/* contract, at least 16 bytes (generated on first start when unset)"},
	{"BOT_TELEGRAM_TOKEN", "the onboarding bot's Bot API token (unset: the built-in sandbox Bot API)"},
	{"BOT_TELEGRAM_WEBHOOK_SECRET", "secret Telegram sends to POST /webhooks/bot, at least 16 bytes (generated on first start when unset)"},
	{"OMNI_TELEGRAM_TOKEN", "the business-inbox bot's Bot API token (unset: the built-in sandbox Bot API)"},
	{"OMNI_WEBHOOK_SECRET", "secret Telegram sends to POST /webhooks/telegram, at least 16 bytes (generated on first start when unset)"},
}

func (c *config) options(scope string) []option {
	str := func(p *string) func(string) error { return func(v string) error { *p = v; return nil } }
	duration := func(p *time.Duration) func(string) error {
		return func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("must be a positive duration such as 30s")
			}
			*p = d
			return nil
		}
	}
	opts := []option{
		{"db", "SWITCHYARD_DB", "./switchyard.db", "SQLite database file", str(&c.DB)},
		{"sync", "SWITCHYARD_SYNC", "FULL", "SQLite synchronous mode: FULL (a commit survives power loss) or NORMAL", func(v string) error {
			v = strings.ToUpper(v)
			if v != "FULL" && v != "NORMAL" {
				return fmt.Errorf("must be FULL or NORMAL")
			}
			c.Sync = v
			return nil
		}},
		{"log-format", "SWITCHYARD_LOG_FORMAT", "text", "log format: text or json", func(v string) error {
			if v != "text" && v != "json" {
				return fmt.Errorf("must be text or json")
			}
			c.LogFormat = v
			return nil
		}},
		{"log-level", "SWITCHYARD_LOG_LEVEL", "info", "log level: debug, info, warn or error", func(v string) error {
			switch v {
			case "debug", "info", "warn", "error":
				c.LogLevel = v
				return nil
			}
			return fmt.Errorf("must be debug, info, warn or error")
		}},
	}
	if scope != "serve" {
		return opts
	}
	return append(opts,
		option{"addr", "SWITCHYARD_ADDR", "127.0.0.1:8080", "HTTP listen address", str(&c.Addr)},
		option{"roles", "SWITCHYARD_ROLES", "all", "workers to run: all, or a comma-separated subset of " + strings.Join(allRoles, ","), c.setRoles},
		option{"public-url", "SWITCHYARD_PUBLIC_URL", "", "URL the console is reached at, for printed links (default http://<addr>)", str(&c.PublicURL)},
		option{"shutdown-timeout", "SWITCHYARD_SHUTDOWN_TIMEOUT", "15s", "how long in-flight requests and jobs may take to finish on SIGINT/SIGTERM", func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return fmt.Errorf("must be a positive duration such as 15s")
			}
			c.ShutdownTimeout = d
			return nil
		}},
		option{"telegram-api-url", "TELEGRAM_API_URL", "", "Bot API base URL for both bots (default Telegram's; the sandbox when no token is set)", str(&c.TelegramAPIURL)},
		option{"bot-updates", "BOT_TELEGRAM_UPDATES", "longpoll", "how the onboarding bot gets updates: longpoll or webhook (at <public-url>/webhooks/bot)", func(v string) error {
			if v != "longpoll" && v != "webhook" {
				return fmt.Errorf("must be longpoll or webhook")
			}
			c.BotUpdates = v
			return nil
		}},
		option{"bot-username", "BOT_TELEGRAM_USERNAME", "", "the onboarding bot's @username for t.me deep links (default: the sandbox bot's)", str(&c.BotUsername)},
		option{"omni-group-chats", "OMNI_GROUP_CHATS", "ignore", "group, supergroup and channel chats of the business-inbox bot: ignore (stored as ignored, no thread) or thread (a thread each, never auto-acknowledged)", func(v string) error {
			g, err := omni.ParseGroupChats(v)
			if err != nil {
				return fmt.Errorf("must be ignore or thread")
			}
			c.OmniGroupChats = g
			return nil
		}},
		option{"backend-url", "SWITCHYARD_BACKEND_URL", "", "base URL of the /bot/* contract the bot calls (default: this process)", str(&c.BackendURL)},
		option{"sandbox-public", "SWITCHYARD_SANDBOX_PUBLIC", "false", "serve the sandbox Bot API on a non-loopback --addr (refused otherwise while a bot has no token)", func(v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("must be true or false")
			}
			c.SandboxPublic = b
			return nil
		}},
		option{"body-limit", "SWITCHYARD_BODY_LIMIT", "1048576", "largest accepted request body in bytes (413 beyond)", func(v string) error {
			var n int64
			if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 {
				return fmt.Errorf("must be a positive number of bytes")
			}
			c.BodyLimit = n
			return nil
		}},
		option{"read-timeout", "SWITCHYARD_READ_TIMEOUT", "30s", "longest a request, body included, may take to arrive; a slower one is cut", duration(&c.ReadTimeout)},
		option{"write-timeout", "SWITCHYARD_WRITE_TIMEOUT", "60s", "longest an answer may take; long polls hold their connection for their own wait", duration(&c.WriteTimeout)},
		option{"max-connections", "SWITCHYARD_MAX_CONNECTIONS", "1024", "most HTTP connections open at once (more wait; idle keep-alive ones give way); lowered to fit the open-file limit", func(v string) error {
			var n int
			if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 {
				return fmt.Errorf("must be a positive number")
			}
			c.MaxConnections = n
			return nil
		}},
		option{"trusted-proxies", "SWITCHYARD_TRUSTED_PROXIES", "", "reverse proxies (IPs or CIDRs, comma-separated) whose X-Forwarded-For names the client for the auth throttle; unset, every client behind a proxy shares its address", func(v string) error {
			p, err := authlimit.ParseTrustedProxies(v)
			if err != nil {
				return fmt.Errorf("must be IP addresses or CIDR prefixes: %w", err)
			}
			c.TrustedProxies = p
			return nil
		}},
	)
}

func (c *config) setRoles(v string) error {
	v = strings.TrimSpace(v)
	if v == "" || v == "all" {
		c.Roles = slices.Clone(allRoles)
		return nil
	}
	var roles []string
	for _, r := range strings.Split(v, ",") {
		r = strings.TrimSpace(r)
		if !slices.Contains(allRoles, r) {
			return fmt.Errorf("unknown role %q (known: %s)", r, strings.Join(allRoles, ", "))
		}
		if !slices.Contains(roles, r) {
			roles = append(roles, r)
		}
	}
	c.Roles = roles
	return nil
}

// has reports whether this process runs role.
func (c *config) has(role string) bool { return slices.Contains(c.Roles, role) }

// parseConfig reads flags for the subcommand scope, falling back to the
// environment, then to the defaults.
func parseConfig(scope string, args []string, getenv func(string) string, help io.Writer) (*config, error) {
	c := &config{}
	opts := c.options(scope)
	fs := flag.NewFlagSet("switchyard "+scope, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	given := map[string]*string{}
	for _, o := range opts {
		given[o.flag] = new(string)
		if o.boolean() {
			fs.Var(boolText{given[o.flag]}, o.flag, o.usage)
			continue
		}
		fs.StringVar(given[o.flag], o.flag, "", o.usage)
	}
	fs.Usage = func() { printUsage(help, scope, opts) }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	for _, o := range opts {
		v, from := o.def, "default"
		if e := getenv(o.env); e != "" {
			v, from = e, o.env
		}
		if explicit[o.flag] {
			v, from = *given[o.flag], "--"+o.flag
		}
		if err := o.set(v); err != nil {
			return nil, fmt.Errorf("%s (from %s): %w", o.flag, from, err)
		}
	}
	c.AdminToken = getenv("SWITCHYARD_ADMIN_TOKEN")
	c.BotToBackend = getenv("BOT_TO_BACKEND_SECRET")
	c.BotTelegramToken = getenv("BOT_TELEGRAM_TOKEN")
	c.BotWebhookSecret = getenv("BOT_TELEGRAM_WEBHOOK_SECRET")
	c.OmniToken = getenv("OMNI_TELEGRAM_TOKEN")
	c.OmniWebhook = getenv("OMNI_WEBHOOK_SECRET")
	if scope == "serve" {
		if err := c.checkSecrets(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// minSecretBytes is the shortest secret serve accepts from the environment;
// generated ones are 32 random bytes (64 hex digits).
const minSecretBytes = 16

// ErrWeakSecret is returned at start for a secret from the environment that
// is too short to withstand guessing.
var ErrWeakSecret = errors.New("secret too short")

// checkSecrets refuses our own secrets that are set but shorter than
// minSecretBytes, naming the variable and never the value. (The Telegram bot
// tokens are Telegram's, not ours to judge.)
func (c *config) checkSecrets() error {
	for _, s := range []struct{ env, val string }{
		{"SWITCHYARD_ADMIN_TOKEN", c.AdminToken},
		{"BOT_TO_BACKEND_SECRET", c.BotToBackend},
		{"BOT_TELEGRAM_WEBHOOK_SECRET", c.BotWebhookSecret},
		{"OMNI_WEBHOOK_SECRET", c.OmniWebhook},
	} {
		if s.val != "" && len(s.val) < minSecretBytes {
			return fmt.Errorf("%w: %s must be at least %d bytes (e.g. openssl rand -hex 32), or unset to have one generated",
				ErrWeakSecret, s.env, minSecretBytes)
		}
	}
	return nil
}

func printUsage(w io.Writer, scope string, opts []option) {
	fmt.Fprintf(w, "Usage: switchyard %s [options]\n\nOptions (a flag wins over its environment variable):\n", scope)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, o := range opts {
		def := o.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  --%s\t%s\tdefault %s\t%s\n", o.flag, o.env, def, o.usage)
	}
	tw.Flush()
	if scope == "serve" {
		fmt.Fprintln(w, "\nSecrets (environment only, never flags):")
		for _, s := range secretEnvs {
			fmt.Fprintf(tw, "  %s\t%s\n", s.env, s.usage)
		}
		tw.Flush()
	}
}

func getenv(k string) string { return os.Getenv(k) }
