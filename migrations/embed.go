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
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
