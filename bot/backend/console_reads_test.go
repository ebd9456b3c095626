package backend

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"switchyard/bot/contract"
	"switchyard/store"
	"switchyard/store/storetest"
)

// The reads the console makes of the outbox: the unfinished events by
// state, the events handled per minute, and the event list filtered by type
// and user in SQL.
func TestConsoleReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// deadEvent emits a registered event and fails it until it is
	// dead-lettered, the clock moved past each backoff.
	deadEvent := func(t *testing.T, o *Outbox, clock *store.ManualClock, target Target) contract.EventID {
		t.Helper()
		id, err := o.Emit(ctx, NewEvent{Type: contract.EventRegistered, Target: target, Payload: json.RawMessage(`{"leaderUid":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		for range contract.BOT_OUTBOX_MAX_ATTEMPTS {
			if _, err := o.Ack(ctx, contract.AckRequest{RetryIDs: []contract.EventID{id}}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(24 * time.Hour)
		}
		if e, err := o.GetEvent(ctx, id); err != nil || e.State != StateDead {
			t.Fatalf("event %d: %+v, %v; want dead", id, e, err)
		}
		return id
	}

	t.Run("counts the unfinished events by state", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		o := NewOutbox(OutboxOpts{DB: db})
		if c, err := o.CountUnfinished(ctx); err != nil || c != (Counts{}) {
			t.Fatalf("empty outbox: %+v, %v", c, err)
		}
		deadEvent(t, o, clock, Target{MagnetUID: 1})
		ids := emitMany(t, o, 4, Target{MagnetUID: 2})
		if _, err := o.Ack(ctx, contract.AckRequest{ProcessedIDs: ids[:1], RetryIDs: ids[1:3]}); err != nil {
			t.Fatal(err)
		}
		c, err := o.CountUnfinished(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := (Counts{Pending: 1, Retrying: 2, Dead: 1}); c != want {
			t.Fatalf("counts %+v, want %+v", c, want)
		}
	})

	t.Run("counts the events handled in each minute", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		o := NewOutbox(OutboxOpts{DB: db})
		start := clock.Now().Truncate(time.Minute).Add(time.Minute)
		clock.Set(start.Add(10 * time.Second))
		ids := emitMany(t, o, 5, Target{MagnetUID: 3})
		if _, err := o.Ack(ctx, contract.AckRequest{ProcessedIDs: ids[:2]}); err != nil {
			t.Fatal(err)
		}
		clock.Set(start.Add(time.Minute + 10*time.Second))
		if _, err := o.Ack(ctx, contract.AckRequest{ProcessedIDs: ids[2:3]}); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			from, to time.Time
			want     int64
		}{
			{start, start.Add(time.Minute), 2},
			{start.Add(time.Minute), start.Add(2 * time.Minute), 1},
			{start.Add(-time.Minute), start, 0},
			{start, time.Time{}, 3},
			{start.Add(time.Minute), time.Time{}, 1},
		} {
			n, err := o.CountHandled(ctx, tt.from, tt.to)
			if err != nil {
				t.Fatal(err)
			}
			if n != tt.want {
				t.Errorf("handled in [%s, %s): %d, want %d", tt.from.Format(time.TimeOnly), tt.to.Format(time.TimeOnly), n, tt.want)
			}
		}
	})

	t.Run("filters the event list by type and user in the query", func(t *testing.T) {
		t.Parallel()
		db, clock := storetest.NewWithClock(t)
		o := NewOutbox(OutboxOpts{DB: db})
		dead := deadEvent(t, o, clock, Target{MagnetUID: 5})
		wallet, err := o.EmitWalletConnected(ctx, Target{TelegramID: "100200"}, contract.WalletConnectedPayload{Addr: "EQabc"})
		if err != nil {
			t.Fatal(err)
		}
		partner, err := o.EmitNewPartner(ctx, Target{MagnetUID: 6}, contract.NewPartnerPayload{PartnerUID: 7, PartnerName: "P"})
		if err != nil {
			t.Fatal(err)
		}
		both, err := o.EmitNewPartner(ctx, Target{MagnetUID: 6, TelegramID: "5"}, contract.NewPartnerPayload{PartnerUID: 8, PartnerName: "Q"})
		if err != nil {
			t.Fatal(err)
		}
		// Many events of other users and types, newer than those above: a
		// filtered page must still find the rare ones.
		emitMany(t, o, 600, Target{MagnetUID: 99})
		for _, tt := range []struct {
			name string
			f    EventFilter
			want []contract.EventID
		}{
			{"by type", EventFilter{Type: contract.EventWalletConnected}, []contract.EventID{wallet}},
			{"by type and state", EventFilter{Type: contract.EventRegistered, State: StateDead}, []contract.EventID{dead}},
			{"by uid", EventFilter{MagnetUID: 6}, []contract.EventID{both, partner}},
			{"by Telegram id", EventFilter{TelegramID: "5"}, []contract.EventID{both}},
			{"by uid or Telegram id", EventFilter{MagnetUID: 5, TelegramID: "5"}, []contract.EventID{both, dead}},
			{"by type and uid", EventFilter{Type: contract.EventNewPartner, MagnetUID: 6, Limit: 1}, []contract.EventID{both}},
			{"by type and uid, the next page", EventFilter{Type: contract.EventNewPartner, MagnetUID: 6, BeforeID: both}, []contract.EventID{partner}},
			{"nothing matches", EventFilter{Type: contract.EventReactivation}, nil},
		} {
			list, err := o.ListEvents(ctx, tt.f)
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			var got []contract.EventID
			for _, e := range list {
				got = append(got, e.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			}
		}
		var inv *contract.InvalidError
		if _, err := o.ListEvents(ctx, EventFilter{Type: "no_such_type"}); !errors.As(err, &inv) {
			t.Fatalf("an unknown type: %v, want an invalid-input error", err)
		}
	})
}
