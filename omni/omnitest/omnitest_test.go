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

func TestThreads(t *testing.T) {
	t.Parallel()
	t.Run("seeded threads are open, newest first, each with its customer's message and the reply", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		newest := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
		omnitest.Threads(t, db, "seed-", 1_234, newest) // more than one batch, the last one short
		admin := omni.NewAdmin(omni.AdminOpts{DB: db})
		c, err := admin.Counts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if c.OpenThreads != 1_234 || c.Unread == 0 || c.Unread >= 1_234 {
			t.Fatalf("counts %+v, want 1234 open threads, some of them unread", c)
		}
		threads, err := admin.ListThreads(context.Background(), omni.ThreadFilter{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if len(threads) != 2 || threads[0].Contact.ProviderUserID != "seed-1233" || !threads[0].LastMessageAt.Equal(newest) {
			t.Fatalf("threads %+v, want seed-1233's first, last active at %v", threads, newest)
		}
		msgs, err := admin.ListMessages(context.Background(), threads[0].ID, omni.MessageFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 2 || msgs[0].Direction != omni.DirectionInbound || msgs[1].Direction != omni.DirectionOutbound {
			t.Fatalf("messages %+v, want the customer's and the reply", msgs)
		}
	})
}
