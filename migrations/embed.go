// Package migrations holds Switchyard's numbered SQL migrations, embedded in
// the binary and applied at start by store.Migrate (goose).
//
// Files are named NNNNN_what.sql; each subsystem owns its own files:
//
//	00001 goqite's schema (maragu.dev/goqite v0.4.0)
//	00002 store: settings, leases, heartbeat
//	00003 queue: idempotency keys, dead letters, topics
//	00004 bot: the backend's outbox and domain
//	00005 bot: the onboarding bot's own tables
//	00006 referral
//	00007 omni
//	00008 indexes the console's live counts use
//	00009 adminsession: the console's sessions
//	00010 omni: the reason an inbound event was ignored
//	00011 bot: the onboarding bot's calls move to the queue onboarding.dm
//	00012 bot: indexes of the outbox's operator filters
//	00013 indexes of the retention runner's prunes
//	00015 bot: the trace context of outbox rows, updates and deliveries
//	00016 queue: the trace context of messages, dead letters and records
//	00017 indexes of the console's search
//	00018 omni: the trace context of inbound updates and messages
//	00019 referral: the trace context of processed events and bonds
//	00022 rollup: the console's throughput per minute
//
// The postgres/ folder holds the same versions, file for file, for
// PostgreSQL (PostgresFS): the same tables, columns, keys and indexes, with
// bigint for every integer, bytea for blob, identities for the ids the
// database assigns, and times as the same fixed-width UTC text, so one SQL
// text runs on both backends. Every text column is collate "C", so that keys
// and times compare and sort byte by byte as on SQLite, whatever the
// database's locale. A new migration is written in both folders;
// schema_test.go checks that the two define the same schema after every
// version.
package migrations

import "embed"

// FS holds every migration file for SQLite.
//
//go:embed *.sql
var FS embed.FS

// PostgresFS holds the PostgreSQL twin of every file in FS, under
// postgres/ (same version, same name): goose applies fs.Sub(PostgresFS,
// "postgres") with goose.DialectPostgres.
//
//go:embed postgres/*.sql
var PostgresFS embed.FS
