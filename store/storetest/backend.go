package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the maintenance connection's driver

	"switchyard/migrations"
	"switchyard/store"
)

// EnvTestDB names the environment variable that chooses the backend of a
// test run: unset (or not a postgres:// URL), every database is a SQLite file
// in the test's temporary folder; a postgres:// URL of a server's maintenance
// database (the role must be allowed to create databases), every test gets a
// database of its own on that server, dropped when the test ends.
const EnvTestDB = "SWITCHYARD_TEST_DB"

// Postgres reports whether this test run's databases are PostgreSQL.
func Postgres() bool { return store.IsPostgresURL(os.Getenv(EnvTestDB)) }

// SQLiteOnly skips tb on the PostgreSQL backend, saying why: a test of
// something SQLite alone has (a file, its pragmas, its page format).
func SQLiteOnly(tb testing.TB, why string) {
	tb.Helper()
	if Postgres() {
		tb.Skip("SQLite only: " + why)
	}
}

// Source returns the location of a new, empty database for tb: a path in
// tb.TempDir() on SQLite, the URL of a new database on PostgreSQL. Give it
// to store.Open or to the binary's --db.
func Source(tb testing.TB) string {
	tb.Helper()
	if !Postgres() {
		return filepath.Join(tb.TempDir(), "switchyard.db")
	}
	return newDatabase(tb, "")
}

// MigratedSource is Source with every migration applied: on PostgreSQL, a
// copy of a template database migrated once per schema (CREATE DATABASE …
// TEMPLATE), which is much faster than migrating each test's database.
func MigratedSource(tb testing.TB) string {
	tb.Helper()
	if !Postgres() {
		return filepath.Join(tb.TempDir(), "switchyard.db")
	}
	return newDatabase(tb, migratedTemplate(tb))
}

// server is the PostgreSQL server of the test run, through its maintenance
// database.
var server struct {
	once sync.Once
	db   *sql.DB
	err  error
	url  *url.URL

	tplOnce sync.Once
	tpl     string
	tplErr  error
}

func maintenance(tb testing.TB) (*sql.DB, *url.URL) {
	tb.Helper()
	server.once.Do(func() {
		raw := os.Getenv(EnvTestDB)
		server.url, server.err = url.Parse(raw)
		if server.err != nil {
			server.err = fmt.Errorf("%s is not a URL: %w", EnvTestDB, server.err)
			return
		}
		server.db, server.err = sql.Open("pgx", raw)
		if server.err == nil {
			server.db.SetMaxOpenConns(4)
			server.err = server.db.Ping()
		}
	})
	if server.err != nil {
		tb.Fatalf("the PostgreSQL server of %s: %v", EnvTestDB, server.err)
	}
	return server.db, server.url
}

// databaseURL is the server's URL with database name in place of the maintenance one.
func databaseURL(base *url.URL, name string) string {
	u := *base
	u.Path = "/" + name
	return u.String()
}

// newDatabase creates a database on the test run's server, copied from
// template when one is named, and drops it when tb ends (after the cleanups
// registered later, which close the connections to it).
func newDatabase(tb testing.TB, template string) string {
	tb.Helper()
	admin, base := maintenance(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("sw_test_%d_%s", os.Getpid(), hex.EncodeToString(b[:]))
	q := `create database ` + name
	if template != "" {
		q += ` template ` + template
	}
	if _, err := admin.Exec(q); err != nil {
		tb.Fatalf("create test database: %v", err)
	}
	tb.Cleanup(func() {
		if _, err := admin.Exec(`drop database if exists ` + name + ` with (force)`); err != nil {
			tb.Errorf("drop test database %s: %v", name, err)
		}
	})
	return databaseURL(base, name)
}

// migratedTemplate returns the name of the template database that holds
// this binary's schema, making it the first time: one per schema (its name
// carries a digest of the migrations), made under an advisory lock so that
// the test processes of a run, which start together, make it once.
func migratedTemplate(tb testing.TB) string {
	tb.Helper()
	admin, base := maintenance(tb)
	server.tplOnce.Do(func() {
		server.tpl, server.tplErr = makeTemplate(admin, base)
	})
	if server.tplErr != nil {
		tb.Fatalf("migrated template database: %v", server.tplErr)
	}
	return server.tpl
}

func makeTemplate(admin *sql.DB, base *url.URL) (string, error) {
	digest, err := schemaDigest()
	if err != nil {
		return "", err
	}
	name := "sw_template_" + digest
	ctx := context.Background()
	conn, err := admin.Conn(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	// Session advisory locks are held by the connection, so the lock, the
	// check and the build all run on this one.
	if _, err := conn.ExecContext(ctx, `select pg_advisory_lock(7319021)`); err != nil {
		return "", err
	}
	defer conn.ExecContext(ctx, `select pg_advisory_unlock(7319021)`) //nolint:errcheck // the session ends anyway
	var exists bool
	if err := conn.QueryRowContext(ctx, `select exists (select 1 from pg_database where datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	for _, q := range []string{`drop database if exists ` + building + ` with (force)`, `create database ` + building} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return "", err
		}
	}
	db, err := store.Open(ctx, store.Options{Path: databaseURL(base, building)})
	if err != nil {
		return "", err
	}
	_, merr := db.Migrate(ctx)
	if err := db.Close(); err != nil && merr == nil {
		merr = err
	}
	if merr != nil {
		return "", merr
	}
	if _, err := conn.ExecContext(ctx, `alter database `+building+` rename to `+name); err != nil {
		return "", err
	}
	return name, nil
}

// schemaDigest is a short digest of every PostgreSQL migration file.
func schemaDigest() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.PostgresFS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.PostgresFS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return strings.ToLower(hex.EncodeToString(h.Sum(nil))[:16]), err
}
