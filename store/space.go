package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The space the database takes on disk, and getting back what deletes free.
//
// SQLite keeps the pages a delete frees in the file, on its freelist, and
// reuses them for later writes; with auto_vacuum=INCREMENTAL it can also
// give them back to the file system, a few at a time (ReclaimSpace), which
// is what keeps the file from growing under churn when deletes come in
// bursts. The mode must be set before the first table is created, so Open
// sets it on every connection of the writer: a new file is created with it.
// An existing file made without it keeps auto_vacuum=NONE (its freed pages
// are still reused, never returned) until one VACUUM rewrites it in the new
// mode: Compact, `switchyard vacuum`.
//
// PostgreSQL's autovacuum marks the space of deleted rows free for reuse
// within each table; the files shrink only under VACUUM FULL, which is the
// operator's to run.
//
// "Full", for a SQLite file, is its file system running out: the file, its
// WAL between checkpoints, and the copy a compact or a backup writes all
// grow into the space left on the file system that holds it, and SQLite
// answers SQLITE_FULL when a write finds none. Space measures that file
// system (what an unprivileged process may still write, and its size), so
// an alert can fire before writes fail. A PostgreSQL database's files are on
// the server, out of this process's sight: watch that host's disk there.

// Metrics of the database's space, set by every Space call.
var (
	metricDatabaseBytes = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_store_database_bytes",
		Help: "Size of the database: the SQLite file's pages, or pg_database_size on PostgreSQL.",
	})
	metricFreeBytes = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_store_free_bytes",
		Help: "Space inside the database free for reuse: the SQLite freelist, or on PostgreSQL an estimate of the dead rows' share of the tables.",
	})
	metricWALBytes = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_store_wal_bytes",
		Help: "Size of the SQLite write-ahead log file (0 on PostgreSQL).",
	})
	metricDiskAvailable = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_store_filesystem_available_bytes",
		Help: "Space an unprivileged process may still write on the file system of the SQLite file, what the file, its WAL and a compact or backup copy grow into (0 on PostgreSQL).",
	})
	metricDiskSize = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_store_filesystem_size_bytes",
		Help: "Size of the file system of the SQLite file (0 on PostgreSQL).",
	})
)

// AutoVacuum is SQLite's auto_vacuum mode of the file.
type AutoVacuum string

// SQLite's auto_vacuum modes (PRAGMA auto_vacuum answers 0, 1 or 2).
const (
	AutoVacuumNone        AutoVacuum = "none"
	AutoVacuumFull        AutoVacuum = "full"
	AutoVacuumIncremental AutoVacuum = "incremental"
)

// Space is the database's size on disk.
type Space struct {
	// DatabaseBytes is the whole database: page_count × page_size of the
	// SQLite file (the WAL aside), or pg_database_size on PostgreSQL.
	DatabaseBytes int64
	// FreeBytes is the part of DatabaseBytes that holds no data and is
	// reused before the database grows: SQLite's freelist; on PostgreSQL an
	// estimate, the dead rows' share of each table (pg_stat_user_tables),
	// which autovacuum makes reusable.
	FreeBytes int64
	// WALBytes is the size of the SQLite -wal file; 0 on PostgreSQL.
	WALBytes int64
	// AutoVacuum is the SQLite file's mode; empty on PostgreSQL.
	AutoVacuum AutoVacuum
	// DiskAvailableBytes is the space left to an unprivileged process on the
	// file system that holds the SQLite file (the blocks reserved for root
	// not counted), DiskBytes that file system's size. Both are 0 on
	// PostgreSQL, and on a platform this build cannot ask (not Linux or
	// macOS).
	DiskAvailableBytes, DiskBytes int64
}

// Space measures the database (read pool) and the file system that holds a
// SQLite file, and sets the switchyard_store_*_bytes gauges to what it
// found.
func (db *DB) Space(ctx context.Context) (Space, error) {
	var (
		s   Space
		err error
	)
	if db.Postgres() {
		s, err = db.postgresSpace(ctx)
	} else {
		s, err = db.sqliteSpace(ctx)
	}
	if err != nil {
		return Space{}, fmt.Errorf("store: measure the database: %w", err)
	}
	metricDatabaseBytes.Set(float64(s.DatabaseBytes))
	metricFreeBytes.Set(float64(s.FreeBytes))
	metricWALBytes.Set(float64(s.WALBytes))
	metricDiskAvailable.Set(float64(s.DiskAvailableBytes))
	metricDiskSize.Set(float64(s.DiskBytes))
	return s, nil
}

