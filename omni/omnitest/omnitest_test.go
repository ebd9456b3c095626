package omnitest_test

import (
	"context"
	"testing"
	"time"

	"switchyard/omni"
	"switchyard/omni/omnitest"
	"switchyard/store/storetest"
)

func TestThread(t *testing.T) {
	t.Parallel()
	t.Run("a seeded thread holds its messages in the order given, as the admin API reads them", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		at := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
		thread := omnitest.Thread(t, db,
			omnitest.Message{Direction: omni.DirectionInbound, At: at},
			omnitest.Message{Direction: omni.DirectionOutbound, At: at.Add(time.Minute)})
		omnitest.Thread(t, db, omnitest.Message{Direction: omni.DirectionInbound, At: at})

		admin := omni.NewAdmin(omni.AdminOpts{DB: db})
		msgs, err := admin.ListMessages(context.Background(), thread, omni.MessageFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 || msgs[0].Direction != omni.DirectionInbound || msgs[0].Status != omni.StatusReceived ||
			msgs[1].Direction != omni.DirectionOutbound || msgs[1].Status != omni.StatusSent || !msgs[1].CreatedAt.Equal(at.Add(time.Minute)) {
			t.Fatalf("messages = %+v, want the inbound one received, then the outbound one sent a minute later", msgs)
		}
		threads, err := admin.ListThreads(context.Background(), omni.ThreadFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(threads) != 2 {
			t.Fatalf("%d threads, want the 2 seeded", len(threads))
		}
	})
}
