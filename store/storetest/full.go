package storetest

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard/store"
)

// FillUp caps the database at its size now and fills every free page, so
// that the next write needing a new page fails with SQLite's "database or
// disk is full" — what a full disk does. PRAGMA max_page_count sticks to the
// writer, which is one connection. A consumer frees pages as it deletes what
// it consumed; with keep, a goroutine takes those back every few
// milliseconds, as other writers on a full disk would. The returned function
// stops it and gives room back.
//
// On PostgreSQL the test is skipped: filling the server's disk would need a
// quota of its own (a tablespace on a small file system), which a test cannot
// make. store.IsFull knows PostgreSQL's disk_full for real deployments.
func FillUp(tb testing.TB, db *store.DB, keep bool) (makeRoom func()) {
	tb.Helper()
	SQLiteOnly(tb, "a full disk is SQLite's max_page_count here; PostgreSQL has no per-database equivalent without a tablespace on a small file system")
	if _, err := db.Write.Exec(`create table if not exists full_test_filler (b blob)`); err != nil {
		tb.Fatal(err)
	}
	var pages int64
	if err := db.Write.QueryRow(`pragma page_count`).Scan(&pages); err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Write.Exec(fmt.Sprintf(`pragma max_page_count = %d`, pages)); err != nil {
		tb.Fatal(err)
	}
	fill := func() error {
		for _, size := range []int{4000, 1000, 100} {
			for i := 0; ; i++ {
				_, err := db.Write.Exec(`insert into full_test_filler (b) values (randomblob(?))`, size)
				if store.IsFull(err) {
					break
				}
				if err != nil || i > 100_000 {
					return fmt.Errorf("filling the database: %w after %d rows", err, i)
				}
			}
		}
		return nil
	}
	if err := fill(); err != nil {
		tb.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan error, 1)
	if keep {
		go func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					done <- nil
					return
				case <-tick.C:
					if err := fill(); err != nil {
						done <- err
						return
					}
				}
			}
		}()
	} else {
		done <- nil
	}
	return func() {
		tb.Helper()
		close(stop)
		if err := <-done; err != nil {
			tb.Fatal(err)
		}
		if _, err := db.Write.Exec(`pragma max_page_count = 1073741823`); err != nil {
			tb.Fatal(err)
		}
	}
}

// CommitWatch tells whether anything was committed to a database: its
// version is a digest of every row of every table, which changes when a
// commit changed what the database holds. On SQLite, PRAGMA data_version,
// read on one pinned read connection, saves the digest while it stays put:
// it changes when another connection commits, but also when the store's
// background checkpointer copies the WAL back and the WAL restarts, which
// changes nothing the database holds. PostgreSQL has no such counter.
type CommitWatch struct {
	db   *store.DB
	conn *sql.Conn

	dataVersion int64  // SQLite: data_version when digest was taken
	digest      string // SQLite: the digest at dataVersion
}

// WatchCommits pins a read connection of db for a CommitWatch.
func WatchCommits(tb testing.TB, db *store.DB) *CommitWatch {
	tb.Helper()
	conn, err := db.Read.Conn(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return &CommitWatch{db: db, conn: conn}
}

// Version tells the database's state now; compare two readings.
func (w *CommitWatch) Version(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	if !w.db.Postgres() {
		var v int64
		if err := w.conn.QueryRowContext(ctx, `pragma data_version`).Scan(&v); err != nil {
			tb.Fatal(err)
		}
		if w.digest == "" || v != w.dataVersion {
			w.dataVersion, w.digest = v, w.sqliteDigest(tb)
		}
		return w.digest
	}
	rows, err := w.conn.QueryContext(ctx, `select tablename from pg_tables where schemaname = 'public' order by tablename`)
	if err != nil {
		tb.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			tb.Fatal(err)
		}
		tables = append(tables, t)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	var digest strings.Builder
	for _, t := range tables {
		var d string
		q := `select coalesce(md5(string_agg(r::text, ',' order by r::text)), '') from "` + t + `" as r`
		if err := w.conn.QueryRowContext(ctx, q).Scan(&d); err != nil {
			tb.Fatal(err)
		}
		digest.WriteString(t + "=" + d + ";")
	}
	return digest.String()
}

// sqliteDigest is a digest of every row of every table, each table read in
// its b-tree's order (the same for the same rows).
func (w *CommitWatch) sqliteDigest(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	var tables []string
	rows, err := w.conn.QueryContext(ctx, `select name from sqlite_schema where type = 'table' and name not like 'sqlite_%' order by name`)
	if err != nil {
		tb.Fatal(err)
	}
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			tb.Fatal(err)
		}
		tables = append(tables, t)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	h := sha256.New()
	for _, t := range tables {
		fmt.Fprintf(h, "table %q\n", t)
		rows, err := w.conn.QueryContext(ctx, `select * from "`+t+`"`)
		if err != nil {
			tb.Fatal(err)
		}
		cols, err := rows.Columns()
		if err != nil {
			tb.Fatal(err)
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				tb.Fatal(err)
			}
			for _, v := range vals {
				fmt.Fprintf(h, "%T:%q,", v, fmt.Sprint(v))
			}
			h.Write([]byte{'\n'})
		}
		if err := rows.Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
