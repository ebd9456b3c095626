package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"switchyard/referral"
)

// publishCmd is `switchyard publish --topic T FILE.jsonl`: it appends every
// line of the file to the topic, in order, keyed by its "aggregateId", with a
// progress line per batch and a summary at the end.
func publishCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("switchyard publish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	topic := fs.String("topic", "pin.identity.users.v1", "topic to publish to")
	cfgArgs := []string{}
	db := fs.String("db", "", "SQLite database file (default $SWITCHYARD_DB or ./switchyard.db)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: switchyard publish [--topic T] [--db FILE] FILE.jsonl   (FILE - reads standard input)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("publish needs exactly one FILE.jsonl")
	}
	if *db != "" {
		cfgArgs = append(cfgArgs, "--db", *db)
	}
	cfg, err := parseConfig("publish", cfgArgs, getenv, stderr)
	if err != nil {
		return err
	}
	var in io.Reader = os.Stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}

	log := newLogger(cfg, stderr)
	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	// Declares the referral topics, so a fresh file can be published to.
	if _, err := referral.New(ctx, referral.Opts{DB: st, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		return err
	}
	sum, err := referral.PublishFile(ctx, st, *topic, in, stderr)
	fmt.Fprintf(stdout, "published %d record(s) to %s", sum.Published, sum.Topic)
	if sum.Blank > 0 {
		fmt.Fprintf(stdout, " (%d blank line(s) skipped)", sum.Blank)
	}
	fmt.Fprintln(stdout)
	return err
}
