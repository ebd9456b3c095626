package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"switchyard/store"
)

// backupCmd is `switchyard backup DEST`: an online backup of the SQLite
// file, safe while an instance serves from it. On PostgreSQL it exits
// non-zero naming pg_dump (store.DB.Backup), and writes nothing.
func backupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := &config{}
	rest, err := parseFlags("backup", cfg.options("backup"), args, getenv, stdout)
	if err != nil {
		return err
	}
	dest, err := oneArg("backup", "DEST", rest)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	defer st.Close()
	start := time.Now()
	if err := st.Backup(ctx, dest); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s in %s\n", store.Redact(cfg.DB), dest, time.Since(start).Round(time.Millisecond))
	return nil
}
