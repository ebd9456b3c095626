package web_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/omni"
	"switchyard/retention"
	"switchyard/store/storetest"
	"switchyard/web"
)

// The Overview shows the database's size and free pages, and each
// retention rule's setting and what its last pass removed.
func TestOverviewRetention(t *testing.T) {
	t.Parallel()
	db, clock := storetest.NewWithClock(t)
	ctx := t.Context()
	ob := backend.NewOutbox(backend.OutboxOpts{DB: db})
	var ids []contract.EventID
	for uid := range contract.UID(3) {
		id, err := ob.Emit(ctx, backend.NewEvent{Type: contract.EventRegistered, Target: backend.Target{MagnetUID: uid + 1},
			Payload: json.RawMessage(`{"leaderUid":1,"phone":"+79991231234"}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := ob.Ack(ctx, contract.AckRequest{ProcessedIDs: ids}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(8 * 24 * time.Hour)
	chat := omni.NewAdmin(omni.AdminOpts{DB: db})
	rt := retention.New(retention.Opts{DB: db, Rules: []retention.Rule{
		{Name: "outbox", Option: "--retention-outbox", Keep: 7 * 24 * time.Hour,
			Parts: []retention.Part{{Table: backend.OutboxTable, Prune: ob.PruneProcessed}}},
		{Name: "chat-messages", Option: "--retention-chat-messages",
			Parts: []retention.Part{{Table: omni.MessagesTable, Prune: chat.PruneMessages}}},
	}})
	c := newConsole(t, web.Options{DB: db, Retention: rt})

	doc := c.get(t, "/admin/", http.StatusOK)
	if got := strings.TrimSpace(doc.Find(`[data-testid="retention-outbox"] td`).Eq(3).Text()); got != "not run yet" {
		t.Fatalf("before any pass the outbox rule shows %q, want not run yet", got)
	}
	if _, err := rt.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	doc = c.get(t, "/admin/", http.StatusOK)
	size := strings.TrimSpace(doc.Find(`[data-testid="database-size"]`).Text())
	if size == "" || size == "0 B" || strings.TrimSpace(doc.Find(`[data-testid="database-free"]`).Text()) == "" {
		t.Fatalf("database space = %q", strings.TrimSpace(doc.Find(`[data-testid="database-space"]`).Text()))
	}
	row := doc.Find(`[data-testid="retention-outbox"]`)
	if keep, removed := strings.TrimSpace(row.Find(`[data-testid="retention-keep"]`).Text()), strings.TrimSpace(row.Find(`[data-testid="retention-removed"]`).Text()); keep != "7d" || removed != "3" {
		t.Fatalf("outbox rule shows keep %q, removed %q; want 7d and 3", keep, removed)
	}
	if l := strings.TrimSpace(row.Find(`[data-testid="retention-longest"]`).Text()); !strings.HasSuffix(l, " ms") {
		t.Fatalf("longest batch = %q", l)
	}
	if keep := strings.TrimSpace(doc.Find(`[data-testid="retention-chat-messages"] [data-testid="retention-keep"]`).Text()); keep != "for ever" {
		t.Fatalf("chat-messages keep = %q, want for ever (off by default)", keep)
	}
}
