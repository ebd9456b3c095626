package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"switchyard/migrations"
)

// ErrNewerSchema is returned when the database was migrated by a newer binary.
var ErrNewerSchema = errors.New("store: database schema is newer than this binary")

// MigrationStatus tells where the schema stands.
type MigrationStatus struct {
	Current int64 // version applied in the database
	Latest  int64 // newest version this binary knows
}

// Pending reports whether migrations remain to apply.
func (s MigrationStatus) Pending() bool { return s.Current < s.Latest }

// migrator is goose over the dialect's set of migrations (migrations/ for
// SQLite, migrations/postgres/ for PostgreSQL: the same versions). On
// PostgreSQL it holds goose's session advisory lock while it migrates, so
// that several instances starting at once migrate once; on SQLite the
// writer's immediate transactions serialize them.
func (db *DB) migrator() (*goose.Provider, error) {
	dialect, fsys, opts := goose.DialectSQLite3, fs.FS(migrations.FS), []goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(db.log.With(slog.String("component", "migrate"))),
	}
	if db.Postgres() {
		sub, err := fs.Sub(migrations.PostgresFS, "postgres")
		if err != nil {
			return nil, err
		}
		// An instance waiting for another's migration looks again every
		// second, for up to ten minutes (goose's default: every 5 s).
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600))
		if err != nil {
			return nil, err
		}
		dialect, fsys, opts = goose.DialectPostgres, sub, append(opts, goose.WithSessionLocker(locker))
	}
	return goose.NewProvider(dialect, db.Write, fsys, opts...)
}

// Migrate applies every pending migration and returns the versions applied.
// A database written by a newer binary is refused with ErrNewerSchema.
func (db *DB) Migrate(ctx context.Context) ([]int64, error) {
	p, err := db.migrator()
	if err != nil {
		return nil, fmt.Errorf("store: migrations: %w", err)
	}
	if err := checkNotNewer(ctx, p); err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: migrate: %w", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// MigrateTo applies the pending migrations up to version, included, and
// returns the versions applied: a database as a binary of that version left
// it, for a test of the migrations after it.
func (db *DB) MigrateTo(ctx context.Context, version int64) ([]int64, error) {
	p, err := db.migrator()
	if err != nil {
		return nil, fmt.Errorf("store: migrations: %w", err)
	}
	results, err := p.UpTo(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("store: migrate to %d: %w", version, err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// MigrationStatus reads the applied and latest versions.
func (db *DB) MigrationStatus(ctx context.Context) (MigrationStatus, error) {
	p, err := db.migrator()
	if err != nil {
		return MigrationStatus{}, err
	}
	current, latest, err := p.GetVersions(ctx)
	if err != nil {
		return MigrationStatus{}, fmt.Errorf("store: migration status: %w", err)
	}
	return MigrationStatus{Current: current, Latest: latest}, nil
}

func checkNotNewer(ctx context.Context, p *goose.Provider) error {
	current, err := p.GetDBVersion(ctx)
	if err != nil {
		if errors.Is(err, goose.ErrVersionNotFound) {
			return nil // a fresh database
		}
		return fmt.Errorf("store: read schema version: %w", err)
	}
	var latest int64
	for _, s := range p.ListSources() {
		latest = max(latest, s.Version)
	}
	if current > latest {
		return fmt.Errorf("%w: it is at version %d, this binary knows up to %d; run the newer binary or restore a backup", ErrNewerSchema, current, latest)
	}
	return nil
}
