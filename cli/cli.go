// Package cli is the switchyard command: its subcommands and their options,
// and the process `switchyard serve` wires from the subsystems (wire.go),
// one function per subsystem.
//
//	switchyard [serve]   run (the default when no subcommand is given)
//	switchyard migrate   apply migrations and exit
//	switchyard publish   append a JSON Lines file to a topic
//	switchyard demo      serve on the sandbox with simulated traffic
//	switchyard backup    write an online backup of the SQLite file
//	switchyard check     check the SQLite file's integrity
//	switchyard loadtest  load a running instance through its public paths
//	switchyard version   print the version
//
// switchyard --help lists the commands (the table in commands), and each
// command's --help its options: every command declares them as options
// (flag, environment variable, default) read by parseFlags.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"text/tabwriter"
)

// ExitCode reports err on stderr and is the process's exit status: 0 for
// none (or a --help), 2 for a command line switchyard cannot take (an
// unknown command with the list of commands, a bad option), 1 otherwise.
func ExitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fmt.Fprintln(stderr, "switchyard:", err)
	if errors.Is(err, errUnknownCommand) {
		fmt.Fprintln(stderr)
		printCommands(stderr)
	}
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// errUsage marks a command line switchyard cannot take: an unknown command
// (errUnknownCommand), option or argument, or an option's bad value.
var errUsage = errors.New("usage")

// errUnknownCommand is the error of a command switchyard does not have.
var errUnknownCommand error = usageError{errors.New("unknown command")}

// usageError is err marked as errUsage, with err's text.
type usageError struct{ err error }

func (e usageError) Error() string   { return e.err.Error() }
func (e usageError) Unwrap() []error { return []error{e.err, errUsage} }

// command is one of switchyard's subcommands.
type command struct {
	name string
	// args is what follows the options on the command line, e.g. "DEST".
	args string
	// summary is the command's line in switchyard --help; more, when set,
	// is what its own --help adds to it.
	summary, more string
	// options are what its --help lists: every option it parses (a fresh
	// table, bound to nothing the command uses).
	options func() []option
	// secrets are what it reads from the environment only, for its --help.
	secrets []secretEnv
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// about is what the command's --help says it does.
func (c command) about() string {
	s := strings.ToUpper(c.summary[:1]) + c.summary[1:] + "."
	if c.more != "" {
		s += " " + c.more
	}
	return s
}

// commands are switchyard's subcommands, in the order help lists them. Each
// parses its options with parseFlags.
func commands() []command {
	return []command{
		{name: "serve", summary: "run Switchyard (the default)", options: configOptions("serve"), secrets: secretEnvs, run: serveCmd,
			more: "It runs the roles chosen with --roles, and always the admin API, console, health and metrics."},
		{name: "migrate", summary: "apply database migrations and exit", options: configOptions("migrate"), run: migrateCmd},
		{name: "publish", args: "FILE.jsonl", summary: "append a JSON Lines file to a topic", options: func() []option { return new(publishArgs).options() }, secrets: publishSecrets, run: publishCmd,
			more: "Each line is a record, keyed by its \"aggregateId\"; FILE - reads standard input. With --url it publishes through a running instance's admin API, --batch lines a request."},
		{name: "demo", summary: "serve on the sandbox with simulated traffic on all three flows", secrets: secretEnvs, run: demoCmd,
			options: func() []option { return demoOptions(&demoTraffic{}, &config{}) },
			more:    "It takes serve's options too, never talks to real Telegram (the bot tokens must be unset), and fails when the run failed."},
		{name: "backup", args: "DEST", summary: "write an online backup of the SQLite file", options: configOptions("backup"), run: backupCmd,
			more: "It is safe while an instance serves from the database; DEST must not exist. On PostgreSQL it refuses: back up with pg_dump."},
		{name: "vacuum", summary: "switch the SQLite file to incremental auto-vacuum and compact it", options: configOptions("vacuum"), run: vacuumCmd,
			more: "A file created before auto_vacuum=INCREMENTAL needs it once, so that pruned space goes back to the disk; VACUUM holds the writer for as long as it copies the file (serving instances wait) and needs free disk space of the file's size. On PostgreSQL it refuses: autovacuum reuses the space."},
		{name: "check", summary: "check the SQLite file's integrity", options: func() []option { return new(checkArgs).options() }, run: checkCmd,
			more: "It exits non-zero when the file is damaged. On PostgreSQL it refuses: the server's pg_amcheck checks its tables and indexes."},
		{name: "loadtest", summary: "drive a running instance through its public paths and report throughput and latency",
			options: func() []option { return new(loadtestArgs).options() }, secrets: loadtestSecrets, run: loadtestCmd,
			more: "Secrets come from the environment, or from the instance's database (file or URL) with --db. " +
				"--soak runs a fixed rate for long on a bounded key space, prints a row every --report-every " +
				"(throughput, p99, accepted → handled lag, the instance's RSS, database and WAL size) and ends with a count " +
				"of every accepted request's effect; run the instance with short --retention-* options so that its tables turn over."},
		{name: "version", summary: "print the version", options: func() []option { return nil }, run: versionCmd},
	}
}

// configOptions are the options of the command scope that reads only the
// config (config.options), for its --help.
func configOptions(scope string) func() []option {
	return func() []option { return new(config).options(scope) }
}

// lookupCommand is the command called name.
func lookupCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// Run runs the command args name (serve when args start with an option or
// are empty) with the rest of args (os.Args[1:]), until it is done or ctx
// ends. It is the whole of `switchyard`: main runs it, and so does a Go test
// that runs Switchyard in its own process (switchyardtest).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	name := "serve"
	if len(args) > 0 && (isHelp(args[0]) || args[0] != "" && args[0][0] != '-') {
		name, args = args[0], args[1:]
	}
	if isHelp(name) {
		if len(args) == 0 {
			printCommands(stdout)
			return nil
		}
		name, args = args[0], []string{"--help"}
	}
	cmd, ok := lookupCommand(name)
	if !ok {
		return fmt.Errorf("%w %q (try: switchyard help)", errUnknownCommand, name)
	}
	return cmd.run(ctx, args, stdout, stderr)
}

// printCommands is switchyard --help: every command with its summary.
func printCommands(w io.Writer) {
	fmt.Fprint(w, "Usage: switchyard <command> [options]\n\nCommands:\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, "\nRun \"switchyard <command> --help\" (or \"switchyard help <command>\") for a command's options.\n")
}

// versionCmd is `switchyard version`.
func versionCmd(_ context.Context, args []string, stdout, _ io.Writer) error {
	if err := parseOptions("version", nil, args, getenv, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "switchyard", version())
	return nil
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
