package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"switchyard/referral"
)

// publishArgs are publish's options: the database's, and the topic.
type publishArgs struct {
	cfg   config
	topic string
}

func (a *publishArgs) options() []option {
	return append(a.cfg.options("publish"),
		option{"topic", "", "pin.identity.users.v1", "topic to publish to", setString(&a.topic)})
}

// publishCmd is `switchyard publish --topic T FILE.jsonl`: it appends every
// line of the file to the topic, in order, keyed by its "aggregateId", with a
// progress line per batch and a summary at the end.
func publishCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var a publishArgs
	rest, err := parseFlags("publish", a.options(), args, getenv, stdout)
	if err != nil {
		return err
	}
	name, err := oneArg("publish", "FILE.jsonl", rest)
	if err != nil {
		return err
	}
	var in io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	return publish(ctx, &a.cfg, a.topic, in, stdout, stderr)
}

// publish appends in's records to topic on cfg's database, migrated and
// with the referral topics declared, so a fresh file can be published to.
func publish(ctx context.Context, cfg *config, topic string, in io.Reader, stdout, stderr io.Writer) error {
	st, err := openStore(ctx, cfg, newLogger(cfg, stderr))
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	if _, err := referral.New(ctx, referral.Opts{DB: st, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		return err
	}
	sum, err := referral.PublishFile(ctx, st, topic, in, stderr)
	fmt.Fprintf(stdout, "published %d record(s) to %s", sum.Published, sum.Topic)
	if sum.Blank > 0 {
		fmt.Fprintf(stdout, " (%d blank line(s) skipped)", sum.Blank)
	}
	fmt.Fprintln(stdout)
	return err
}
