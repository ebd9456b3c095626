// Command switchyard runs Switchyard: the bot outbox, the referral consumer and
// the chat platform on one SQLite file (or a PostgreSQL database, --db
// postgres://…), with an admin console. Package cli is the command itself;
// switchyard --help lists its subcommands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"switchyard/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.ExitCode(err, os.Stderr))
}
