package migrations_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite"

	"switchyard/migrations"
)

// testDBEnv names the PostgreSQL server the PostgreSQL half of these tests
// runs on: a postgres:// URL of a maintenance database, in which each test
// creates (and drops) a database of its own.
const testDBEnv = "SWITCHYARD_TEST_DB"

// explicitIDs are the columns SQLite declares as "integer primary key" (a
// rowid it would assign) whose PostgreSQL twin is a plain bigint key, not an
// identity, because the code always gives the value: an identity given
// explicit values never advances its sequence, so a later default insert
// would collide. Every other rowid column must be an identity on
// PostgreSQL. The test fails when an entry stops being a rowid column on
// SQLite, so the list cannot outlive its reason.
var explicitIDs = map[string]string{
	"store_heartbeat.id":        "the one row is always id 1 (store/health.go)",
	"bot_update_offsets.bot_id": "the Telegram bot's own id (bot/onboarding/telegram_updates.go)",
}

// Each SQLite migration has a PostgreSQL twin of the same version and name,
// and the twins declare nothing only SQLite understands.
func TestPostgresFolderHoldsTheSameVersions(t *testing.T) {
	t.Parallel()
	sqliteFiles, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	pgPaths, err := fs.Glob(migrations.PostgresFS, "postgres/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	pgFiles := make([]string, 0, len(pgPaths))
	for _, p := range pgPaths {
		pgFiles = append(pgFiles, path.Base(p))
	}
	if len(sqliteFiles) == 0 {
		t.Fatal("no SQLite migration found: the embed is broken")
	}
	if !slices.Equal(sqliteFiles, pgFiles) {
		t.Fatalf("the folders differ:\n  SQLite:     %v\n  PostgreSQL: %v\nonly in SQLite: %v\nonly in PostgreSQL: %v",
			sqliteFiles, pgFiles, minus(sqliteFiles, pgFiles), minus(pgFiles, sqliteFiles))
	}

	t.Run("the PostgreSQL files use no SQLite-only syntax", func(t *testing.T) {
		t.Parallel()
		sqliteOnly := regexp.MustCompile(`(?i)\b(strict|autoincrement|without\s+rowid|strftime|randomblob|printf|json_extract|json_object|blob|integer)\b`)
		comment := regexp.MustCompile(`--.*`)
		for _, p := range pgPaths {
			b, err := fs.ReadFile(migrations.PostgresFS, p)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				if m := sqliteOnly.FindString(comment.ReplaceAllString(line, "")); m != "" {
					t.Errorf("%s:%d: %q is SQLite's (every integer is bigint, blob is bytea): %s", p, i+1, m, strings.TrimSpace(line))
				}
			}
		}
	})
}

