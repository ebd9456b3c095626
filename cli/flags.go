package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// option is one flag of a command with its environment fallback (none when
// env is empty) and its default, so help can list all three.
type option struct {
	flag, env, def, usage string
	set                   func(string) error
}

// boolean reports whether the option is a switch: one whose default is true
// or false, which may stand alone on the command line (--flag is
// --flag=true).
func (o option) boolean() bool { return o.def == "true" || o.def == "false" }

// given is what the command line gave one option, every time it was given.
type given struct {
	values  []string
	boolean bool
}

func (g *given) String() string     { return strings.Join(g.values, ",") }
func (g *given) Set(v string) error { g.values = append(g.values, v); return nil }
func (g *given) IsBoolFlag() bool   { return g.boolean }

// parseFlags is how every command reads its options: each takes its value
// from its flag, else from its environment variable, else from its
// default, and hands it to its set; an error names the option and where the
// value came from, and is an errUsage. A flag given more than once hands
// set each value in turn, so a plain option keeps the last and a repeatable
// one (loadtest's --url) collects them all. It returns the arguments after
// the options. -h or --help prints the command's usage (printUsage) to help
// and returns flag.ErrHelp.
func parseFlags(name string, opts []option, args []string, getenv func(string) string, help io.Writer) ([]string, error) {
	fs := flag.NewFlagSet("switchyard "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	gave := map[string]*given{}
	for _, o := range opts {
		gave[o.flag] = &given{boolean: o.boolean()}
		fs.Var(gave[o.flag], o.flag, o.usage)
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		printUsage(help, name)
		return nil, err
	} else if err != nil {
		return nil, usageError{fmt.Errorf("%w (switchyard %s --help lists its options)", err, name)}
	}
	for _, o := range opts {
		values, from := []string{o.def}, "default"
		if e := lookupEnv(getenv, o.env); e != "" {
			values, from = []string{e}, o.env
		}
		if g := gave[o.flag]; len(g.values) > 0 {
			values, from = g.values, "--"+o.flag
		}
		for _, v := range values {
			if err := o.set(v); err != nil {
				return nil, usageError{fmt.Errorf("%s (from %s): %w", o.flag, from, err)}
			}
		}
	}
	return fs.Args(), nil
}

// lookupEnv is getenv(env), or "" for an option without a variable.
func lookupEnv(getenv func(string) string, env string) string {
	if env == "" {
		return ""
	}
	return getenv(env)
}

// takeOptions splits args into those that set one of opts (with the value
// that follows a non-boolean one without =) and the rest, in order; it stops
// at "--", which stays with the rest.
func takeOptions(opts []option, args []string) (own, rest []string) {
	byName := map[string]option{}
	for _, o := range opts {
		byName[o.flag] = o
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return own, append(rest, args[i:]...)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		o, ok := byName[name]
		if !strings.HasPrefix(a, "-") || !ok {
			rest = append(rest, a)
			continue
		}
		own = append(own, a)
		if !hasValue && !o.boolean() && i+1 < len(args) {
			i++
			own = append(own, args[i])
		}
	}
	return own, rest
}

// parseOptions is parseFlags for a command that takes no arguments beyond
// its options.
func parseOptions(name string, opts []option, args []string, getenv func(string) string, help io.Writer) error {
	rest, err := parseFlags(name, opts, args, getenv, help)
	if err != nil {
		return err
	}
	return noArgs(rest)
}

// noArgs refuses arguments left after a command's options.
func noArgs(rest []string) error {
	if len(rest) > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", rest[0])}
	}
	return nil
}

// oneArg is the one argument left after the options of the command name,
// whose usage names it what (e.g. "DEST").
func oneArg(name, what string, rest []string) (string, error) {
	if len(rest) != 1 {
		return "", usageError{fmt.Errorf("%s needs exactly one %s (switchyard %s --help)", name, what, name)}
	}
	return rest[0], nil
}

// withDefault is opts with the default of the option named flag replaced.
func withDefault(opts []option, flag, def string) []option {
	for i := range opts {
		if opts[i].flag == flag {
			opts[i].def = def
		}
	}
	return opts
}

// printUsage is a command's --help: its usage line, what it does, its
// options (from the command table) with their environment variables and
// defaults, and the settings it reads from the environment only.
func printUsage(w io.Writer, name string) {
	cmd, _ := lookupCommand(name)
	var opts []option
	if cmd.options != nil {
		opts = cmd.options()
	}
	line := "switchyard " + name
	if len(opts) > 0 {
		line += " [options]"
	}
	if cmd.args != "" {
		line += " " + cmd.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", line, cmd.about())
	printOptions(w, opts)
	if len(cmd.secrets) > 0 {
		fmt.Fprintln(w, "\nSecrets (environment only, never flags):")
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, s := range cmd.secrets {
			fmt.Fprintf(tw, "  %s\t%s\n", s.env, s.usage)
		}
		tw.Flush()
	}
}

// printOptions lists opts, each with its environment variable ("-" for
// none) and default.
func printOptions(w io.Writer, opts []option) {
	if len(opts) == 0 {
		return
	}
	fmt.Fprintln(w, "\nOptions (a flag wins over its environment variable):")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, o := range opts {
		env, def := o.env, o.def
		if env == "" {
			env = "-"
		}
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  --%s\t%s\tdefault %s\t%s\n", o.flag, env, def, o.usage)
	}
	tw.Flush()
}

// The setters of options' values.

func setString(p *string) func(string) error { return func(v string) error { *p = v; return nil } }

// setOneOf takes one of values.
func setOneOf(p *string, values ...string) func(string) error {
	return func(v string) error {
		for _, ok := range values {
			if v == ok {
				*p = v
				return nil
			}
		}
		return fmt.Errorf("must be %s or %s", strings.Join(values[:len(values)-1], ", "), values[len(values)-1])
	}
}

func setBool(p *bool) func(string) error {
	return func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("must be true or false")
		}
		*p = b
		return nil
	}
}

// setPositiveDuration takes a duration above zero; example is one for the
// error, e.g. "30s".
func setPositiveDuration(p *time.Duration, example string) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("must be a positive duration such as %s", example)
		}
		*p = d
		return nil
	}
}

// setDuration takes a duration of zero or more.
func setDuration(p *time.Duration) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return errors.New("must be a duration such as 30s, or 0")
		}
		*p = d
		return nil
	}
}

// setCount takes a whole number of at least least; what names its unit for
// the error, e.g. "a positive number of bytes".
func setCount[N int | int64](p *N, least N, what string) func(string) error {
	return func(v string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || N(n) < least || int64(N(n)) != n {
			return fmt.Errorf("must be %s", what)
		}
		*p = N(n)
		return nil
	}
}

// setRate takes a number of zero or more.
func setRate(p *float64) func(string) error {
	return func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return errors.New("must be a number of requests per second, 0 or more")
		}
		*p = f
		return nil
	}
}
