package cli

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
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
	// TraceRing is how many recent spans the console's search can show.
	TraceRing int
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

	// Retention: how long each kind of row that grows with traffic is
	// kept (0: for ever), and how often the prune runs (wireRetention).
	Retention retentionConfig
	// Clock is the store's clock: the real one, or for tests on the
	// sandbox a manual one (manualclock.go).
	Clock clockConfig

	// Start is how serve starts for a program: --ephemeral, --ready-file,
	// --ready-json (ready.go).
	Start startConfig

	// Secrets come from the environment only (flags show up in ps), or are
	// generated on first start and kept in the database.
	AdminToken       string
	BotToBackend     string
	BotTelegramToken string
	BotWebhookSecret string
	OmniToken        string
	OmniWebhook      string
}

type secretEnv struct{ env, usage string }

var secretEnvs = []secretEnv{
	{"SWITCHYARD_ADMIN_TOKEN", "admin token for /admin and /admin/api, at least 16 bytes (generated on first start when unset)"},
	{"BOT_TO_BACKEND_SECRET", "Bearer secret of the /bot/* contract, at least 16 bytes (generated on first start when unset)"},
	{"BOT_TELEGRAM_TOKEN", "the onboarding bot's Bot API token (unset: the built-in sandbox Bot API)"},
	{"BOT_TELEGRAM_WEBHOOK_SECRET", "secret Telegram sends to POST /webhooks/bot, at least 16 bytes (generated on first start when unset)"},
	{"OMNI_TELEGRAM_TOKEN", "the business-inbox bot's Bot API token (unset: the built-in sandbox Bot API)"},
	{"OMNI_WEBHOOK_SECRET", "secret Telegram sends to POST /webhooks/telegram, at least 16 bytes (generated on first start when unset)"},
}

// options are the options of the commands that open the database, or for
// scope "serve" those of serve (and demo), in the order help lists them.
func (c *config) options(scope string) []option {
	opts := c.storeOptions()
	if scope != "serve" {
		return opts
	}
	opts = append(opts, c.serveOptions()...)
	opts = append(opts, c.telegramOptions()...)
	opts = append(opts, c.httpOptions()...)
	opts = append(opts, c.Start.options()...)
	opts = append(opts, c.Clock.options()...)
	return append(opts, c.Retention.options()...)
}

// storeOptions are the database's and the log's.
func (c *config) storeOptions() []option {
	return []option{
		{"db", "SWITCHYARD_DB", "./switchyard.db", "SQLite database file, or a postgres:// URL of a PostgreSQL database", setString(&c.DB)},
		{"sync", "SWITCHYARD_SYNC", "FULL", "SQLite synchronous mode: FULL (a commit survives power loss) or NORMAL; on PostgreSQL the server's own durability settings apply", func(v string) error {
			return setOneOf(&c.Sync, "FULL", "NORMAL")(strings.ToUpper(v))
		}},
		{"log-format", "SWITCHYARD_LOG_FORMAT", "text", "log format: text or json", setOneOf(&c.LogFormat, "text", "json")},
		{"log-level", "SWITCHYARD_LOG_LEVEL", "info", "log level: debug, info, warn or error", setOneOf(&c.LogLevel, "debug", "info", "warn", "error")},
	}
}

// serveOptions are where serve listens, what it runs and how it stops.
func (c *config) serveOptions() []option {
	return []option{
		{"addr", "SWITCHYARD_ADDR", "127.0.0.1:8080", "HTTP listen address", setString(&c.Addr)},
		{"roles", "SWITCHYARD_ROLES", "all", "workers to run: all, or a comma-separated subset of " + strings.Join(allRoles, ","), c.setRoles},
		{"public-url", "SWITCHYARD_PUBLIC_URL", "", "URL the console is reached at, for printed links (default http://<addr>)", setString(&c.PublicURL)},
		{"shutdown-timeout", "SWITCHYARD_SHUTDOWN_TIMEOUT", "15s", "how long in-flight requests and jobs may take to finish on SIGINT/SIGTERM", setPositiveDuration(&c.ShutdownTimeout, "15s")},
		{"trace-ring", "SWITCHYARD_TRACE_RING", "0", "recent spans kept in memory for the console's search, with no collector needed (0: none; demo: 8192); export is OTEL_TRACES_EXPORTER's", setCount(&c.TraceRing, 0, "a number of spans, 0 or more")},
	}
}