// The PostgreSQL migrations define the schema the SQLite ones do, after
// every version: the same tables, columns (name, type class, nullability,
// default, assigned ids), keys, foreign keys, checks, triggers and explicit
// indexes.
func TestPostgresMigrationsDefineTheSQLiteSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg := postgresDB(t)
	lite := sqliteDB(t)
	pgMig := postgresProvider(t, pg)
	liteMig := sqliteProvider(t, lite)

	versions := 0
	reported := map[string]bool{}
	for {
		liteRes, err := liteMig.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			break
		}
		if err != nil {
			t.Fatalf("SQLite up: %v", err)
		}
		version := liteRes.Source.Version
		pgRes, err := pgMig.UpByOne(ctx)
		if err != nil {
			t.Fatalf("PostgreSQL up to %d: %v", version, err)
		}
		if pgRes.Source.Version != version {
			t.Fatalf("PostgreSQL applied version %d where SQLite applied %d", pgRes.Source.Version, version)
		}
		versions++
		// A difference is reported once, at the version that made it.
		for _, d := range compareSchemas("SQLite", withExplicitIDs(readSQLiteSchema(t, lite)), "PostgreSQL", readPostgresSchema(t, pg)) {
			if !reported[d] {
				reported[d] = true
				t.Errorf("after version %d (postgres/%s): %s", version, path.Base(pgRes.Source.Path), d)
			}
		}
	}
	if _, err := pgMig.UpByOne(ctx); !errors.Is(err, goose.ErrNoNextVersion) {
		t.Errorf("PostgreSQL has a version SQLite does not: %v", err)
	}
	if versions == 0 {
		t.Fatal("no migration applied")
	}

	t.Run("every integer column on PostgreSQL is a bigint", func(t *testing.T) {
		rows, err := pg.QueryContext(ctx, `
			select table_name, column_name, data_type from information_schema.columns
			where table_schema = current_schema() and table_name <> 'goose_db_version'
				and data_type in ('integer', 'smallint')
			order by table_name, column_name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var table, column, typ string
			if err := rows.Scan(&table, &column, &typ); err != nil {
				t.Fatal(err)
			}
			t.Errorf("%s.%s is %s: Telegram ids pass 2^31 and the code scans int64, so it is a bigint", table, column, typ)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("every text column on PostgreSQL orders bytes as SQLite does (collation C), whatever the database's locale", func(t *testing.T) {
		rows, err := pg.QueryContext(ctx, `
			select table_name, column_name, coalesce(collation_name, '(the database default)') from information_schema.columns
			where table_schema = current_schema() and table_name <> 'goose_db_version'
				and data_type = 'text' and coalesce(collation_name, '') <> 'C'
			order by table_name, column_name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var table, column, coll string
			if err := rows.Scan(&table, &column, &coll); err != nil {
				t.Fatal(err)
			}
			t.Errorf("%s.%s collates by %s: keys and times are compared and sorted as bytes, so it is collate \"C\"", table, column, coll)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("every listed explicit id is still a rowid column on SQLite", func(t *testing.T) {
		final := readSQLiteSchema(t, lite)
		for _, key := range slices.Sorted(maps.Keys(explicitIDs)) {
			table, column, _ := strings.Cut(key, ".")
			c, ok := final[table].column(column)
			if !ok || !c.Assigned {
				t.Errorf("%s is no longer a rowid column on SQLite: delete its entry in explicitIDs", key)
			}
		}
	})
}

// Every Down section on PostgreSQL is valid and undoes its Up exactly: down
// one version at a time, the schema is the one the way up saw at the version
// before, down to nothing; and up again gives the same schema.
func TestPostgresMigrationsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg := postgresDB(t)
	mig := postgresProvider(t, pg)

	versions := []int64{0}
	seen := map[int64]schema{0: readPostgresSchema(t, pg)}
	for {
		res, err := mig.UpByOne(ctx)
		if errors.Is(err, goose.ErrNoNextVersion) {
			break
		}
		if err != nil {
			t.Fatalf("up: %v", err)
		}
		versions = append(versions, res.Source.Version)
		seen[res.Source.Version] = readPostgresSchema(t, pg)
	}
	latest := versions[len(versions)-1]
	if len(seen[0]) != 0 {
		t.Fatalf("the fresh database already has tables: %v", slices.Sorted(maps.Keys(seen[0])))
	}
	reported := map[string]bool{}
	for i := len(versions) - 1; i > 0; i-- {
		v, before := versions[i], versions[i-1]
		res, err := mig.Down(ctx)
		if err != nil {
			t.Fatalf("down from %d: %v", v, err)
		}
		if res.Source.Version != v {
			t.Fatalf("down undid version %d, want %d", res.Source.Version, v)
		}
		// A difference is reported once, at the Down that left it.
		for _, d := range compareSchemas("the way up", seen[before], "the way down", readPostgresSchema(t, pg)) {
			if !reported[d] {
				reported[d] = true
				t.Errorf("down of version %d (postgres/%s), compared with version %d: %s", v, path.Base(res.Source.Path), before, d)
			}
		}
	}
	var functions int
	if err := pg.QueryRowContext(ctx, `
		select count(*) from pg_proc p join pg_namespace n on n.oid = p.pronamespace
		where n.nspname = current_schema()`).Scan(&functions); err != nil {
		t.Fatal(err)
	}
	if functions != 0 {
		t.Errorf("%d functions remain after down to 0", functions)
	}
	if _, err := mig.Up(ctx); err != nil {
		t.Fatalf("up again: %v", err)
	}
	for _, d := range compareSchemas("first up", seen[latest], "second up", readPostgresSchema(t, pg)) {
		t.Errorf("up after down: %s", d)
	}
}

// The defaults goqite relies on write the same layout on both backends: an
// id of "m_" and 32 hex digits, and times in goqite's millisecond UTC
// layout, which the update trigger rewrites.
func TestPostgresGoqiteDefaultsMatchSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg := postgresDB(t)
	lite := sqliteDB(t)
	if _, err := postgresProvider(t, pg).UpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := sqliteProvider(t, lite).UpTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	idLayout := regexp.MustCompile(`^m_[0-9a-f]{32}$`)
	const goqiteLayout = "2006-01-02T15:04:05.000Z"
	for _, b := range []struct {
		name string
		db   *sql.DB
	}{{"SQLite", lite}, {"PostgreSQL", pg}} {
		t.Run(b.name+" writes the layout", func(t *testing.T) {
			start := time.Now().UTC().Add(-time.Minute)
			var id, created, updated, timeout string
			if err := b.db.QueryRowContext(ctx, `insert into goqite (queue, body) values ('q', $1) returning id, created, updated, timeout`,
				[]byte("x")).Scan(&id, &created, &updated, &timeout); err != nil {
				t.Fatal(err)
			}
			if !idLayout.MatchString(id) {
				t.Errorf("id %q, want m_ and 32 lower-case hex digits", id)
			}
			for name, v := range map[string]string{"created": created, "updated": updated, "timeout": timeout} {
				at, err := time.Parse(goqiteLayout, v)
				if err != nil || at.Format(goqiteLayout) != v || at.Before(start) || at.After(time.Now().Add(time.Minute)) {
					t.Errorf("%s %q is not the time now in the layout %s (%v)", name, v, goqiteLayout, err)
				}
			}
			if _, err := b.db.ExecContext(ctx, `update goqite set updated = '0000', received = 1 where id = $1`, id); err != nil {
				t.Fatal(err)
			}
			var after string
			if err := b.db.QueryRowContext(ctx, `select updated from goqite where id = $1`, id).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if at, err := time.Parse(goqiteLayout, after); err != nil || at.Before(start) {
				t.Errorf("updated after an update is %q, want the time now (the trigger did not run)", after)
			}
		})
	}
}

