package omni

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"switchyard/store/storetest"
)

// The console's reads of the chat platform: headline counts, one thread,
// the inbox digests and the messages per minute.
func TestAdminReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, clock := storetest.NewWithClock(t)
	admin := NewAdmin(AdminOpts{DB: db})
	domain := newChatDomain(db, AutoAckRule{})
	start := db.Now()
	apply := func(body []byte) ThreadID {
		t.Helper()
		env := envelopeOf(t, body, db.Now())
		var thread ThreadID
		if err := db.Tx(ctx, func(tx *sql.Tx) error {
			res, err := domain.applyTx(ctx, tx, env)
			thread = res.Thread
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return thread
	}
	// Ann writes twice, a minute apart, and gets a reply that fails; Bob
	// writes once; Cid writes once and his thread is closed.
	ann := apply(update(1, "message", privateMessage(42, 1, "hello", t0)))
	clock.Advance(time.Minute)
	apply(update(2, "message", privateMessage(42, 2, "anyone?", t0+60)))
	reply, err := admin.Reply(ctx, ann, "yes, here")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Write.Exec(`update omni_messages set status = ?, failure_reason = 'blocked' where id = ?`, string(StatusFailed), int64(reply.ID)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	bob := apply(update(3, "message", privateMessage(43, 1, "hi", t0+120)))
	cid := apply(update(4, "message", privateMessage(44, 1, "bye", t0+120)))
	if err := admin.CloseThread(ctx, cid); err != nil {
		t.Fatal(err)
	}

	t.Run("the counts are the open threads, their unread messages and the failed deliveries", func(t *testing.T) {
		c, err := admin.Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c != (Counts{OpenThreads: 2, Unread: 1, Failed: 1}) {
			t.Fatalf("counts %+v", c)
		}
	})
	t.Run("one thread reads as the listing shows it, and an unknown one is not found", func(t *testing.T) {
		got, err := admin.Thread(ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		list, err := admin.ListThreads(ctx, ThreadFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var listed *Thread
		for i := range list {
			if list[i].ID == ann {
				listed = &list[i]
			}
		}
		if listed == nil || got.Contact != listed.Contact || got.State != listed.State || got.Unread != listed.Unread ||
			got.ChatID != listed.ChatID || !got.LastMessageAt.Equal(*listed.LastMessageAt) {
			t.Fatalf("Thread %+v, listed %+v", got, listed)
		}
		if _, err := admin.Thread(ctx, 999); !errors.Is(err, ErrThreadNotFound) {
			t.Fatalf("unknown thread: %v", err)
		}
	})
	t.Run("a digest has the thread's last message and its failed deliveries", func(t *testing.T) {
		d, err := admin.ThreadDigests(ctx, []ThreadID{ann, bob, 999})
		if err != nil {
			t.Fatal(err)
		}
		want := map[ThreadID]ThreadDigest{
			ann: {LastText: "yes, here", LastDirection: DirectionOutbound, LastKind: KindText, LastStatus: StatusFailed, Failed: 1},
			bob: {LastText: "hi", LastDirection: DirectionInbound, LastKind: KindText, LastStatus: StatusReceived},
		}
		if len(d) != len(want) || d[ann] != want[ann] || d[bob] != want[bob] {
			t.Fatalf("digests %+v, want %+v", d, want)
		}
		if d, err := admin.ThreadDigests(ctx, nil); err != nil || len(d) != 0 {
			t.Fatalf("no threads: %v %v", d, err)
		}
	})
	t.Run("messages are counted by direction and minute", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			count    func(ctx context.Context, from, to time.Time) (int64, error)
			from, to time.Duration
			want     int64
		}{
			{"inbound, all", admin.InboundBetween, 0, 0, 4},
			{"inbound, the first minute", admin.InboundBetween, 0, time.Minute, 1},
			{"inbound, from the second minute", admin.InboundBetween, time.Minute, 0, 3},
			{"outbound, the second minute", admin.OutboundBetween, time.Minute, 2 * time.Minute, 1},
			{"outbound, the third minute", admin.OutboundBetween, 2 * time.Minute, 3 * time.Minute, 0},
		} {
			var to time.Time
			if tc.to > 0 {
				to = start.Add(tc.to)
			}
			n, err := tc.count(ctx, start.Add(tc.from), to)
			if err != nil || n != tc.want {
				t.Errorf("%s: %d (%v), want %d", tc.name, n, err, tc.want)
			}
		}
	})
}