// telegramOptions are the bots'.
func (c *config) telegramOptions() []option {
	return []option{
		{"telegram-api-url", "TELEGRAM_API_URL", "", "Bot API base URL for both bots (default Telegram's; the sandbox when no token is set)", setString(&c.TelegramAPIURL)},
		{"bot-updates", "BOT_TELEGRAM_UPDATES", "longpoll", "how the onboarding bot gets updates: longpoll or webhook (at <public-url>/webhooks/bot)", setOneOf(&c.BotUpdates, "longpoll", "webhook")},
		{"bot-username", "BOT_TELEGRAM_USERNAME", "", "the onboarding bot's @username for t.me deep links (default: the sandbox bot's)", setString(&c.BotUsername)},
		{"omni-group-chats", "OMNI_GROUP_CHATS", "ignore", "group, supergroup and channel chats of the business-inbox bot: ignore (stored as ignored, no thread) or thread (a thread each, never auto-acknowledged)", func(v string) error {
			g, err := omni.ParseGroupChats(v)
			if err != nil {
				return fmt.Errorf("must be ignore or thread")
			}
			c.OmniGroupChats = g
			return nil
		}},
		{"backend-url", "SWITCHYARD_BACKEND_URL", "", "base URL of the /bot/* contract the bot calls (default: this process)", setString(&c.BackendURL)},
	}
}

// httpOptions are the HTTP server's exposure and limits.
func (c *config) httpOptions() []option {
	return []option{
		{"sandbox-public", "SWITCHYARD_SANDBOX_PUBLIC", "false", "serve the sandbox Bot API on a non-loopback --addr (refused otherwise while a bot has no token)", setBool(&c.SandboxPublic)},
		{"body-limit", "SWITCHYARD_BODY_LIMIT", "1048576", "largest accepted request body in bytes (413 beyond)", setCount(&c.BodyLimit, 1, "a positive number of bytes")},
		{"read-timeout", "SWITCHYARD_READ_TIMEOUT", "30s", "longest a request, body included, may take to arrive; a slower one is cut", setPositiveDuration(&c.ReadTimeout, "30s")},
		{"write-timeout", "SWITCHYARD_WRITE_TIMEOUT", "60s", "longest an answer may take; long polls hold their connection for their own wait", setPositiveDuration(&c.WriteTimeout, "30s")},
		{"max-connections", "SWITCHYARD_MAX_CONNECTIONS", "1024", "most HTTP connections open at once (more wait; idle keep-alive ones give way); lowered to fit the open-file limit", setCount(&c.MaxConnections, 1, "a positive number")},
		{"trusted-proxies", "SWITCHYARD_TRUSTED_PROXIES", "", "reverse proxies (IPs or CIDRs, comma-separated) whose X-Forwarded-For names the client for the auth throttle; unset, every client behind a proxy shares its address", func(v string) error {
			p, err := authlimit.ParseTrustedProxies(v)
			if err != nil {
				return fmt.Errorf("must be IP addresses or CIDR prefixes: %w", err)
			}
			c.TrustedProxies = p
			return nil
		}},
	}
}

// retentionConfig is the retention runner's settings.
type retentionConfig struct {
	WebhookLedger, DeadLetters, Outbox, ReferralMarks, TopicRecords, BotUpdates, Deliveries, ChatMessages, QueueKeys, QueueFailures time.Duration
	Rollups                                                                                                                         time.Duration
	Interval                                                                                                                        time.Duration
}

