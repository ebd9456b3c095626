package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"switchyard/store"
)

// startCheckTimeout bounds the integrity check serve runs at start: SQLite's
// quick check reads the whole file, which takes seconds on a large one. A
// check cut short is reported, and `switchyard check` does the whole one.
const startCheckTimeout = 10 * time.Second

// checkAtStart runs the quick integrity check before serving, so that a
// damaged file is refused at start instead of failing work later.
func checkAtStart(ctx context.Context, db *store.DB, log *slog.Logger) error {
	if db.Postgres() {
		return nil // PostgreSQL guards its own pages (see store.DB.CheckIntegrity)
	}
	cctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
	defer cancel()
	start := time.Now()
	err := db.CheckIntegrity(cctx, false)
	switch {
	case err == nil:
		log.Info("database integrity quick check passed", slog.Duration("took", time.Since(start).Round(time.Millisecond)))
		return nil
	case errors.Is(err, store.ErrCorrupt):
		return fmt.Errorf("%w\n(the file %s is damaged: restore the latest backup over it — README, Backups; `switchyard check` lists the faults)", err, db.Path())
	case cctx.Err() != nil && ctx.Err() == nil:
		log.Warn("database integrity quick check did not finish in time and was skipped for this start; run `switchyard check` to check the whole file",
			slog.Duration("limit", startCheckTimeout))
		return nil
	default:
		return err
	}
}

// checkArgs are check's options: the database's, and the kind of check.
type checkArgs struct {
	cfg   config
	quick bool
}

func (a *checkArgs) options() []option {
	return append(a.cfg.options("check"),
		option{"quick", "", "false", "the quick check only (no index contents; what serve runs at start)", setBool(&a.quick)})
}

// checkCmd is `switchyard check`: SQLite's full integrity check (or the quick
// one), reported on stdout; it exits non-zero when the file is damaged, and
// on PostgreSQL, whose pages the server checks (pg_amcheck).
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var a checkArgs
	if err := parseOptions("check", a.options(), args, getenv, stdout); err != nil {
		return err
	}
	cfg := &a.cfg
	st, err := openStore(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	defer st.Close()
	if st.Postgres() {
		// Refused, naming the server's own tool, before a "checking" line
		// that would promise a check.
		return st.CheckIntegrity(ctx, !a.quick)
	}
	kind := "full"
	if a.quick {
		kind = "quick"
	}
	fmt.Fprintf(stdout, "checking %s (%s integrity check)…\n", store.Redact(cfg.DB), kind)
	start := time.Now()
	if err := st.CheckIntegrity(ctx, !a.quick); err != nil {
		if errors.Is(err, store.ErrCorrupt) {
			return fmt.Errorf("%w\nrestore the latest backup over the file (README, Backups)", err)
		}
		return err
	}
	fmt.Fprintf(stdout, "ok: no faults found in %s\n", time.Since(start).Round(time.Millisecond))
	return nil
}
