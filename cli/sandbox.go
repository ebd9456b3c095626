package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"switchyard/omni"
	"switchyard/store"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

// sandboxPath is where the built-in fake Bot API is mounted when a bot has no token.
const sandboxPath = "/sandbox/telegram"

// Sandbox bot ids; their tokens are random per database (sandboxToken).
const (
	sandboxOnboardingBotID = 7000000001
	sandboxOmniBotID       = 7000000002
)

// onboardingWebhookPath is where the onboarding bot takes webhook updates.
const onboardingWebhookPath = "/webhooks/bot"

// sandbox is the process's built-in fake Bot API and the tokens of the bots
// on it.
type sandbox struct {
	server *fakebot.Server
	// onboardingToken and omniToken are the bots' tokens on the fake; empty
	// for a bot that is not on it.
	onboardingToken, omniToken string
	// claims are the leases (sandboxLeaseName) by which this process holds
	// its sandbox bots on the database, and owner its name in them.
	claims []string
	owner  string
}

// routes mounts the fake Bot API at sandboxPath; its tokens are its
// authentication.
func (sb *sandbox) routes(r *mux.Router) { r.PathPrefix(sandboxPath + "/").Handler(sb.server) }

// sandboxBots reports which of this process's bots run on the sandbox: those
// whose role runs here and that have no real token.
func (c *config) sandboxBots() (onboarding, omni bool) {
	return c.BotTelegramToken == "" && c.has("bot"),
		c.OmniToken == "" && (c.has("inbound") || c.has("outbound"))
}

// newSandbox returns the fake Bot API for the bots that have no real token,
// or nil when every bot of this process has one. The fake accepts only the
// bots' tokens, random per database; delivers webhooks only to this
// instance's own webhook routes; and refuses browsers' cross-origin
// requests, as anyone who reaches the port reaches it. It claims each of
// its bots for this process (claimSandboxBot), and fails with
// errSandboxTaken when another live process on the database runs one.
func newSandbox(ctx context.Context, cfg *config, db *store.DB, u urls, log *slog.Logger) (*sandbox, error) {
	onboarding, chat := cfg.sandboxBots()
	if !onboarding && !chat {
		return nil, nil
	}
	sb := &sandbox{}
	var tokens []string
	hooks := map[int64]string{}
	for _, b := range []struct {
		on    bool
		id    int64
		token *string
		hook  string
	}{
		{onboarding, sandboxOnboardingBotID, &sb.onboardingToken, onboardingWebhookPath},
		{chat, sandboxOmniBotID, &sb.omniToken, omni.WebhookPath},
	} {
		if !b.on {
			continue
		}
		token, err := sandboxToken(ctx, db, b.id)
		if err != nil {
			return nil, err
		}
		if err := claimSandboxBot(ctx, db, b.id, sb); err != nil {
			sb.releaseClaims(db)
			return nil, err
		}
		*b.token = token
		tokens = append(tokens, token)
		hooks[b.id] = b.hook
	}
	// Update ids start from the clock: the bots remember the ids they saw
	// (offsets, dedup keys) across restarts; the fake does not. Sends meet
	// Telegram's rate limits, as the fake models them — except on a manual
	// clock, where the bots keep none (sandboxLimits).
	limits := &telegram.Limits{}
	if cfg.Clock.Mode == clockManual {
		limits = nil
	}
	sb.server = fakebot.New(fakebot.Opts{
		BasePath: sandboxPath, Log: log.With(slog.String("subsystem", "sandbox")),
		Limits:            limits,
		FirstUpdateID:     fakebot.UpdateIDFromClock(),
		Tokens:            tokens,
		CheckWebhookFunc:  ownWebhooks(u, hooks),
		RefuseCrossOrigin: true,
	})
	return sb, nil
}

// A sandbox bot lives in the memory of one process: its chats, its
// webhook, the updates waiting for getUpdates. A second process on the
// same database that ran the same bot on a sandbox of its own would split
// it in two — one process's sender writing to chats that exist in the
// other's fake, its webhook registered where no update arrives, the
// console's sandbox users talking to a bot nobody polls — so each process
// claims the sandbox bots it runs, by a lease, and a second one is refused
// while the first lives. The roles of a sandbox bot run in one process; a
// bot shared by several processes needs a real token (and TELEGRAM_API_URL
// for a Bot API server they all reach).
const (
	// sandboxLeaseTTL is how long a claim outlives its holder: a process
	// started right after its predecessor was killed waits that long at
	// most for the claim to expire.
	sandboxLeaseTTL = 10 * time.Second
	// sandboxClaimPoll is how often a waiting start looks again.
	sandboxClaimPoll = 250 * time.Millisecond
)

// errSandboxTaken refuses a start whose sandbox bot another live process
// runs on the same database.
var errSandboxTaken = errors.New("refusing to start: the sandbox bot is another process's")

// sandboxLeaseName is the lease of the process that runs bot botID on its
// sandbox.
func sandboxLeaseName(botID int64) string { return "sandbox:bot" + strconv.FormatInt(botID, 10) }