// Migration 00011 moves bot_outgoing's records into the queue's tables; the
// PostgreSQL translation of that move writes the rows SQLite's writes. (No
// PostgreSQL database predates 00011, so in service the move finds nothing;
// this proves the translated statements are still right.)
func TestPostgresBotDMMoveMatchesSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pg := postgresDB(t)
	lite := sqliteDB(t)
	pgMig, liteMig := postgresProvider(t, pg), sqliteProvider(t, lite)
	if _, err := pgMig.UpTo(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := liteMig.UpTo(ctx, 10); err != nil {
		t.Fatal(err)
	}
	const insert = `insert into bot_outgoing (dedup_key, method, chat_id, order_key, params, fallback, status, phase,
		attempts, next_attempt_at, last_error, telegram_message_id, created_at, updated_at, done_at)
		values ($1, 'sendMessage', $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`
	const past, now = "2026-01-02T10:00:00.123456Z", "2026-01-02T10:10:00.654321Z"
	records := [][]any{
		{"event:1:prompt", "9001", "chat:9001", `{"text":"first to 9001"}`, nil, "pending", "telegram", 0, past, nil, nil, past, past, nil},
		{"event:2:prompt", "9001", "chat:9001", `{"text":"second to 9001","reply_markup":{"inline_keyboard":[]}}`, nil, "pending", "telegram", 0, past, nil, nil, past, past, nil},
		{"event:3:prompt", "9002", "chat:9002", `{"text":"was in hand for 9002"}`, nil, "sending", "telegram", 2, now, nil, nil, past, now, nil},
		{"event:4:prompt", "9003", "chat:9003", `{"text":"failed for 9003"}`, nil, "failed", "telegram", 7, past, "telegram 400: Bad Request: chat not found", nil, past, now, nil},
		{"event:5:prompt", "9004", "chat:9004", `{"text":"sent to 9004"}`, nil, "sent", "telegram", 1, past, nil, 77, past, now, now},
		{"event:6:prompt", "9005", "chat:9005", `{"text":"telegram text for 9005"}`, `{"uid":5,"kind":"prompt","text":"web text for 9005"}`, "notified", "fallback", 3, past, nil, nil, past, now, nil},
		{"event:7:new_partner", "", "uid:12", `{"text":"unused"}`, `{"uid":12,"kind":"new_partner","text":"web only for Вера"}`, "pending", "fallback", 0, past, nil, nil, past, past, nil},
	}
	for _, db := range []*sql.DB{lite, pg} {
		for _, r := range records {
			if _, err := db.ExecContext(ctx, insert, r...); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := pgMig.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	if _, err := liteMig.UpTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		what, query string
		want        int
	}{
		{"queue_order", `select seq, queue, order_key, message_id, parked, not_before from queue_order order by seq`, 4},
		{"goqite", `select id, created, queue, body, timeout, received, priority from goqite order by id`, 4},
		{"queue_keys", `select queue, key, message_id, created_at from queue_keys order by key`, 5},
		{"queue_dead", `select id, queue, grp, partition_id, log_offset, key, order_key, seq, priority, body,
			attempts, last_error, created_at, first_failed_at, dead_at from queue_dead order by id`, 1},
		{"bot_deliveries", `select dm_key, method, chat_id, text, outcome, telegram_message_id, attempts, delivered_at
			from bot_deliveries order by dm_key`, 2},
	} {
		liteRows, pgRows := queryRows(t, lite, q.query), queryRows(t, pg, q.query)
		if len(liteRows) != q.want {
			t.Errorf("%s: SQLite wrote %d rows, want %d", q.what, len(liteRows), q.want)
		}
		if !slices.Equal(liteRows, pgRows) {
			t.Errorf("%s differs:\n  SQLite:     %q\n  PostgreSQL: %q", q.what, liteRows, pgRows)
		}
	}
}

// queryRows runs a query and renders each row as one string, its values
// separated by " | " and null as NULL; a value that is a JSON object is
// rendered re-encoded (keys sorted, no spaces), so bodies compare by what
// they hold, not by their spelling.
func queryRows(t *testing.T, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(cols))
		for i, v := range vals {
			parts[i] = "NULL"
			if v.Valid {
				parts[i] = v.String
				var obj map[string]any
				if strings.HasPrefix(v.String, "{") && json.Unmarshal([]byte(v.String), &obj) == nil {
					b, err := json.Marshal(obj)
					if err != nil {
						t.Fatal(err)
					}
					parts[i] = string(b)
				}
			}
		}
		out = append(out, strings.Join(parts, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The comparison names each kind of difference it is there to catch, on
// the real SQLite schema against a copy with one thing changed.
func TestCompareSchemasNamesEachDifference(t *testing.T) {
	t.Parallel()
	lite := sqliteDB(t)
	if _, err := sqliteProvider(t, lite).Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	base := readSQLiteSchema(t, lite)
	if diffs := compareSchemas("a", base, "b", readSQLiteSchema(t, lite)); len(diffs) != 0 {
		t.Fatalf("a schema differs from itself: %v", diffs)
	}
	for _, c := range []struct {
		name   string
		change func(s schema)
		want   string
	}{
		{"a missing table", func(s schema) { delete(s, "queue_keys") }, "table queue_keys only in a"},
		{"a missing column", func(s schema) {
			tb := s["omni_inbound_events"]
			tb.Columns = slices.DeleteFunc(tb.Columns, func(c column) bool { return c.Name == "reason" })
			s["omni_inbound_events"] = tb
		}, "table omni_inbound_events: column reason only in a"},
		{"a wrong nullability", func(s schema) { s["users"].Columns[1].NotNull = false }, "table users: column link: a text not null, b text null"},
		{"a wrong type class", func(s schema) { s["goqite"].Columns[4].Type = "text" }, "table goqite: column body: a bytes not null, b text not null"},
		{"a missing default", func(s schema) { s["goqite"].Columns[1].Default = false }, "table goqite: column created: a text not null default, b text not null"},
		{"an id not assigned", func(s schema) { s["users"].Columns[0].Assigned = false }, "table users: column uid: a integer not null assigned, b integer not null"},
		{"a missing index", func(s schema) { delete(s["bot_event_outbox"].Indexes, "idx_bot_event_outbox_uid") }, "table bot_event_outbox: index idx_bot_event_outbox_uid only in a"},
		{"an index on other columns", func(s schema) {
			s["goqite"].Indexes["goqite_queue_priority_created_idx"] = index{Columns: []string{"queue", "priority", "created"}}
		}, "table goqite: index goqite_queue_priority_created_idx: a (queue, priority desc, created), b (queue, priority, created)"},
		{"an index not partial", func(s schema) {
			s["bot_funnel"].Indexes["bot_funnel_left_leader"] = index{Columns: []string{"left_leader_at"}}
		}, "table bot_funnel: index bot_funnel_left_leader: a (left_leader_at) partial, b (left_leader_at)"},
		{"an index not unique", func(s schema) {
			s["referral_links"].Indexes["ux_referral_links_url_active"] = index{Columns: []string{"url"}, Partial: true}
		}, "table referral_links: index ux_referral_links_url_active: a unique (url) partial, b (url) partial"},
		{"a missing unique constraint", func(s schema) {
			tb := s["queue_order"]
			tb.Uniques = nil
			s["queue_order"] = tb
		}, "table queue_order: unique (message_id) only in a"},
		{"another primary key", func(s schema) {
			tb := s["queue_keys"]
			tb.PrimaryKey = []string{"queue"}
			s["queue_keys"] = tb
		}, "table queue_keys: primary key: a (queue, key), b (queue)"},
		{"a missing foreign key", func(s schema) {
			tb := s["queue_groups"]
			tb.ForeignKeys = nil
			s["queue_groups"] = tb
		}, "table queue_groups: foreign key (topic) references queue_topics (name) on delete cascade on update no action only in a"},
		{"a missing check", func(s schema) {
			tb := s["omni_rules"]
			tb.Checks--
			s["omni_rules"] = tb
		}, "table omni_rules: checks: a 1, b 0"},
		{"a missing trigger", func(s schema) {
			tb := s["goqite"]
			tb.Triggers = nil
			s["goqite"] = tb
		}, "table goqite: trigger goqite_updated_timestamp only in a"},
	} {
		t.Run("it names "+c.name, func(t *testing.T) {
			t.Parallel()
			changed := clone(base)
			c.change(changed)
			diffs := compareSchemas("a", base, "b", changed)
			if !slices.Contains(diffs, c.want) {
				t.Errorf("differences %q, want one to be %q", diffs, c.want)
			}
		})
	}
}

// clone copies s deeply, so a change to the copy leaves s as it was.
func clone(s schema) schema {
	out := schema{}
	for name, tb := range s {
		tb.Columns = slices.Clone(tb.Columns)
		tb.PrimaryKey = slices.Clone(tb.PrimaryKey)
		tb.Uniques = slices.Clone(tb.Uniques)
		tb.ForeignKeys = slices.Clone(tb.ForeignKeys)
		tb.Triggers = slices.Clone(tb.Triggers)
		indexes := map[string]index{}
		for n, ix := range tb.Indexes {
			ix.Columns = slices.Clone(ix.Columns)
			indexes[n] = ix
		}
		tb.Indexes = indexes
		out[name] = tb
	}
	return out
}

// schema is a database's tables by name, each reduced to what the two
// backends must agree on.
type schema map[string]table

type table struct {
	Columns     []column         // in declaration order
	PrimaryKey  []string         // in key order
	Uniques     []string         // unique constraints (not indexes), as "(a, b)", sorted
	ForeignKeys []string         // as "(a) references t (b) on delete … on update …", sorted
	Checks      int              // check constraints
	Triggers    []string         // sorted
	Indexes     map[string]index // the indexes created with create index, by name
}

func (t table) column(name string) (column, bool) {
	i := slices.IndexFunc(t.Columns, func(c column) bool { return c.Name == name })
	if i < 0 {
		return column{}, false
	}
	return t.Columns[i], true
}

type column struct {
	Name string
	// Type is the class of the declared type: text, integer, bytes or real.
	Type    string
	NotNull bool
	Default bool
	// Assigned: the database assigns the value when an insert leaves it out
	// (SQLite: the rowid; PostgreSQL: an identity).
	Assigned bool
}

func (c column) String() string {
	s := c.Type
	if c.NotNull {
		s += " not null"
	} else {
		s += " null"
	}
	if c.Default {
		s += " default"
	}
	if c.Assigned {
		s += " assigned"
	}
	return s
}

type index struct {
	Unique  bool
	Columns []string // in key order, "name desc" for a descending key
	Partial bool
}

func (i index) String() string {
	s := "(" + strings.Join(i.Columns, ", ") + ")"
	if i.Unique {
		s = "unique " + s
	}
	if i.Partial {
		s += " partial"
	}
	return s
}

// compareSchemas lists every difference between schema a and schema b, each
// a sentence naming the table and what differs; aName and bName say which
// is which.
func compareSchemas(aName string, a schema, bName string, b schema) []string {
	var diffs []string
	add := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
	onlyIn := func(prefix, what string, as, bs []string) {
		for _, x := range minus(as, bs) {
			add("%s%s %s only in %s", prefix, what, x, aName)
		}
		for _, x := range minus(bs, as) {
			add("%s%s %s only in %s", prefix, what, x, bName)
		}
	}
	names := func(cs []column) []string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = c.Name
		}
		return out
	}
	onlyIn("", "table", slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b)))
	for _, name := range slices.Sorted(maps.Keys(a)) {
		ta, tb := a[name], b[name]
		if _, ok := b[name]; !ok {
			continue
		}
		p := "table " + name + ": "
		onlyIn(p, "column", names(ta.Columns), names(tb.Columns))
		for _, ca := range ta.Columns {
			if cb, ok := tb.column(ca.Name); ok && ca != cb {
				add("%scolumn %s: %s %s, %s %s", p, ca.Name, aName, ca, bName, cb)
			}
		}
		if an, bn := names(ta.Columns), names(tb.Columns); !slices.Equal(an, bn) && len(minus(an, bn)) == 0 && len(minus(bn, an)) == 0 {
			add("%scolumn order: %s %v, %s %v", p, aName, an, bName, bn)
		}
		if !slices.Equal(ta.PrimaryKey, tb.PrimaryKey) {
			add("%sprimary key: %s (%s), %s (%s)", p, aName, strings.Join(ta.PrimaryKey, ", "), bName, strings.Join(tb.PrimaryKey, ", "))
		}
		onlyIn(p, "unique", ta.Uniques, tb.Uniques)
		onlyIn(p, "foreign key", ta.ForeignKeys, tb.ForeignKeys)
		if ta.Checks != tb.Checks {
			add("%schecks: %s %d, %s %d", p, aName, ta.Checks, bName, tb.Checks)
		}
		onlyIn(p, "trigger", ta.Triggers, tb.Triggers)
		onlyIn(p, "index", slices.Sorted(maps.Keys(ta.Indexes)), slices.Sorted(maps.Keys(tb.Indexes)))
		for _, iname := range slices.Sorted(maps.Keys(ta.Indexes)) {
			ia := ta.Indexes[iname]
			if ib, ok := tb.Indexes[iname]; ok && ia.String() != ib.String() {
				add("%sindex %s: %s %s, %s %s", p, iname, aName, ia, bName, ib)
			}
		}
	}
	return diffs
}

