package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

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
// requests, as anyone who reaches the port reaches it.
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
		*b.token = token
		tokens = append(tokens, token)
		hooks[b.id] = b.hook
	}
	// Update ids start from the clock: the bots remember the ids they saw
	// (offsets, dedup keys) across restarts; the fake does not. Sends meet
	// Telegram's rate limits, as the fake models them.
	sb.server = fakebot.New(fakebot.Opts{
		BasePath: sandboxPath, Log: log.With(slog.String("subsystem", "sandbox")),
		Limits:            &telegram.Limits{},
		FirstUpdateID:     fakebot.UpdateIDFromClock(),
		Tokens:            tokens,
		CheckWebhookFunc:  ownWebhooks(u, hooks),
		RefuseCrossOrigin: true,
	})
	return sb, nil
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
