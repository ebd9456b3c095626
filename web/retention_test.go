package web_test

import (
	"database/sql"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard/omni"
	"switchyard/retention"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/web"
)

// The Overview shows the database's size and free pages, and each
// retention rule's setting and what its last pass removed.
func TestOverviewRetention(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	chat := omni.NewAdmin(omni.AdminOpts{DB: db})
	old := store.TS(db.Now().Add(-10 * 24 * time.Hour))
	if err := db.Tx(t.Context(), func(tx *sql.Tx) error {
		for _, k := range []string{"a", "b", "c"} {
			if _, err := tx.ExecContext(t.Context(), `insert into omni_inbound_events (idempotency_key, event_type, outcome, occurred_at, received_at, applied_at)
				values (?, 'message', 'applied', ?, ?, ?)`, k, old, old, old); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rt := retention.New(retention.Opts{DB: db, Rules: []retention.Rule{
		{Name: "webhook-ledger", Option: "--retention-webhook-ledger", Keep: 7 * 24 * time.Hour,
			Parts: []retention.Part{{Table: "omni_inbound_events", Prune: chat.PruneInboundLedger}}},
		{Name: "chat-messages", Option: "--retention-chat-messages",
			Parts: []retention.Part{{Table: "omni_messages", Prune: chat.PruneMessages}}},
	}})
	c := newConsole(t, web.Options{DB: db, Retention: rt})

	doc := c.get(t, "/admin/", http.StatusOK)
	if got := strings.TrimSpace(doc.Find(`[data-testid="retention-webhook-ledger"] td`).Eq(3).Text()); got != "not run yet" {
		t.Fatalf("before any pass the ledger rule shows %q, want not run yet", got)
	}
	if _, err := rt.Pass(t.Context()); err != nil {
		t.Fatal(err)
	}
	doc = c.get(t, "/admin/", http.StatusOK)
	size := strings.TrimSpace(doc.Find(`[data-testid="database-size"]`).Text())
	if size == "" || size == "0 B" || strings.TrimSpace(doc.Find(`[data-testid="database-free"]`).Text()) == "" {
		t.Fatalf("database space = %q", strings.TrimSpace(doc.Find(`[data-testid="database-space"]`).Text()))
	}
	row := doc.Find(`[data-testid="retention-webhook-ledger"]`)
	if keep, removed := strings.TrimSpace(row.Find(`[data-testid="retention-keep"]`).Text()), strings.TrimSpace(row.Find(`[data-testid="retention-removed"]`).Text()); keep != "7d" || removed != "3" {
		t.Fatalf("ledger rule shows keep %q, removed %q; want 7d and 3", keep, removed)
	}
	if l := strings.TrimSpace(row.Find(`[data-testid="retention-longest"]`).Text()); !strings.HasSuffix(l, " ms") {
		t.Fatalf("longest batch = %q", l)
	}
	if keep := strings.TrimSpace(doc.Find(`[data-testid="retention-chat-messages"] [data-testid="retention-keep"]`).Text()); keep != "for ever" {
		t.Fatalf("chat-messages keep = %q, want for ever (off by default)", keep)
	}
}
