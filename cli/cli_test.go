package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// runArgs runs switchyard with args in this process and returns its exit
// status (ExitCode), its stdout and its stderr.
func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	err := Run(context.Background(), args, &stdout, &stderr)
	code := ExitCode(err, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, out, _ := runArgs(t, args...)
		if code != 0 {
			t.Fatalf("switchyard %s exited %d", args[0], code)
		}
		for _, c := range commands() {
			if !strings.Contains(out, "  "+c.name+" ") || !strings.Contains(out, c.summary) {
				t.Errorf("switchyard %s does not list %s (%q):\n%s", args[0], c.name, c.summary, out)
			}
		}
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		t.Run(c.name+" --help exits 0 and lists each option with its variable and default", func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runArgs(t, c.name, "--help")
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if !strings.HasPrefix(out, "Usage: switchyard "+c.name) {
				t.Errorf("no usage line:\n%s", out)
			}
			if c.options == nil {
				t.Fatal("the command table declares no options for its --help")
			}
			for _, o := range c.options() {
				if !optionListed(out, o) {
					t.Errorf("--%s (env %q, default %q) is not listed:\n%s", o.flag, o.env, o.def, out)
				}
			}
			for _, s := range c.secrets {
				if !strings.Contains(out, s.env) {
					t.Errorf("secret %s is not listed:\n%s", s.env, out)
				}
			}
			if _, helpOut, _ := runArgs(t, "help", c.name); helpOut != out {
				t.Errorf("switchyard help %s differs from --help:\n%s", c.name, helpOut)
			}
		})
	}
}

// optionListed reports whether help has o's line: its flag, its variable
// and its default.
func optionListed(help string, o option) bool {
	env, def := o.env, o.def
	if env == "" {
		env = "-"
	}
	if def == "" {
		def = `""`
	}
	for _, line := range strings.Split(help, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "--"+o.flag && f[1] == env && f[2] == "default" && f[3] == def {
			return true
		}
	}
	return false
}

func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	t.Run("an unknown command exits 2 with the commands on stderr", func(t *testing.T) {
		code, out, errOut := runArgs(t, "nonsense")
		if code != 2 || out != "" || !strings.Contains(errOut, `unknown command "nonsense"`) || !strings.Contains(errOut, "Commands:") {
			t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
		}
	})
	t.Run("the binary exits 2 for an unknown command and 0 for --help", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var exit *exec.ExitError
		out, err := exec.CommandContext(ctx, binary(t), "nonsense").CombinedOutput()
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(string(out), "Commands:") {
			t.Fatalf("switchyard nonsense: %v\n%s", err, out)
		}
		if out, err := exec.CommandContext(ctx, binary(t), "backup", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--db") {
			t.Fatalf("switchyard backup --help: %v\n%s", err, out)
		}
	})
}

func TestOptionPrecedence(t *testing.T) {
	t.Parallel()
	var got string
	opts := []option{{"mode", "TEST_MODE", "plain", "a mode", setString(&got)}}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"the default holds when neither flag nor variable is set", nil, nil, "plain"},
		{"the variable beats the default", nil, map[string]string{"TEST_MODE": "env"}, "env"},
		{"the flag beats the variable", []string{"--mode", "flag"}, map[string]string{"TEST_MODE": "env"}, "flag"},
		{"an empty variable counts as unset", nil, map[string]string{"TEST_MODE": ""}, "plain"},
		{"a flag given twice keeps its last value", []string{"--mode", "first", "--mode=second"}, nil, "second"},
	} {
		got = ""
		if _, err := parseFlags("version", opts, tc.args, func(k string) string { return tc.env[k] }, io.Discard); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
	t.Run("a command's own option without a variable takes its flag or its default", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want bool
		}{{nil, false}, {[]string{"--quick"}, true}, {[]string{"--quick=false"}, false}} {
			var a checkArgs
			if _, err := parseFlags("check", a.options(), tc.args, func(string) string { return "" }, io.Discard); err != nil || a.quick != tc.want {
				t.Errorf("check %q: quick %v, err %v; want %v", tc.args, a.quick, err, tc.want)
			}
		}
	})
	t.Run("loadtest's --url repeats, one instance each, and defaults to one local instance", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{nil, []string{"http://127.0.0.1:8080"}},
			{[]string{"--url", "http://a:1"}, []string{"http://a:1"}},
			{[]string{"--url", "http://a:1", "--rate", "5", "--url=http://b:2", "--url", "http://c:3"}, []string{"http://a:1", "http://b:2", "http://c:3"}},
		} {
			var a loadtestArgs
			if _, err := parseFlags("loadtest", a.options(), tc.args, func(string) string { return "" }, io.Discard); err != nil || !slices.Equal(a.urls, tc.want) {
				t.Errorf("loadtest %q: urls %q, err %v; want %q", tc.args, a.urls, err, tc.want)
			}
		}
	})
	t.Run("demo's log level defaults to warn but its variable still wins", func(t *testing.T) {
		c := &config{}
		if err := c.parse("demo", demoServeOptions(c), nil, func(string) string { return "" }, io.Discard); err != nil || c.LogLevel != "warn" {
			t.Fatalf("log level %q, err %v", c.LogLevel, err)
		}
		c = &config{}
		env := func(k string) string { return map[string]string{"SWITCHYARD_LOG_LEVEL": "debug"}[k] }
		if err := c.parse("demo", demoServeOptions(c), nil, env, io.Discard); err != nil || c.LogLevel != "debug" {
			t.Fatalf("log level %q, err %v", c.LogLevel, err)
		}
	})
}

func TestBadOptionValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"a bad flag names the flag", []string{"--body-limit", "lots"}, nil, "body-limit (from --body-limit): must be a positive number of bytes"},
		{"a bad variable names the variable", nil, map[string]string{"SWITCHYARD_READ_TIMEOUT": "soon"}, "read-timeout (from SWITCHYARD_READ_TIMEOUT): must be a positive duration"},
		{"a bad flag is named even when its variable is good", []string{"--sync=off"}, map[string]string{"SWITCHYARD_SYNC": "NORMAL"}, "sync (from --sync): must be FULL or NORMAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig("serve", tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, errUsage) {
				t.Fatalf("got %v, want %q marked as a usage error", err, tc.want)
			}
			if code := ExitCode(err, io.Discard); code != 2 {
				t.Fatalf("exit %d, want 2", code)
			}
		})
	}
	t.Run("every command names its own bad option", func(t *testing.T) {
		for _, args := range [][]string{
			{"loadtest", "--rate", "-1"}, {"check", "--quick=maybe"}, {"demo", "--rate", "0"}, {"backup", "--log-format", "xml", "dest"},
		} {
			code, _, errOut := runArgs(t, args...)
			name, _, _ := strings.Cut(strings.TrimPrefix(args[1], "--"), "=")
			if code != 2 || !strings.Contains(errOut, name+" (from --"+name+")") {
				t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
			}
		}
	})
	t.Run("an unknown flag is a usage error, not help", func(t *testing.T) {
		code, _, errOut := runArgs(t, "check", "--nope")
		if code != 2 || !strings.Contains(errOut, "switchyard check --help") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if err := Run(context.Background(), []string{"check", "--nope"}, io.Discard, io.Discard); errors.Is(err, flag.ErrHelp) {
			t.Fatal("an unknown flag was taken for --help")
		}
	})
}