// options are the retention rules' (retention/, wired by wireRetention).
func (r *retentionConfig) options() []option {
	keep := " (a duration; 0 keeps them for ever)"
	return []option{
		{"retention-webhook-ledger", "SWITCHYARD_RETENTION_WEBHOOK_LEDGER", "168h", "how long the chat role's webhook dedup ledger (omni_inbound_events) keeps an update; keep it at least 24h, as long as Telegram may deliver an update again" + keep, setDuration(&r.WebhookLedger)},
		{"retention-dead-letters", "SWITCHYARD_RETENTION_DEAD_LETTERS", "720h", "how long dead letters of queues and consumer groups stay for an operator to redrive" + keep, setDuration(&r.DeadLetters)},
		{"retention-outbox", "SWITCHYARD_RETENTION_OUTBOX", "168h", "how long acknowledged bot_event_outbox events are kept" + keep, setDuration(&r.Outbox)},
		{"retention-referral-marks", "SWITCHYARD_RETENTION_REFERRAL_MARKS", "720h", "how long the referral consumer's idempotency marks are kept (only those whose message would change nothing again go)" + keep, setDuration(&r.ReferralMarks)},
		{"retention-topic-records", "SWITCHYARD_RETENTION_TOPIC_RECORDS", "168h", "how long topic records are kept once every consumer group has finished them; replaces each topic's declared retention" + keep, setDuration(&r.TopicRecords)},
		{"retention-bot-updates", "SWITCHYARD_RETENTION_BOT_UPDATES", "168h", "how long the onboarding bot keeps handled Telegram updates (bot_updates)" + keep, setDuration(&r.BotUpdates)},
		{"retention-deliveries", "SWITCHYARD_RETENTION_DELIVERIES", "720h", "how long the record of a delivered onboarding-bot DM (bot_deliveries) is kept" + keep, setDuration(&r.Deliveries)},
		{"retention-chat-messages", "SWITCHYARD_RETENTION_CHAT_MESSAGES", "0", "how long finished chat messages are kept (each thread keeps its newest inbound and outbound one)" + keep, setDuration(&r.ChatMessages)},
		{"retention-queue-keys", "SWITCHYARD_RETENTION_QUEUE_KEYS", "168h", "how long a queue remembers a send's idempotency key (a webhook's update id on receiver.flow), so that the same send again is refused; keep it at least 24h" + keep, setDuration(&r.QueueKeys)},
		{"retention-queue-failures", "SWITCHYARD_RETENTION_QUEUE_FAILURES", "168h", "how long the attempt history of queue messages and topic records (queue_failures) is kept" + keep, setDuration(&r.QueueFailures)},
		{"retention-rollups", "SWITCHYARD_RETENTION_ROLLUPS", "720h", "how long the console's throughput per minute (rollup_minutes) is kept; the charts reach back 7 days" + keep, setDuration(&r.Rollups)},
		{"retention-interval", "SWITCHYARD_RETENTION_INTERVAL", "1m", "how often the prune pass runs (in one process of the database at a time)", setPositiveDuration(&r.Interval, "1m")},
	}
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

// parseConfig reads the options of the command scope ("serve",
// "migrate", …) from args, falling back to the environment, then to the
// defaults, and the secrets from the environment; serve's secrets must be
// strong enough (checkSecrets).
func parseConfig(scope string, args []string, getenv func(string) string, help io.Writer) (*config, error) {
	c := &config{}
	if err := c.parse(scope, c.options(scope), args, getenv, help); err != nil {
		return nil, err
	}
	if scope == "serve" {
		if err := c.checkSecrets(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parse reads opts of the command name, which takes no arguments beyond
// its options, and the secrets from the environment.
func (c *config) parse(name string, opts []option, args []string, getenv func(string) string, help io.Writer) error {
	if err := parseOptions(name, opts, args, getenv, help); err != nil {
		return err
	}
	c.AdminToken = getenv("SWITCHYARD_ADMIN_TOKEN")
	c.BotToBackend = getenv("BOT_TO_BACKEND_SECRET")
	c.BotTelegramToken = getenv("BOT_TELEGRAM_TOKEN")
	c.BotWebhookSecret = getenv("BOT_TELEGRAM_WEBHOOK_SECRET")
	c.OmniToken = getenv("OMNI_TELEGRAM_TOKEN")
	c.OmniWebhook = getenv("OMNI_WEBHOOK_SECRET")
	return c.checkEphemeral(opts, args, getenv)
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

func getenv(k string) string { return os.Getenv(k) }
