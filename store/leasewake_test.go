package store_test

import (
	"context"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
)

// TestLeaseReleaseWakesStandbys: a release in this process tells its
// standbys at once — by ReleaseLease, and by a RunExclusive whose work
// returned — so that one takes the lease without waiting for its next look.
func TestLeaseReleaseWakesStandbys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := storetest.New(t)
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}

	woken := store.LeaseReleased(db, "wake.a")
	other := store.LeaseReleased(db, "wake.b")
	if ok, err := db.AcquireLease(ctx, "wake.a", "holder", time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %t, %v", ok, err)
	}
	if closed(woken) {
		t.Fatal("woken before any release")
	}
	if err := db.ReleaseLease(ctx, "wake.a", "holder"); err != nil {
		t.Fatal(err)
	}
	if !closed(woken) {
		t.Error("ReleaseLease woke no standby")
	}
	if closed(other) {
		t.Error("a release of wake.a woke the standbys of wake.b")
	}

	woken = store.LeaseReleased(db, "wake.a")
	if err := db.RunExclusive(ctx, store.LeaseOpts{Name: "wake.a", TTL: time.Minute}, func(context.Context, store.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if !closed(woken) {
		t.Error("RunExclusive released the lease and woke no standby")
	}
}