// claimSandboxBot takes the lease of sandbox bot botID for sb's process,
// waiting up to sandboxLeaseTTL for a predecessor's claim to expire (a
// process that was killed), and refuses with errSandboxTaken when another
// process still holds it by then.
func claimSandboxBot(ctx context.Context, db *store.DB, botID int64, sb *sandbox) error {
	if sb.owner == "" {
		sb.owner = store.NewOwnerID()
	}
	name := sandboxLeaseName(botID)
	deadline := time.Now().Add(sandboxLeaseTTL + time.Second)
	for {
		held, err := db.AcquireLease(ctx, name, sb.owner, sandboxLeaseTTL)
		if err != nil {
			return fmt.Errorf("sandbox: claim bot %d: %w", botID, err)
		}
		if held {
			sb.claims = append(sb.claims, name)
			return nil
		}
		if time.Now().After(deadline) {
			holder, _, _ := db.Lease(ctx, name)
			return fmt.Errorf("%w: process %s runs the sandbox bot %d on this database, and a sandbox bot lives in one "+
				"process's memory. Run the bot's roles (bot; inbound and outbound) in one process, or give the bot a real "+
				"token (BOT_TELEGRAM_TOKEN, OMNI_TELEGRAM_TOKEN; TELEGRAM_API_URL for a Bot API server every process reaches)",
				errSandboxTaken, holder.Owner, botID)
		}
		if !store.Sleep(ctx, sandboxClaimPoll) {
			return ctx.Err()
		}
	}
}

// holdClaims keeps sb's claims while ctx lasts (store.RunExclusive renews
// them) and releases them when it ends, so that the next start need not
// wait for them to expire.
func (sb *sandbox) holdClaims(ctx context.Context, db *store.DB, log *slog.Logger) error {
	var wg sync.WaitGroup
	for _, name := range sb.claims {
		wg.Go(func() {
			_ = db.RunExclusive(ctx, store.LeaseOpts{Name: name, Owner: sb.owner, TTL: sandboxLeaseTTL, Logger: log},
				func(held context.Context, _ store.Lease) error {
					<-held.Done()
					return nil
				})
		})
	}
	wg.Wait()
	// Also a claim RunExclusive never got to hold (the process stopped at
	// once) is given up.
	sb.releaseClaims(db)
	return nil
}

// releaseClaims gives up the claims sb took.
func (sb *sandbox) releaseClaims(db *store.DB) {
	for _, name := range sb.claims {
		_ = db.ReleaseLease(context.Background(), name, sb.owner)
	}
}

// sandboxToken is the sandbox token of bot botID: a well-formed Bot API token
// whose secret part is random, generated on the database's first start and
// kept in it with the other secrets, so a restart keeps it and no other
// database shares it.
func sandboxToken(ctx context.Context, db *store.DB, botID int64) (string, error) {
	id := strconv.FormatInt(botID, 10)
	key := "secret.sandbox_bot_token." + id
	secret, _, err := db.EnsureSecret(ctx, key)
	if err != nil {
		return "", fmt.Errorf("secret %s: %w", key, err)
	}
	// A Bot API token's secret part is 35 characters of [A-Za-z0-9_-]; the
	// stored secret is 64 hex digits.
	if len(secret) < 35 || strings.Trim(secret, "0123456789abcdef") != "" {
		return "", fmt.Errorf("secret %s: not the 64 hex digits it was generated as", key)
	}
	return id + ":" + secret[:35], nil
}

// ownWebhooks is the sandbox's setWebhook check: a bot's webhook may only be
// this instance's own route for it, at its own address or its public URL, so
// nobody can point the sandbox's updates elsewhere.
func ownWebhooks(u urls, paths map[int64]string) func(botID int64, url string) error {
	return func(botID int64, url string) error {
		path, ok := paths[botID]
		if !ok {
			return errors.New("this bot takes no webhook on this instance")
		}
		for _, base := range []string{u.self, u.public} {
			if url == strings.TrimRight(base, "/")+path {
				return nil
			}
		}
		return fmt.Errorf("the sandbox delivers only to this instance's own %s", path)
	}
}

// errSandboxExposed refuses a start that would serve the sandbox Bot API
// beyond this machine without --sandbox-public.
var errSandboxExposed = errors.New("refusing to start")

// checkSandboxExposure refuses to serve the sandbox Bot API on an address
// other machines can reach, unless the operator asked for it: a process
// listening beyond loopback with a bot that has no token is most likely a
// deployment that forgot its tokens, and it would hand whoever reaches the
// port a fake Telegram in front of its bots.
func checkSandboxExposure(cfg *config) error {
	onboarding, chat := cfg.sandboxBots()
	if (!onboarding && !chat) || loopbackAddr(cfg.Addr) || cfg.SandboxPublic {
		return nil
	}
	var bots []string
	if onboarding {
		bots = append(bots, "the onboarding bot (BOT_TELEGRAM_TOKEN)")
	}
	if chat {
		bots = append(bots, "the business-inbox bot (OMNI_TELEGRAM_TOKEN)")
	}
	return fmt.Errorf("%w: --addr %q is not a loopback address, and %s would run on the built-in sandbox Bot API, "+
		"which anyone who can reach the port could call. Set the bot tokens to use Telegram, listen on 127.0.0.1, "+
		"or pass --sandbox-public (SWITCHYARD_SANDBOX_PUBLIC=true) to serve the sandbox there on purpose",
		errSandboxExposed, cfg.Addr, strings.Join(bots, " and "))
}

// sandboxExposed reports whether this process serves the sandbox Bot API
// beyond loopback (only with --sandbox-public).
func sandboxExposed(cfg *config) bool {
	onboarding, chat := cfg.sandboxBots()
	return (onboarding || chat) && !loopbackAddr(cfg.Addr)
}

// loopbackAddr reports whether the listen address addr (host:port) is on
// this machine only: a loopback IP or "localhost". An empty host, an
// unspecified IP (0.0.0.0, ::) and any other name count as reachable from
// elsewhere.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
