package cli

import (
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"switchyard/store"
	"switchyard/store/storetest"
)

// postgresOnly skips tb unless this run's databases are PostgreSQL
// (storetest.EnvTestDB): a test of what the binary does on PostgreSQL alone.
func postgresOnly(tb testing.TB, why string) {
	tb.Helper()
	if !storetest.Postgres() {
		tb.Skip("PostgreSQL only (set " + storetest.EnvTestDB + "): " + why)
	}
}

// runBinary runs the binary with args and extra environment, and returns
// its combined output and exit status.
func runBinary(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatalf("switchyard %v: %v\n%s", args, err, out)
		return "", -1
	}
}

// TestPostgresRefusesBackupAndCheck: backup and check are SQLite's file
// operations. On PostgreSQL each exits 1 naming the server's own tool,
// writes nothing and claims nothing; migrate works as on SQLite
// (TestMigrateCommand runs on both).
func TestPostgresRefusesBackupAndCheck(t *testing.T) {
	t.Parallel()
	postgresOnly(t, "the refusals of backup and check; on SQLite TestBackupCommand and TestDamagedDatabase run them")
	db := storetest.Source(t)
	if out, code := runBinary(t, nil, "migrate", "--db", db); code != 0 || !strings.Contains(out, "applied ") {
		t.Fatalf("migrate on PostgreSQL: exit %d\n%s", code, out)
	}

	t.Run("backup exits 1 naming pg_dump and writes no file", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "copy.db")
		out, code := runBinary(t, nil, "backup", "--db", db, dest)
		if code != 1 || !strings.Contains(out, "pg_dump") || !strings.Contains(out, "pg_restore") || strings.Contains(out, "backed up") {
			t.Fatalf("backup on PostgreSQL: exit %d\n%s", code, out)
		}
		if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused backup wrote %s: %v", dest, err)
		}
	})
	t.Run("check exits 1 naming pg_amcheck, without claiming to check", func(t *testing.T) {
		for _, args := range [][]string{{"check", "--db", db}, {"check", "--quick", "--db", db}} {
			out, code := runBinary(t, nil, args...)
			if code != 1 || !strings.Contains(out, "pg_amcheck") || strings.Contains(out, "checking") || strings.Contains(out, "ok:") {
				t.Fatalf("%v on PostgreSQL: exit %d\n%s", args, code, out)
			}
		}
	})
	t.Run("the database given in SWITCHYARD_DB is refused the same way", func(t *testing.T) {
		out, code := runBinary(t, []string{"SWITCHYARD_DB=" + db}, "check")
		if code != 1 || !strings.Contains(out, "pg_amcheck") {
			t.Fatalf("check with SWITCHYARD_DB: exit %d\n%s", code, out)
		}
	})
}

// TestPostgresInstancesStartingAtOnceMigrateOnce: instances started together
// on a new PostgreSQL database take turns under goose's advisory lock, so the
// migrations are applied once and every instance finds the schema current.
func TestPostgresInstancesStartingAtOnceMigrateOnce(t *testing.T) {
	t.Parallel()
	postgresOnly(t, "goose's session advisory lock is PostgreSQL's; SQLite's one writer serializes a file's migrations")
	db := storetest.Source(t)
	const n = 4
	outs := make([]string, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i], codes[i] = runBinary(t, nil, "migrate", "--db", db) })
	}
	wg.Wait()
	applied := 0
	for i := range n {
		if codes[i] != 0 {
			t.Fatalf("migrate %d of %d started at once: exit %d\n%s", i+1, n, codes[i], outs[i])
		}
		switch {
		case strings.Contains(outs[i], "applied "):
			applied++
		case !strings.Contains(outs[i], "nothing to apply"):
			t.Fatalf("migrate %d: %s", i+1, outs[i])
		}
	}
	if applied != 1 {
		t.Fatalf("%d of %d instances applied migrations, want 1:\n%s", applied, n, strings.Join(outs, "\n"))
	}
}

// dbPassword is the password the redaction tests put in database URLs: it
// must never appear in anything the binary prints, logs or serves.
const dbPassword = "pw-4f9c1e-never-shown"

// withPassword is the PostgreSQL URL src with dbPassword as its user's
// password. The test server trusts local connections, so the password is
// carried and never checked.
func withPassword(t *testing.T, src string) string {
	t.Helper()
	u, err := url.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), dbPassword)
	return u.String()
}

