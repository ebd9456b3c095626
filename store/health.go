package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metricReady is the answer of the last readiness probe, as /readyz gives it.
var metricReady = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "switchyard_store_ready",
	Help: "1 when the database took writes, its file was sound and its schema current at the last readiness probe (what /readyz answers), 0 otherwise.",
})

// ErrCorrupt is returned when the database file is damaged: SQLite reported
// it malformed, or an integrity check found faults. Retrying cannot help; the
// file must be restored from a backup.
var ErrCorrupt = errors.New("store: the database file is damaged; restore it from a backup")

// ErrEmptyFile is returned by Open for an existing database file of 0 bytes:
// such a file is not a Switchyard database (a failed copy, a truncation), and
// opening it would silently start an empty one in its place.
var ErrEmptyFile = errors.New("store: the database file is empty")

// fileMode is the mode of the database file and its -wal and -shm files,
// which SQLite creates with the database file's own mode: they hold every
// generated secret, so only the owner may read them.
const fileMode fs.FileMode = 0o600

// prepareFile creates a missing database file with fileMode (so SQLite's -wal
// and -shm files get the same), refuses an existing empty one, and tightens
// the mode of files a looser umask created before.
func prepareFile(path string, log *slog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	if err == nil {
		return f.Close() // a brand-new file of this process: SQLite fills it
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("store: create %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if st.Mode().IsRegular() && st.Size() == 0 {
		return fmt.Errorf("%w: %s has 0 bytes; restore it from a backup, or remove it to start a new database", ErrEmptyFile, path)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&^fileMode == 0 {
			continue
		}
		if err := os.Chmod(p, fileMode); err != nil {
			log.Warn("database file readable by others and its mode could not be tightened", slog.String("file", p), slog.Any("err", err))
			continue
		}
		log.Info("database file mode tightened to 0600", slog.String("file", p), slog.String("was", st.Mode().Perm().String()))
	}
	return nil
}

// sawError is told every error a statement returns on either pool; the first
// corruption makes the database unready for good (see Corrupt).
func (db *DB) sawError(err error) {
	if !IsCorrupt(err) {
		return
	}
	wrapped := err
	if !errors.Is(err, ErrCorrupt) {
		wrapped = fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if db.corrupt.CompareAndSwap(nil, &wrapped) {
		db.log.Error("database file is damaged: this process stops taking work; restore the file from a backup and restart (README, Backups)",
			slog.String("db", Redact(db.path)), slog.Any("err", err))
	}
}

// Corrupt returns ErrCorrupt (wrapping SQLite's error) once any statement has
// found the database file damaged, and nil before. Workers stop taking work
// and readiness fails from then on: a damaged file does not heal, and work
// retried on it would only fail again.
func (db *DB) Corrupt() error {
	if p := db.corrupt.Load(); p != nil {
		return *p
	}
	return nil
}

// CheckIntegrity runs SQLite's integrity check on a connection of its own:
// the quick check (O(N), no index contents) or the full one. It returns nil
// when the file is sound, an error wrapping ErrCorrupt listing the first
// faults found when it is not, and ctx's error when ctx ends first (the
// check is interrupted). On PostgreSQL it refuses with ErrNotOnPostgres.
func (db *DB) CheckIntegrity(ctx context.Context, full bool) error {
	if db.Postgres() {
		return fmt.Errorf("%w: PostgreSQL guards its own pages (initdb --data-checksums); check tables and indexes with the server's pg_amcheck", ErrNotOnPostgres)
	}
	pragma := "pragma quick_check(20)"
	if full {
		pragma = "pragma integrity_check(20)"
	}
	rows, err := db.Read.QueryContext(ctx, pragma)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if IsCorrupt(err) {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return fmt.Errorf("store: integrity check: %w", err)
	}
	defer rows.Close()
	var faults []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("store: integrity check: %w", err)
		}
		if line != "ok" {
			faults = append(faults, line)
		}
	}
	if err := rows.Err(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if IsCorrupt(err) {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return fmt.Errorf("store: integrity check: %w", err)
	}
	if len(faults) > 0 {
		err := fmt.Errorf("%w: %s", ErrCorrupt, strings.Join(faults, "; "))
		db.sawError(err)
		return err
	}
	return nil
}

// readiness caches what Ready found, so that probes cost nothing under load
// and at most one heartbeat write per readyProbeEvery when idle.
type readiness struct {
	mu      sync.Mutex
	at      time.Time     // when the cached answer was found
	running chan struct{} // closed when the probe under way ends; nil when none is
	status  MigrationStatus
	err     error
}

// readyProbeEvery bounds how often Ready writes its heartbeat: a commit of
// anyone's within it is proof enough that writes go through.
const readyProbeEvery = 2 * time.Second

// Ready reports whether the database takes writes and its file is sound,
// with the schema version. Any number of callers may ask as often as they
// like: the answer is cached for readyProbeEvery; a commit of any caller
// within that time proves writability without a write; and the heartbeat
// write it falls back on runs once for all waiting callers, in the
// background on a context of its own, so a caller that hangs up can neither
// cut it short nor disturb another caller's transaction. ctx only bounds how
// long this caller waits.
//
// Each probe sets the switchyard_store_ready gauge: 1 when it found the
// database writable, sound and its schema current (no migration pending), as
// /readyz needs to answer 200; 0 otherwise.
func (db *DB) Ready(ctx context.Context) (MigrationStatus, error) {
	if err := db.Corrupt(); err != nil {
		metricReady.Set(0)
		return MigrationStatus{}, err
	}
	r := &db.ready
	r.mu.Lock()
	// A commit that failed since a good answer makes that answer stale.
	failedSince := r.err == nil && db.commits.lastFailed.Load() > r.at.UnixNano()
	if !r.at.IsZero() && time.Since(r.at) < readyProbeEvery && !failedSince {
		st, err := r.status, r.err
		r.mu.Unlock()
		return st, err
	}
	if r.running == nil {
		r.running = make(chan struct{})
		go db.runProbe()
	}
	wait := r.running
	r.mu.Unlock()
	select {
	case <-wait:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.status, r.err
	case <-ctx.Done():
		return MigrationStatus{}, ctx.Err()
	}
}

func (db *DB) runProbe() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := db.probe(ctx)
	if err == nil && !st.Pending() {
		metricReady.Set(1)
	} else {
		metricReady.Set(0)
	}
	r := &db.ready
	r.mu.Lock()
	r.status, r.err, r.at = st, err, time.Now()
	close(r.running)
	r.running = nil
	r.mu.Unlock()
}

func (db *DB) probe(ctx context.Context) (MigrationStatus, error) {
	ok, failed := db.commits.lastOK.Load(), db.commits.lastFailed.Load()
	if ok == 0 || ok < failed || time.Since(time.Unix(0, ok)) > readyProbeEvery {
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx,
				`insert into store_heartbeat (id, at) values (1, ?) on conflict (id) do update set at = excluded.at`,
				Timestamp{db.Now()})
			return err
		})
		if err != nil {
			return MigrationStatus{}, fmt.Errorf("store: database does not take writes: %w", err)
		}
	}
	if err := db.Corrupt(); err != nil {
		return MigrationStatus{}, err
	}
	return db.MigrationStatus(ctx)
}
