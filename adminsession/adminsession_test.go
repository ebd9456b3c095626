package adminsession_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"switchyard/adminsession"
	"switchyard/store"
	"switchyard/store/storetest"
)

const token = "admin-token-0123456789abcdef"

// testBundle is a database on a manual clock and its sessions under token.
type testBundle struct {
	db       *store.DB
	clock    *store.ManualClock
	sessions *adminsession.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db, clock := storetest.NewWithClock(t)
	return &testBundle{db: db, clock: clock, sessions: adminsession.New(adminsession.Opts{DB: db, Token: token})}
}

func (b *testBundle) start(t *testing.T, s *adminsession.Store) []byte {
	t.Helper()
	id, err := s.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (b *testBundle) valid(t *testing.T, s *adminsession.Store, id []byte) bool {
	t.Helper()
	ok, err := s.Valid(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func (b *testBundle) count(t *testing.T) int {
	t.Helper()
	n, err := b.sessions.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("each start makes a new random id that is valid", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, second := b.start(t, b.sessions), b.start(t, b.sessions)
		if len(first) != adminsession.IDBytes || bytes.Equal(first, second) {
			t.Fatalf("ids %x and %x", first, second)
		}
		if !b.valid(t, b.sessions, first) || !b.valid(t, b.sessions, second) {
			t.Fatal("a fresh session is not valid")
		}
		if b.valid(t, b.sessions, make([]byte, adminsession.IDBytes)) {
			t.Fatal("an id never started is valid")
		}
	})

	t.Run("the id is kept only as its SHA-256", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.start(t, b.sessions)
		var stored string
		if err := b.db.Read.QueryRow(`select id_hash from admin_sessions`).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(id)
		cookie := base64.RawURLEncoding.EncodeToString(id)
		if len(cookie) != 43 || strings.Contains(stored, cookie) || strings.Contains(stored, hex.EncodeToString(id)) ||
			stored != hex.EncodeToString(sum[:]) {
			t.Fatalf("id %x (cookie %q), stored %q", id, cookie, stored)
		}
	})

	t.Run("ending a session revokes it and no other", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ended, kept := b.start(t, b.sessions), b.start(t, b.sessions)
		if err := b.sessions.End(ctx, ended); err != nil {
			t.Fatal(err)
		}
		if b.valid(t, b.sessions, ended) || !b.valid(t, b.sessions, kept) {
			t.Fatal("End revoked the wrong session")
		}
		if err := b.sessions.End(ctx, ended); err != nil {
			t.Fatalf("ending it again: %v", err)
		}
	})

	t.Run("a session lasts its TTL, then is pruned at the next start", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if b.sessions.TTL() != 12*time.Hour {
			t.Fatalf("TTL %v, want 12 h", b.sessions.TTL())
		}
		id := b.start(t, b.sessions)
		b.clock.Advance(12*time.Hour - time.Second)
		if !b.valid(t, b.sessions, id) {
			t.Fatal("the session ended early")
		}
		b.clock.Advance(time.Second)
		if b.valid(t, b.sessions, id) {
			t.Fatal("the session outlived its TTL")
		}
		b.start(t, b.sessions)
		if n := b.count(t); n != 1 {
			t.Fatalf("%d sessions kept, want the expired one pruned", n)
		}
	})

	t.Run("a session counts only under the token it was started under", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := b.start(t, b.sessions)
		rotated := adminsession.New(adminsession.Opts{DB: b.db, Token: "rotated-admin-token-0123456789abcdef"})
		if b.valid(t, rotated, old) {
			t.Fatal("a session of the old token is valid under the new one")
		}
		fresh := b.start(t, rotated)
		if !b.valid(t, rotated, fresh) || b.valid(t, b.sessions, fresh) {
			t.Fatal("a session of the new token is valid under the wrong token")
		}
		if n := b.count(t); n != 1 {
			t.Fatalf("%d sessions kept, want the old token's pruned", n)
		}
	})

	t.Run("a failed read is an error, not a refusal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := b.start(t, b.sessions)
		if err := b.db.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.sessions.Valid(ctx, id); err == nil {
			t.Fatal("no error from a closed database")
		}
	})
}
