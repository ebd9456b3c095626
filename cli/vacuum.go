package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"switchyard/store"
)

// vacuumCmd is `switchyard vacuum`: it switches the SQLite file to
// auto_vacuum=INCREMENTAL and compacts it with one VACUUM (store.DB.Compact),
// which a file created before this version needs once for the retention
// runner to give freed pages back; a new file has the mode from its start.
func vacuumCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := &config{}
	if err := parseOptions("vacuum", cfg.options("vacuum"), args, getenv, stdout); err != nil {
		return err
	}
	st, err := openStore(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	defer st.Close()
	start := time.Now()
	before, after, err := st.Compact(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "vacuumed %s in %s: %d → %d bytes, auto_vacuum %s → %s\n", store.Redact(cfg.DB),
		time.Since(start).Round(time.Millisecond), before.DatabaseBytes, after.DatabaseBytes, before.AutoVacuum, after.AutoVacuum)
	return nil
}
