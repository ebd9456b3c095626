package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// backupCmd is `switchyard backup FILE`: an online backup of the database,
// safe while an instance serves from it.
func backupCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("switchyard backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "database to back up (default $SWITCHYARD_DB or ./switchyard.db)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: switchyard backup [--db FILE] DEST   (DEST must not exist)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("backup needs exactly one DEST file")
	}
	var cfgArgs []string
	if *db != "" {
		cfgArgs = []string{"--db", *db}
	}
	cfg, err := parseConfig("backup", cfgArgs, getenv, stderr)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	defer st.Close()
	start := time.Now()
	if err := st.Backup(ctx, fs.Arg(0)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up %s to %s in %s\n", cfg.DB, fs.Arg(0), time.Since(start).Round(time.Millisecond))
	return nil
}
