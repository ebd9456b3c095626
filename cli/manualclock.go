package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"switchyard/clock"
	"switchyard/openapi"
	"switchyard/store"
	"switchyard/telegram"
	"switchyard/web"
)

// Clock modes of --clock.
const (
	clockSystem = "system"
	clockManual = "manual"
)

// clockConfig is --clock and --clock-start: the store's clock, the real time
// (the default, always in production) or, for integration tests on the
// sandbox only, a manual clock that stands still until POST
// /admin/api/clock/advance moves it (clock/, docs/testing.md).
type clockConfig struct {
	Mode string
	// Start is where a manual clock starts; zero is the real time at start.
	Start time.Time
	// manual is the manual clock, made once (storeClock).
	manual *store.ManualClock
}

// options are the clock's. They have no environment variable: a manual
// clock is asked for on the command line of a test, never left behind in
// an environment.
func (c *clockConfig) options() []option {
	return []option{
		{"clock", "", clockSystem, "the clock every time rule goes by: system, or manual (tests only, on the sandbox: it stands still until POST /admin/api/clock/advance moves it)", setOneOf(&c.Mode, clockSystem, clockManual)},
		{"clock-start", "", "", "where --clock manual starts, an RFC 3339 time such as 2026-01-01T00:00:00Z (default: the real time at start)", func(v string) error {
			if v == "" {
				c.Start = time.Time{}
				return nil
			}
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil || t.Year() < 1 || t.Year() > 9999 {
				return errors.New("must be an RFC 3339 time such as 2026-01-01T00:00:00Z")
			}
			c.Start = t.UTC()
			return nil
		}},
	}
}

// errManualClock refuses --clock manual outside the sandbox.
var errManualClock = errors.New("refusing --clock manual")

// checkClock refuses a manual clock unless both bots run on the built-in
// sandbox Bot API (no token, their roles in this process): a clock that
// stands still would stall real users' retries and schedules, so it exists
// only where no real Telegram user can be reached. --clock-start without
// --clock manual is refused too, as a sign of a mistaken command line.
func checkClock(cfg *config) error {
	c := cfg.Clock
	if c.Mode != clockManual {
		if !c.Start.IsZero() {
			return usageError{fmt.Errorf("%w: --clock-start needs --clock manual", errManualClock)}
		}
		return nil
	}
	onboarding, chat := cfg.sandboxBots()
	if cfg.BotTelegramToken != "" || cfg.OmniToken != "" || !onboarding || !chat {
		return usageError{fmt.Errorf("%w: a manual clock is for tests on the sandbox only, and the sandbox is not active: "+
			"both bots must run on the built-in sandbox Bot API (BOT_TELEGRAM_TOKEN and OMNI_TELEGRAM_TOKEN unset, "+
			"and --roles including bot and inbound or outbound)", errManualClock)}
	}
	return nil
}

// storeClock is the clock serve opens the store with: nil (the store's
// system clock) unless --clock manual, then the manual clock, the same one
// every call.
func (c *clockConfig) storeClock() store.Clock {
	if c.Mode != clockManual {
		return nil
	}
	if c.manual == nil {
		start := c.Start
		if start.IsZero() {
			start = time.Now()
		}
		c.manual = store.NewManualClock(start.Truncate(time.Microsecond))
	}
	return c.manual
}

// wireClock serves the clock's admin API when the store's clock is manual
// (404 otherwise: the routes do not exist).
func wireClock(w wiring) part {
	mc, ok := w.db.Clock.(*store.ManualClock)
	if !ok {
		return part{}
	}
	w.log.Warn("the clock is manual (--clock manual): time stands still until POST /admin/api/clock/advance moves it",
		slog.Time("now", mc.Now()))
	return part{admin: []web.RoutesFunc{clock.New(w.db).AdminRoutes}, adminAPI: []openapi.Part{clock.AdminOpenAPI()}}
}

// sandboxLimits are the Telegram rate limits the bots keep: Telegram's
// (the zero Limits) on the system clock, none on a manual clock. Only
// sandbox bots run on a manual clock (checkClock), and the sandbox then
// enforces none either: the limits are per second of real time, and pacing
// by a clock that stands still would hold every second message to a chat
// until the test moved the clock.
func sandboxLimits(cfg *config) telegram.Limits {
	if cfg.Clock.Mode == clockManual {
		return telegram.NoLimits()
	}
	return telegram.Limits{}
}
