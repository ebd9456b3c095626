// Command switchyard runs Switchyard: the bot outbox, the referral consumer and
// the chat platform on one SQLite file, with an admin console.
//
//	switchyard [serve]   run (the default when no subcommand is given)
//	switchyard migrate   apply migrations and exit
//	switchyard publish   append a JSON Lines file to a topic
//	switchyard demo      serve on the sandbox with simulated traffic
//	switchyard backup    write an online backup of the database
//	switchyard check     check the database file's integrity
//	switchyard loadtest  load a running instance through its public paths
//	switchyard version   print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "switchyard:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		cfg, err := parseConfig("serve", args, getenv, stdout)
		if err != nil {
			return err
		}
		return serve(ctx, cfg, stdout, stderr)
	case "migrate":
		cfg, err := parseConfig("migrate", args, getenv, stdout)
		if err != nil {
			return err
		}
		return migrate(ctx, cfg, stdout, stderr)
	case "backup":
		return backupCmd(ctx, args, stdout, stderr)
	case "check":
		return checkCmd(ctx, args, stdout, stderr)
	case "loadtest":
		return loadtestCmd(ctx, args, stdout, stderr)
	case "publish":
		return publishCmd(ctx, args, stdout, stderr)
	case "demo":
		return demoCmd(ctx, args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "switchyard", version())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, `Usage: switchyard <command> [options]

Commands:
  serve     run Switchyard (the default)
  migrate   apply database migrations and exit
  publish   append a JSON Lines file to a topic (switchyard publish --topic T FILE.jsonl)
  demo      serve on the sandbox with simulated traffic on all three flows (--rate, --duration)
  backup    write an online backup of the database (switchyard backup FILE)
  check     check the database file's integrity (switchyard check [--quick])
  loadtest  drive a running instance through its public paths and report throughput and latency
  version   print the version

Run "switchyard <command> --help" for a command's options.
`)
		return nil
	default:
		return fmt.Errorf("unknown command %q (try: switchyard help)", cmd)
	}
}

// version is the module version, or the VCS revision of a development build.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return "devel-" + rev
}
