package store_test

import (
	"database/sql"
	"errors"
	"testing"

	"switchyard/store/storetest"
	"switchyard/telemetry"
	"switchyard/telemetry/telemetrytest"
)

// A transaction is a store.tx span under the caller's span, marked failed
// when the transaction was rolled back; one with no caller's span is none.
func TestTxIsASpan(t *testing.T) {
	rec := telemetrytest.Record(t)
	db := storetest.New(t)
	ctx, parent := telemetry.Start(t.Context(), "caller")
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := db.Tx(ctx, func(tx *sql.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Tx = %v, want boom", err)
	}
	// With no span to go under, a transaction (a worker's poll, a lease's
	// renewal) starts no trace of its own.
	if err := db.Tx(t.Context(), func(tx *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	parent.End()
	spans := rec.Named("store.tx")
	if len(spans) != 2 {
		t.Fatalf("%d store.tx spans, want 2", len(spans))
	}
	want := "sqlite"
	if db.Postgres() {
		want = "postgresql"
	}
	for _, s := range spans {
		if !telemetrytest.ChildOf(s, rec.Named("caller")[0]) {
			t.Error("store.tx is not a child of the caller's span")
		}
		if got := telemetrytest.Attr(s, "db.system.name"); got != want {
			t.Errorf("db.system.name = %q, want %q", got, want)
		}
	}
	if spans[0].Status().Code.String() == "Error" || spans[1].Status().Code.String() != "Error" {
		t.Errorf("statuses %s, %s; want the rolled-back one alone an Error", spans[0].Status().Code, spans[1].Status().Code)
	}
}
