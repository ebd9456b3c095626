package onboarding

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/store"
)

// The reads the console makes of the onboarding bot: the funnel by stage
// (in any process, without the bot) and the DMs of a status across chats.
func TestConsoleReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("counts the funnel's users at each stage", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		s := NewStats(e.db)
		if c, err := s.CountByStage(ctx); err != nil || len(c) != 0 {
			t.Fatalf("an empty funnel: %v, %v", c, err)
		}
		now := store.TS(e.db.Now())
		err := e.db.Tx(ctx, func(tx *sql.Tx) error {
			for i, st := range []Stage{StageStarted, StageStarted, StageWalletConnected, StageNftActivated, StageStarted} {
				if _, err := tx.Exec(`insert into bot_funnel (telegram_id, stage, created_at, updated_at) values (?, ?, ?, ?)`,
					fmt.Sprint(7000+i), int(st), now, now); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.CountByStage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[Stage]int64{StageStarted: 3, StageWalletConnected: 1, StageNftActivated: 1}; !maps.Equal(c, want) {
			t.Fatalf("by stage %v, want %v", c, want)
		}
	})

	t.Run("lists the DMs of one status across chats, or of one chat", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		send := func(cause string, chats ...string) {
			t.Helper()
			var msgs []outgoingMessage
			for _, c := range chats {
				msgs = append(msgs, outgoingMessage{Key: "dm:" + c, Method: methodSendMessage, ChatID: contract.TelegramID(c), Params: outParams{Text: "hi " + c}})
			}
			if err := e.db.Tx(ctx, func(tx *sql.Tx) error { _, err := b.recordDMs(ctx, tx, cause, msgs); return err }); err != nil {
				t.Fatal(err)
			}
		}
		// Two DMs that fail for good, then two that wait in the queue.
		send("event:1", "11", "12")
		w := b.dms.Start(ctx, queue.WorkerOpts{Handler: func(context.Context, queue.Message) error {
			return queue.Permanent(errors.New("injected failure"))
		}})
		e.waitDB("the DMs dead-lettered", func() bool { return e.dmQueue().Dead == 2 })
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		send("event:2", "11", "13")
		if err := e.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.Exec(`insert into bot_deliveries (dm_key, method, chat_id, text, outcome, attempts, delivered_at)
				values ('event:0:dm:12', 'sendMessage', '12', 'hello', 'sent', 0, ?)`, store.TS(e.db.Now()))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		keys := func(f DMFilter) []string {
			t.Helper()
			list, err := b.ListDMs(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, d := range list {
				out = append(out, string(d.Status)+" "+d.Key)
			}
			slices.Sort(out)
			return out
		}
		for _, tt := range []struct {
			name string
			f    DMFilter
			want []string
		}{
			{"failed, every chat", DMFilter{Status: DMFailed}, []string{"failed event:1:dm:11", "failed event:1:dm:12"}},
			{"pending, every chat", DMFilter{Status: DMPending}, []string{"pending event:2:dm:11", "pending event:2:dm:13"}},
			{"sent, every chat", DMFilter{Status: DMSent}, []string{"sent event:0:dm:12"}},
			{"one chat, every status", DMFilter{ChatID: "12"}, []string{"failed event:1:dm:12", "sent event:0:dm:12"}},
			{"one chat, one status", DMFilter{ChatID: "11", Status: DMPending}, []string{"pending event:2:dm:11"}},
			{"a status nobody has", DMFilter{Status: DMNotified}, nil},
		} {
			if got := keys(tt.f); !slices.Equal(got, tt.want) {
				t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
			}
		}
		if _, err := b.ListDMs(ctx, DMFilter{Status: "lost"}); err == nil {
			t.Fatal("an unknown status is accepted")
		}
	})
}