// minus lists the elements of a that are not in b, in a's order.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

var checkClause = regexp.MustCompile(`(?i)\bcheck\s*\(`)

// withExplicitIDs returns s with each rowid column of explicitIDs counted as
// not assigned, the way its PostgreSQL twin is declared.
func withExplicitIDs(s schema) schema {
	for key := range explicitIDs {
		name, col, _ := strings.Cut(key, ".")
		tb, ok := s[name]
		if !ok {
			continue
		}
		if i := slices.IndexFunc(tb.Columns, func(c column) bool { return c.Name == col }); i >= 0 {
			tb.Columns[i].Assigned = false
		}
	}
	return s
}

// readSQLiteSchema reads the schema of a SQLite database from its pragmas.
// A primary-key column counts as not null: PostgreSQL makes every key
// column so, and the code never stores a null key.
func readSQLiteSchema(t *testing.T, db *sql.DB) schema {
	t.Helper()
	ctx := t.Context()
	s := schema{}
	type tableSQL struct{ name, sql string }
	var tables []tableSQL
	for _, r := range queryStrings(t, db, `select name, sql from sqlite_schema
		where type = 'table' and name not like 'sqlite_%' and name <> 'goose_db_version' order by name`) {
		tables = append(tables, tableSQL{r[0], r[1]})
	}
	for _, tt := range tables {
		tb := table{Indexes: map[string]index{}, Checks: len(checkClause.FindAllString(tt.sql, -1))}
		rows, err := db.QueryContext(ctx, `select name, type, "notnull", dflt_value is not null, pk from pragma_table_info(?) order by cid`, tt.name)
		if err != nil {
			t.Fatal(err)
		}
		type pkCol struct {
			name string
			pos  int
		}
		var pks []pkCol
		for rows.Next() {
			var c column
			var declared string
			var pk int
			if err := rows.Scan(&c.Name, &declared, &c.NotNull, &c.Default, &pk); err != nil {
				t.Fatal(err)
			}
			c.Type = sqliteTypeClass(declared)
			if pk > 0 {
				c.NotNull = true
				pks = append(pks, pkCol{c.Name, pk})
				c.Assigned = strings.EqualFold(declared, "integer") // a rowid alias, if the key is this column alone
			}
			tb.Columns = append(tb.Columns, c)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(pks, func(a, b pkCol) int { return a.pos - b.pos })
		for _, pk := range pks {
			tb.PrimaryKey = append(tb.PrimaryKey, pk.name)
		}
		withoutRowid := regexp.MustCompile(`(?i)without\s+rowid`).MatchString(tt.sql)
		for i := range tb.Columns {
			if tb.Columns[i].Assigned && (len(pks) != 1 || withoutRowid) {
				tb.Columns[i].Assigned = false
			}
		}

		for _, ix := range queryStrings(t, db, `select name, "unique", origin, partial from pragma_index_list(?) order by name`, tt.name) {
			name, origin := ix[0], ix[2]
			if origin == "pk" {
				continue // the primary key, compared as PrimaryKey
			}
			var cols []string
			for _, k := range queryStrings(t, db, `select coalesce(name, ''), "desc" from pragma_index_xinfo(?) where key = 1 order by seqno`, name) {
				if k[0] == "" {
					t.Fatalf("index %s has an expression key, which this comparison does not read", name)
				}
				if k[1] == "1" {
					k[0] += " desc"
				}
				cols = append(cols, k[0])
			}
			switch origin {
			case "u":
				tb.Uniques = append(tb.Uniques, "("+strings.Join(cols, ", ")+")")
			case "c":
				tb.Indexes[name] = index{Unique: ix[1] == "1", Columns: cols, Partial: ix[3] == "1"}
			default:
				t.Fatalf("index %s has the unknown origin %q", name, origin)
			}
		}
		slices.Sort(tb.Uniques)

		fks := map[string]*[4]string{} // id → from, table, to, actions
		var ids []string
		for _, fk := range queryStrings(t, db, `select id, "table", "from", coalesce("to", ''), on_delete, on_update from pragma_foreign_key_list(?) order by id, seq`, tt.name) {
			f, ok := fks[fk[0]]
			if !ok {
				f = &[4]string{}
				fks[fk[0]] = f
				ids = append(ids, fk[0])
				f[1] = fk[1]
				f[3] = "on delete " + strings.ToLower(fk[4]) + " on update " + strings.ToLower(fk[5])
			}
			f[0] = join(f[0], fk[2])
			f[2] = join(f[2], fk[3])
		}
		for _, id := range ids {
			f := fks[id]
			tb.ForeignKeys = append(tb.ForeignKeys, fmt.Sprintf("(%s) references %s (%s) %s", f[0], f[1], f[2], f[3]))
		}
		slices.Sort(tb.ForeignKeys)

		for _, tr := range queryStrings(t, db, `select name from sqlite_schema where type = 'trigger' and tbl_name = ? order by name`, tt.name) {
			tb.Triggers = append(tb.Triggers, tr[0])
		}
		s[tt.name] = tb
	}
	return s
}

func join(list, x string) string {
	if list == "" {
		return x
	}
	return list + ", " + x
}

// sqliteTypeClass maps a column's declared SQLite type to its class.
func sqliteTypeClass(declared string) string {
	switch strings.ToLower(declared) {
	case "text":
		return "text"
	case "integer", "int":
		return "integer"
	case "blob":
		return "bytes"
	case "real":
		return "real"
	}
	return "unknown SQLite type " + declared
}

// postgresTypeClass maps information_schema.columns.data_type to its class.
func postgresTypeClass(dataType string) string {
	switch dataType {
	case "text", "character varying", "character":
		return "text"
	case "bigint", "integer", "smallint":
		return "integer"
	case "bytea":
		return "bytes"
	case "double precision", "real":
		return "real"
	}
	return "unknown PostgreSQL type " + dataType
}

// readPostgresSchema reads the schema of the current schema (public) of a
// PostgreSQL database from information_schema and the catalogs. Indexes
// that back a constraint (the primary key's *_pkey, a unique constraint's
// *_key) are read as PrimaryKey and Uniques, not as indexes.
func readPostgresSchema(t *testing.T, db *sql.DB) schema {
	t.Helper()
	s := schema{}
	for _, r := range queryStrings(t, db, `select table_name from information_schema.tables
		where table_schema = current_schema() and table_type = 'BASE TABLE' and table_name <> 'goose_db_version'`) {
		s[r[0]] = table{Indexes: map[string]index{}}
	}
	for _, r := range queryStrings(t, db, `select table_name, column_name, data_type, is_nullable, column_default is not null, is_identity
		from information_schema.columns where table_schema = current_schema() order by table_name, ordinal_position`) {
		tb, ok := s[r[0]]
		if !ok {
			continue // goose's table, or a view
		}
		tb.Columns = append(tb.Columns, column{Name: r[1], Type: postgresTypeClass(r[2]), NotNull: r[3] == "NO",
			Default: r[4] == "true", Assigned: r[5] == "YES"})
		s[r[0]] = tb
	}
	// The key columns of every index and constraint, as "a, b desc".
	const keys = `(select string_agg(a.attname || case when (ix.indoption[k.i] & 1) = 1 then ' desc' else '' end, ', ' order by k.i)
		from generate_series(0, ix.indnkeyatts - 1) as k(i)
		join pg_attribute a on a.attrelid = ix.indrelid and a.attnum = ix.indkey[k.i])`
	for _, r := range queryStrings(t, db, `
		select t.relname, i.relname, ix.indisunique, ix.indpred is not null, coalesce(c.contype::text, ''),
			`+keys+`, (select count(*) from unnest(ix.indkey) as k(attnum) where k.attnum = 0)
		from pg_index ix
		join pg_class i on i.oid = ix.indexrelid
		join pg_class t on t.oid = ix.indrelid
		join pg_namespace n on n.oid = t.relnamespace
		left join pg_constraint c on c.conindid = ix.indexrelid and c.conrelid = ix.indrelid and c.contype in ('p', 'u', 'x')
		where n.nspname = current_schema()`) {
		tb, ok := s[r[0]]
		if !ok {
			continue
		}
		if r[6] != "0" {
			t.Fatalf("index %s has an expression key, which this comparison does not read", r[1])
		}
		cols := strings.Split(r[5], ", ")
		switch r[4] {
		case "p":
			tb.PrimaryKey = cols
		case "u":
			tb.Uniques = append(tb.Uniques, "("+r[5]+")")
		case "":
			tb.Indexes[r[1]] = index{Unique: r[2] == "true", Columns: cols, Partial: r[3] == "true"}
		default:
			t.Fatalf("index %s backs a constraint of type %q, which this comparison does not read", r[1], r[4])
		}
		s[r[0]] = tb
	}
	const action = `case %s when 'a' then 'no action' when 'r' then 'restrict' when 'c' then 'cascade'
		when 'n' then 'set null' when 'd' then 'set default' end`
	for _, r := range queryStrings(t, db, `
		select t.relname, c.contype::text, c.conname,
			coalesce((select string_agg(a.attname, ', ' order by k.n) from unnest(c.conkey) with ordinality as k(attnum, n)
				join pg_attribute a on a.attrelid = c.conrelid and a.attnum = k.attnum), ''),
			coalesce(r.relname, ''),
			coalesce((select string_agg(a.attname, ', ' order by k.n) from unnest(c.confkey) with ordinality as k(attnum, n)
				join pg_attribute a on a.attrelid = c.confrelid and a.attnum = k.attnum), ''),
			coalesce(`+fmt.Sprintf(action, "c.confdeltype")+`, ''), coalesce(`+fmt.Sprintf(action, "c.confupdtype")+`, '')
		from pg_constraint c
		join pg_class t on t.oid = c.conrelid
		join pg_namespace n on n.oid = t.relnamespace
		left join pg_class r on r.oid = c.confrelid
		where n.nspname = current_schema() and c.contype in ('f', 'c')`) {
		tb, ok := s[r[0]]
		if !ok {
			continue
		}
		if r[1] == "c" {
			tb.Checks++
		} else {
			tb.ForeignKeys = append(tb.ForeignKeys, fmt.Sprintf("(%s) references %s (%s) on delete %s on update %s", r[3], r[4], r[5], r[6], r[7]))
		}
		s[r[0]] = tb
	}
	for _, r := range queryStrings(t, db, `
		select t.relname, tg.tgname from pg_trigger tg
		join pg_class t on t.oid = tg.tgrelid
		join pg_namespace n on n.oid = t.relnamespace
		where n.nspname = current_schema() and not tg.tgisinternal`) {
		if tb, ok := s[r[0]]; ok {
			tb.Triggers = append(tb.Triggers, r[1])
			s[r[0]] = tb
		}
	}
	for name, tb := range s {
		slices.Sort(tb.Uniques)
		slices.Sort(tb.ForeignKeys)
		slices.Sort(tb.Triggers)
		s[name] = tb
	}
	return s
}

// queryStrings runs a query and returns its rows, every value as text.
func queryStrings(t *testing.T, db *sql.DB, query string, args ...any) [][]string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, query)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(cols))
		for i, v := range vals {
			row[i] = v.String
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sqliteDB opens a fresh SQLite database in t.TempDir().
func sqliteDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "schema.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// postgresDB creates a database of its own on the server SWITCHYARD_TEST_DB
// names and drops it when the test ends; without the server the test is
// skipped.
func postgresDB(t *testing.T) *sql.DB {
	t.Helper()
	server := os.Getenv(testDBEnv)
	u, err := url.Parse(server)
	if server == "" || err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Skip("SWITCHYARD_TEST_DB is not a postgres:// URL: the PostgreSQL half of this test needs a server")
	}
	admin, err := sql.Open("pgx", server)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "schema_test_" + hex.EncodeToString(b)
	if _, err := admin.ExecContext(t.Context(), "create database "+name); err != nil {
		admin.Close()
		t.Fatalf("create the test database on %s: %v", u.Redacted(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, "drop database if exists "+name+" with (force)"); err != nil {
			t.Errorf("drop the test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func sqliteProvider(t *testing.T, db *sql.DB) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectSQLite3, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func postgresProvider(t *testing.T, db *sql.DB) *goose.Provider {
	t.Helper()
	fsys, err := fs.Sub(migrations.PostgresFS, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
