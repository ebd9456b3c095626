package main

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

// boolText is a boolean flag's text, kept for the option's set to parse.
type boolText struct{ v *string }

func (b boolText) String() string {
	if b.v == nil {
		return ""
	}
	return *b.v
}
func (b boolText) Set(v string) error { *b.v = v; return nil }
func (b boolText) IsBoolFlag() bool   { return true }

// parseFlags is how every command reads its options: each takes its value
// from its flag, else from its environment variable, else from its
// default, and hands it to its set; an error names the option and where the
// value came from. It returns the arguments after the options. -h or --help
// prints the command's usage (printUsage) to help and returns flag.ErrHelp.
func parseFlags(name string, opts []option, args []string, getenv func(string) string, help io.Writer) ([]string, error) {
	fs := flag.NewFlagSet("switchyard "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	given := map[string]*string{}
	for _, o := range opts {
		given[o.flag] = new(string)
		if o.boolean() {
			fs.Var(boolText{given[o.flag]}, o.flag, o.usage)
			continue
		}
		fs.StringVar(given[o.flag], o.flag, "", o.usage)
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		printUsage(help, name, opts)
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("%w (switchyard %s --help lists its options)", err, name)
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	for _, o := range opts {
		v, from := o.def, "default"
		if e := lookupEnv(getenv, o.env); e != "" {
			v, from = e, o.env
		}
		if explicit[o.flag] {
			v, from = *given[o.flag], "--"+o.flag
		}
		if err := o.set(v); err != nil {
			return nil, fmt.Errorf("%s (from %s): %w", o.flag, from, err)
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

// noArgs refuses arguments left after a command's options.
func noArgs(rest []string) error {
	if len(rest) > 0 {
		return fmt.Errorf("unexpected argument %q", rest[0])
	}
	return nil
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
// options with their environment variables and defaults, and the settings
// it reads from the environment only.
func printUsage(w io.Writer, name string, opts []option) {
	cmd, _ := lookupCommand(name)
	line := "switchyard " + name
	if len(opts) > 0 {
		line += " [options]"
	}
	if cmd.args != "" {
		line += " " + cmd.args
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", line, cmd.about())
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	if len(opts) > 0 {
		fmt.Fprintln(w, "\nOptions (a flag wins over its environment variable):")
	}
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
	if len(cmd.secrets) > 0 {
		fmt.Fprintln(w, "\nSecrets (environment only, never flags):")
		for _, s := range cmd.secrets {
			fmt.Fprintf(tw, "  %s\t%s\n", s.env, s.usage)
		}
		tw.Flush()
	}
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
			return fmt.Errorf("must be true or false")
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
			return fmt.Errorf("must be a duration such as 30s, or 0")
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
			return fmt.Errorf("must be a number of requests per second, 0 or more")
		}
		*p = f
		return nil
	}
}