func (db *DB) sqliteSpace(ctx context.Context) (Space, error) {
	var (
		pageSize, pages, free, mode int64
	)
	if err := db.Read.QueryRowContext(ctx,
		`select page_size, page_count, freelist_count, auto_vacuum
		 from pragma_page_size(), pragma_page_count(), pragma_freelist_count(), pragma_auto_vacuum()`).
		Scan(&pageSize, &pages, &free, &mode); err != nil {
		return Space{}, err
	}
	s := Space{DatabaseBytes: pageSize * pages, FreeBytes: pageSize * free, AutoVacuum: autoVacuumMode(mode)}
	st, err := os.Stat(db.path + "-wal")
	switch {
	case err == nil:
		s.WALBytes = st.Size()
	case !errors.Is(err, fs.ErrNotExist):
		return Space{}, err
	}
	avail, size, err := diskSpace(filepath.Dir(db.path))
	switch {
	case err == nil:
		s.DiskAvailableBytes, s.DiskBytes = avail, size
	case !errors.Is(err, errors.ErrUnsupported):
		return Space{}, fmt.Errorf("file system of %s: %w", filepath.Dir(db.path), err)
	}
	return s, nil
}

func autoVacuumMode(n int64) AutoVacuum {
	switch n {
	case 1:
		return AutoVacuumFull
	case 2:
		return AutoVacuumIncremental
	}
	return AutoVacuumNone
}

// postgresSpaceQuery estimates the free space of each table as its dead
// rows' share of its size: what autovacuum hands back to the table's free
// space map for reuse.
const postgresSpaceQuery = `
	select pg_database_size(current_database()),
		cast(coalesce(sum(case when n_live_tup + n_dead_tup > 0
			then pg_table_size(relid) * n_dead_tup / (n_live_tup + n_dead_tup) else 0 end), 0) as bigint)
	from pg_stat_user_tables`

func (db *DB) postgresSpace(ctx context.Context) (Space, error) {
	var s Space
	err := db.Read.QueryRowContext(ctx, postgresSpaceQuery).Scan(&s.DatabaseBytes, &s.FreeBytes)
	return s, err
}

// ReclaimSpace gives back to the file system at most pages free pages of
// the SQLite file (PRAGMA incremental_vacuum), in one short write
// transaction, and returns how many it gave back. It does nothing on a file
// whose auto_vacuum is not incremental (see Compact), nor on PostgreSQL,
// whose autovacuum makes the space reusable by itself.
func (db *DB) ReclaimSpace(ctx context.Context, pages int) (int64, error) {
	if db.Postgres() || pages <= 0 {
		return 0, nil
	}
	var freed int64
	err := db.Tx(ctx, func(tx *sql.Tx) error {
		var mode, before, after int64
		if err := tx.QueryRowContext(ctx, `select auto_vacuum, freelist_count from pragma_auto_vacuum(), pragma_freelist_count()`).
			Scan(&mode, &before); err != nil {
			return err
		}
		if autoVacuumMode(mode) != AutoVacuumIncremental || before == 0 {
			freed = 0
			return nil
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`pragma incremental_vacuum(%d)`, pages)); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `select freelist_count from pragma_freelist_count()`).Scan(&after); err != nil {
			return err
		}
		freed = before - after
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: reclaim free pages: %w", err)
	}
	return freed, nil
}

// Compact switches the SQLite file to auto_vacuum=INCREMENTAL and rewrites
// it with one VACUUM, which also returns every free page. A file made by
// this version's Open is already incremental and needs it only to shrink
// at once; a file made before needs it once for ReclaimSpace to work. The
// VACUUM holds the write lock for as long as it takes to copy the file
// (other writers wait, up to their busy timeout), and needs as much free
// disk space as the file's size, briefly. It refuses PostgreSQL
// (ErrNotOnPostgres): run VACUUM there, as the server's documentation says.
func (db *DB) Compact(ctx context.Context) (before, after Space, err error) {
	if db.Postgres() {
		return Space{}, Space{}, fmt.Errorf("store: compact: %w", ErrNotOnPostgres)
	}
	if before, err = db.Space(ctx); err != nil {
		return Space{}, Space{}, err
	}
	// The writer is one connection; these run on it between two commits.
	for _, q := range []string{`pragma auto_vacuum = incremental`, `vacuum`, `pragma wal_checkpoint(truncate)`} {
		if _, err := db.Write.ExecContext(ctx, q); err != nil {
			return before, Space{}, fmt.Errorf("store: compact: %s: %w", q, err)
		}
	}
	after, err = db.Space(ctx)
	return before, after, err
}
