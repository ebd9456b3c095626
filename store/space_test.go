package store_test

import (
	"context"
	"database/sql"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"switchyard/store"
	"switchyard/store/storetest"
)

// churn inserts rows of about 1 KiB into space_churn and deletes them again,
// in transactions of 200 rows, as retention does to the tables that grow.
func churn(t *testing.T, db *store.DB, rows int) {
	t.Helper()
	ctx := context.Background()
	pad := strings.Repeat("x", 1000)
	for done := 0; done < rows; done += 200 {
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			for range 200 {
				if _, err := tx.ExecContext(ctx, `insert into space_churn (pad) values (?)`, pad); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		var n int64
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `delete from space_churn where id in (select id from space_churn order by id limit 500)`)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

func TestSpace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a new SQLite file is created with incremental auto-vacuum", func(t *testing.T) {
		t.Parallel()
		storetest.SQLiteOnly(t, "auto_vacuum is a mode of the SQLite file")
		db := storetest.New(t)
		s, err := db.Space(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.AutoVacuum != store.AutoVacuumIncremental {
			t.Fatalf("auto_vacuum = %q, want incremental", s.AutoVacuum)
		}
		if s.DatabaseBytes <= 0 || s.FreeBytes < 0 || s.FreeBytes > s.DatabaseBytes || s.WALBytes <= 0 {
			t.Fatalf("space = %+v: want a positive size, free pages within it, and a WAL", s)
		}
	})

	t.Run("the file levels off under churn: free pages are returned in small steps", func(t *testing.T) {
		t.Parallel()
		storetest.SQLiteOnly(t, "the file's pages and freelist are SQLite's")
		db := storetest.New(t)
		if _, err := db.Write.Exec(`create table space_churn (id integer primary key, pad text not null)`); err != nil {
			t.Fatal(err)
		}
		var sizes []int64
		for range 6 {
			churn(t, db, 2000)
			full, err := db.Space(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if full.FreeBytes < 1<<20 {
				t.Fatalf("after deleting 2 MB of rows only %d bytes are free", full.FreeBytes)
			}
			// Small steps, as the retention runner takes them.
			var freed int64
			for {
				n, err := db.ReclaimSpace(ctx, 64)
				if err != nil {
					t.Fatal(err)
				}
				if n > 64 {
					t.Fatalf("one step gave back %d pages, more than the 64 asked", n)
				}
				if n == 0 {
					break
				}
				freed += n
			}
			s, err := db.Space(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if freed == 0 || s.FreeBytes != 0 || s.DatabaseBytes >= full.DatabaseBytes {
				t.Fatalf("reclaim gave back %d pages: %+v → %+v, want every free page returned and the file smaller", freed, full, s)
			}
			sizes = append(sizes, s.DatabaseBytes)
		}
		for i, n := range sizes[1:] {
			if n > sizes[0]+sizes[0]/20 {
				t.Fatalf("size after round %d is %d bytes, beyond 5%% above the first round's %d: %v", i+2, n, sizes[0], sizes)
			}
		}
	})

	t.Run("without reclaiming, freed pages are reused and the file stops growing", func(t *testing.T) {
		t.Parallel()
		storetest.SQLiteOnly(t, "the file's pages and freelist are SQLite's")
		db := storetest.New(t)
		if _, err := db.Write.Exec(`create table space_churn (id integer primary key, pad text not null)`); err != nil {
			t.Fatal(err)
		}
		var sizes []int64
		for range 5 {
			churn(t, db, 2000)
			s, err := db.Space(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, s.DatabaseBytes)
		}
		for i, n := range sizes[1:] {
			if n > sizes[0]+sizes[0]/20 {
				t.Fatalf("size after round %d is %d bytes, beyond 5%% above the first round's %d: %v", i+2, n, sizes[0], sizes)
			}
		}
	})

	t.Run("a file made without auto-vacuum is switched by Compact, once", func(t *testing.T) {
		t.Parallel()
		storetest.SQLiteOnly(t, "auto_vacuum is a mode of the SQLite file")
		path := filepath.Join(t.TempDir(), "old.db")
		raw, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{`pragma journal_mode = wal`, `create table space_churn (id integer primary key, pad text not null)`} {
			if _, err := raw.Exec(q); err != nil {
				t.Fatal(err)
			}
		}
		raw.Close()
		db, err := store.Open(ctx, store.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		churn(t, db, 1000)
		s, err := db.Space(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.AutoVacuum != store.AutoVacuumNone || s.FreeBytes == 0 {
			t.Fatalf("an old file opened: %+v, want auto_vacuum none with free pages", s)
		}
		if n, err := db.ReclaimSpace(ctx, 1000); err != nil || n != 0 {
			t.Fatalf("ReclaimSpace on a file without auto-vacuum = %d, %v; want 0, nil", n, err)
		}
		before, after, err := db.Compact(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after.AutoVacuum != store.AutoVacuumIncremental || after.FreeBytes != 0 || after.DatabaseBytes >= before.DatabaseBytes {
			t.Fatalf("Compact: %+v → %+v, want incremental, no free pages, a smaller file", before, after)
		}
		churn(t, db, 1000)
		if n, err := db.ReclaimSpace(ctx, 1000); err != nil || n == 0 {
			t.Fatalf("ReclaimSpace after Compact = %d, %v; want pages given back", n, err)
		}
	})

	t.Run("PostgreSQL reports its size, no WAL file, and leaves free space to autovacuum", func(t *testing.T) {
		t.Parallel()
		storetest.PostgresOnly(t, "pg_database_size and autovacuum are PostgreSQL's")
		db := storetest.New(t)
		s, err := db.Space(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.DatabaseBytes <= 0 || s.WALBytes != 0 || s.FreeBytes < 0 {
			t.Fatalf("space = %+v", s)
		}
		if n, err := db.ReclaimSpace(ctx, 100); err != nil || n != 0 {
			t.Fatalf("ReclaimSpace = %d, %v; want 0, nil", n, err)
		}
		if _, _, err := db.Compact(ctx); !errors.Is(err, store.ErrNotOnPostgres) {
			t.Fatalf("Compact = %v, want ErrNotOnPostgres", err)
		}
	})
}

// TestSpaceDisk: Space measures the file system that holds the SQLite file,
// the room the file, its WAL and a compact's copy grow into, as df sees it.
func TestSpaceDisk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	s, err := db.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if db.Postgres() {
		if s.DiskBytes != 0 || s.DiskAvailableBytes != 0 {
			t.Fatalf("on PostgreSQL the server's disk is out of sight, but Space says %+v", s)
		}
		return
	}
	df, err := exec.LookPath("df")
	if err != nil || (runtime.GOOS != "linux" && runtime.GOOS != "darwin") {
		t.Skip("df (coreutils) on Linux is the reference here")
	}
	out, err := exec.Command(df, "-P", "-k", filepath.Dir(db.Path())).Output()
	if err != nil {
		t.Skipf("df: %v", err)
	}
	// Filesystem 1024-blocks Used Available Capacity Mounted on
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	size, err1 := strconv.ParseInt(f[1], 10, 64)
	avail, err2 := strconv.ParseInt(f[3], 10, 64)
	if len(f) < 4 || err1 != nil || err2 != nil {
		t.Fatalf("df said %q", out)
	}
	size, avail = size*1024, avail*1024
	if s.DiskBytes < size-1024 || s.DiskBytes > size+1024 {
		t.Errorf("file system size %d bytes, df says %d", s.DiskBytes, size)
	}
	// Other tests write to the same file system meanwhile.
	if d := s.DiskAvailableBytes - avail; d < -256<<20 || d > 256<<20 {
		t.Errorf("available %d bytes, df says %d", s.DiskAvailableBytes, avail)
	}
	if s.DiskAvailableBytes <= 0 || s.DiskAvailableBytes > s.DiskBytes {
		t.Errorf("available %d of %d bytes", s.DiskAvailableBytes, s.DiskBytes)
	}
}