// withPasswordParam is src with dbPassword as its password parameter, the
// other way libpq and pgx take one.
func withPasswordParam(t *testing.T, src string) string {
	t.Helper()
	u, err := url.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("password", dbPassword)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestDatabasePasswordNeverShown: the password of a PostgreSQL URL never
// reaches the log, the banner, an error, a --help or a console page.
func TestDatabasePasswordNeverShown(t *testing.T) {
	t.Parallel()
	noPassword := func(t *testing.T, what, text string) {
		t.Helper()
		if strings.Contains(text, dbPassword) {
			t.Errorf("%s shows the database password:\n%s", what, text)
		}
	}

	t.Run("a URL that cannot be opened is named without its password", func(t *testing.T) {
		t.Parallel()
		for _, src := range []string{
			"postgres://switchyard:" + dbPassword + "@127.0.0.1:1/switchyard?sslmode=disable",     // nothing listens
			"postgres://switchyard@127.0.0.1:1/switchyard?sslmode=disable&password=" + dbPassword, // the same, as a parameter
			"postgres://switchyard:" + dbPassword + "@127.0.0.1:notaport/switchyard",              // unparsable
		} {
			for _, args := range [][]string{
				{"migrate", "--db", src}, {"serve", "--db", src, "--addr", "127.0.0.1:0"},
				{"loadtest", "--db", src, "--url", "http://127.0.0.1:1"},
			} {
				out, code := runBinary(t, nil, args...)
				if code != 1 || !strings.Contains(out, "xxxxx") && !strings.Contains(out, "(unparsable URL)") {
					t.Errorf("%s: exit %d, want 1 and the URL named with its password masked:\n%s", args[0], code, out)
				}
				noPassword(t, args[0]+" on a database it cannot open", out)
			}
		}
	})

	t.Run("serve's logs, banner and pages never show it", func(t *testing.T) {
		t.Parallel()
		postgresOnly(t, "a password in a PostgreSQL URL; a SQLite path has none")
		src := withPassword(t, storetest.Source(t))
		p := startArgs(t, []string{"serve", "--db", src, "--addr", "127.0.0.1:0", "--log-format", "json", "--log-level", "debug"}, nil)
		waitHealthy(t, p.base)

		jar, _ := cookiejar.New(nil)
		client := &http.Client{Jar: jar}
		get := func(path string) string {
			t.Helper()
			resp, err := client.Get(p.base + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return string(body)
		}
		get("/admin/login?token=" + p.token)
		overview := get("/admin")
		if !strings.Contains(overview, store.Redact(src)) {
			t.Errorf("the overview does not name the database as %s:\n%s", store.Redact(src), overview)
		}
		pages := []string{"/admin", "/metrics", "/readyz", "/healthz", "/openapi.json"}
		for _, m := range regexp.MustCompile(`href="(/admin[^"#]*)"`).FindAllStringSubmatch(overview, -1) {
			if path := strings.ReplaceAll(m[1], "&amp;", "&"); !slices.Contains(pages, path) {
				pages = append(pages, path)
			}
		}
		if len(pages) < 8 {
			t.Fatalf("the overview links to only %v", pages)
		}
		for _, path := range pages {
			noPassword(t, "GET "+path, get(path))
		}
		p.stop(t)
		p.mu.Lock()
		banner := p.stdout.String()
		p.mu.Unlock()
		logs := p.stderr.String()
		noPassword(t, "the banner", banner)
		noPassword(t, "the log", logs)
		if !strings.Contains(logs, `"msg":"switchyard started"`) || !strings.Contains(logs, "xxxxx") {
			t.Errorf("the start line does not name the database (masked):\n%s", logs)
		}
	})

	t.Run("the other commands never show it", func(t *testing.T) {
		t.Parallel()
		postgresOnly(t, "a password in a PostgreSQL URL; a SQLite path has none")
		src := withPasswordParam(t, storetest.Source(t))
		env := []string{"SWITCHYARD_DB=" + src}
		for _, args := range [][]string{
			{"migrate"}, {"migrate", "--log-level", "debug"}, {"check"}, {"backup", filepath.Join(t.TempDir(), "b.db")},
			{"loadtest", "--db", src, "--url", "http://127.0.0.1:1", "--count", "1"},
			{"serve", "--help"}, {"migrate", "--help"}, {"demo", "--help"}, {"loadtest", "--help"},
		} {
			out, _ := runBinary(t, env, args...)
			noPassword(t, strings.Join(args, " "), out)
		}
		// A database the server does not have: its error names the URL.
		missing, err := url.Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		missing.Path = "/sw_no_such_database"
		for _, cmd := range []string{"migrate", "loadtest"} {
			out, code := runBinary(t, nil, cmd, "--db", missing.String())
			if code != 1 || !strings.Contains(out, "sw_no_such_database") {
				t.Fatalf("%s on a missing database: exit %d\n%s", cmd, code, out)
			}
			noPassword(t, cmd+" on a missing database", out)
		}
	})
}

// TestLoadtestReadsSecretsFromTheDatabase: loadtest --db takes the
// instance's database as serve does, a file or a URL, and reads the secrets
// the instance generated; a SQLite path that does not exist is refused, not
// created.
func TestLoadtestReadsSecretsFromTheDatabase(t *testing.T) {
	t.Parallel()
	db := storetest.Source(t)
	p := start(t, db)
	waitHealthy(t, p.base)
	if p.token == "" {
		t.Fatal("the instance printed no generated admin token")
	}
	src := db
	if store.IsPostgresURL(db) {
		src = withPassword(t, db)
	}
	clean := []string{"SWITCHYARD_ADMIN_TOKEN=", "BOT_TO_BACKEND_SECRET=", "OMNI_WEBHOOK_SECRET="}

	t.Run("with --db it loads with the generated secrets", func(t *testing.T) {
		out, code := runBinary(t, clean, "loadtest", "--url", p.base, "--db", src, "--paths", "topic", "--count", "5", "--drain", "1s")
		if code != 0 || !regexp.MustCompile(`(?m)^topic\s+5\s+5\s`).MatchString(out) {
			t.Fatalf("loadtest --db: exit %d, want 0 and 5 of 5 publishes accepted:\n%s", code, out)
		}
		if strings.Contains(out, dbPassword) {
			t.Fatalf("loadtest shows the database password:\n%s", out)
		}
	})
	t.Run("without --db or a token it refuses", func(t *testing.T) {
		out, code := runBinary(t, clean, "loadtest", "--url", p.base, "--paths", "topic", "--count", "1")
		if code != 1 || !strings.Contains(out, "no admin token") {
			t.Fatalf("loadtest without secrets: exit %d\n%s", code, out)
		}
	})
	t.Run("a database file that does not exist is refused and not created", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "typo.db")
		out, code := runBinary(t, clean, "loadtest", "--url", p.base, "--db", missing, "--paths", "topic", "--count", "1")
		if code != 1 || !strings.Contains(out, "typo.db") {
			t.Fatalf("loadtest --db on a missing file: exit %d\n%s", code, out)
		}
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("loadtest created %s: %v", missing, err)
		}
	})
	p.stop(t)
}
