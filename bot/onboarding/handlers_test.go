package onboarding

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"switchyard/bot/contract"
)

func TestPlanEvent(t *testing.T) {
	t.Parallel()
	uid := func(n int64) *contract.UID { u := contract.UID(n); return &u }
	bound := &Funnel{TelegramID: "6001", UID: uid(5), Stage: StageAccountLinked, BindState: BindBound}
	awaiting := &Funnel{TelegramID: "6001", UID: uid(5), Stage: StageAccountLinked, BindState: BindAwaiting}
	cases := []struct {
		name string
		ev   contract.Event
		tg   contract.TelegramID
		f    *Funnel
		// want
		stage    Stage
		prompt   bool
		dmText   string
		fallback bool
		outcome  string
	}{
		{name: "wallet_connected raises the stage to 7 and prompts an unbound user",
			ev: rawEvent(1, contract.EventWalletConnected, 5, "6001", contract.WalletConnectedPayload{Addr: "EQ1234567890abcdef"}), tg: "6001", f: awaiting,
			stage: StageWalletConnected, prompt: true, outcome: outcomeHandled},
		{name: "wallet_connected does not prompt a bound user",
			ev: rawEvent(1, contract.EventWalletConnected, 5, "6001", contract.WalletConnectedPayload{Addr: "EQ1"}), tg: "6001", f: bound,
			stage: StageWalletConnected, outcome: outcomeHandled},
		{name: "wallet_connected prompts a user the bot has never seen, with the event's uid",
			ev: rawEvent(1, contract.EventWalletConnected, 5, "6001", nil), tg: "6001",
			stage: StageWalletConnected, prompt: true, outcome: outcomeHandled},
		{name: "wallet_connected without a uid anywhere cannot prompt",
			ev: rawEvent(1, contract.EventWalletConnected, 0, "6001", nil), tg: "6001",
			stage: StageWalletConnected, outcome: outcomeHandled},
		{name: "registered raises the stage to 8 and prompts an unbound user",
			ev: rawEvent(2, contract.EventRegistered, 5, "6001", contract.RegisteredPayload{LeaderUID: uid(9)}), tg: "6001", f: awaiting,
			stage: StageRegistered, prompt: true, outcome: outcomeHandled},
		{name: "registered does not prompt a bound user",
			ev: rawEvent(2, contract.EventRegistered, 5, "6001", contract.RegisteredPayload{}), tg: "6001", f: bound,
			stage: StageRegistered, outcome: outcomeHandled},
		{name: "status_nft_activated raises the stage to 9",
			ev: rawEvent(3, contract.EventStatusNftActivated, 5, "6001", contract.StatusNftActivatedPayload{Level: contract.NftLP2}), tg: "6001", f: bound,
			stage: StageNftActivated, outcome: outcomeHandled},
		{name: "a stage event about nobody the bot knows changes nothing",
			ev: rawEvent(3, contract.EventStatusNftActivated, 5, "", nil), outcome: outcomeNoRecipient},
		{name: "new_partner is a DM to the leader naming the partner, with the web notification as fallback",
			ev: rawEvent(4, contract.EventNewPartner, 9, "5001", contract.NewPartnerPayload{PartnerUID: 5, PartnerName: "Алиса", PartnerLink: "alice"}), tg: "5001",
			dmText: "🎉 Новый партнёр в вашей структуре: Алиса!\nКод приглашения партнёра: alice", fallback: true, outcome: outcomeHandled},
		{name: "new_partner to a leader without Telegram goes to the fallback alone",
			ev:     rawEvent(4, contract.EventNewPartner, 9, "", contract.NewPartnerPayload{PartnerName: "Алиса"}),
			dmText: "🎉 Новый партнёр в вашей структуре: Алиса!", fallback: true, outcome: outcomeHandled},
		{name: "new_partner to nobody reachable does nothing",
			ev: rawEvent(4, contract.EventNewPartner, 0, "", contract.NewPartnerPayload{PartnerName: "Алиса"}), outcome: outcomeNoRecipient},
		{name: "reactivation is the «Рады видеть вас снова» DM",
			ev: rawEvent(5, contract.EventReactivation, 9, "5001", nil), tg: "5001",
			dmText: reactivationText, fallback: true, outcome: outcomeHandled},
		{name: "struct_overtake is the «Важно: изменения в вашей структуре» DM",
			ev: rawEvent(6, contract.EventStructOvertake, 0, "5001", nil), tg: "5001",
			dmText: structOvertakeText, outcome: outcomeHandled},
		{name: "an unknown event type is ignored",
			ev: rawEvent(7, contract.EventType("loyalty_points"), 9, "5001", nil), tg: "5001", outcome: outcomeIgnored},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := planEvent(tc.ev, tc.tg, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if p.Outcome != tc.outcome {
				t.Fatalf("outcome %s, want %s", p.Outcome, tc.outcome)
			}
			gotStage := StageNone
			if p.Change != nil {
				gotStage = p.Change.Stage
			}
			if gotStage != tc.stage {
				t.Fatalf("stage %s, want %s", gotStage, tc.stage)
			}
			var prompts, dms []outgoingMessage
			for _, m := range p.Messages {
				if m.Key == "prompt" {
					prompts = append(prompts, m)
				} else {
					dms = append(dms, m)
				}
			}
			if (len(prompts) == 1) != tc.prompt || len(prompts) > 1 {
				t.Fatalf("prompts %+v, want prompt=%v", prompts, tc.prompt)
			}
			if tc.prompt {
				if p.Change.Bind != BindPrompted || prompts[0].ChatID != tc.tg || len(prompts[0].Params.Buttons) != 2 ||
					prompts[0].Params.Buttons[0][0].Data != "bind:5" || prompts[0].Params.Buttons[1][0].Data != "nobind:5" {
					t.Fatalf("prompt %+v, change %+v", prompts[0], p.Change)
				}
			}
			if tc.dmText == "" {
				if len(dms) != 0 {
					t.Fatalf("unexpected messages %+v", dms)
				}
				return
			}
			if len(dms) != 1 || dms[0].Params.Text != tc.dmText || dms[0].ChatID != tc.tg {
				t.Fatalf("DM %+v, want %q to %q", dms, tc.dmText, tc.tg)
			}
			if (dms[0].Fallback != nil) != tc.fallback {
				t.Fatalf("fallback %+v, want %v", dms[0].Fallback, tc.fallback)
			}
			if tc.fallback {
				fb := dms[0].Fallback
				if fb.UID != *tc.ev.MagnetUID || fb.Text != tc.dmText || fb.DedupKey != "bot-event:"+itoa(tc.ev.ID) {
					t.Fatalf("fallback %+v", fb)
				}
			}
		})
	}

	t.Run("a payload that is not the type's JSON is an error, so the event is retried", func(t *testing.T) {
		t.Parallel()
		ev := rawEvent(8, contract.EventRegistered, 5, "6001", nil)
		ev.Payload = []byte(`{"leaderUid":"nine"}`)
		if _, err := planEvent(ev, "6001", nil); err == nil || !strings.Contains(err.Error(), "event 8") {
			t.Fatalf("err %v", err)
		}
	})
}

func TestApplyChange(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)
	uid := func(n int64) *contract.UID { u := contract.UID(n); return &u }
	changes := func(h []historyEntry) string {
		var out []string
		for _, e := range h {
			out = append(out, e.change)
		}
		return strings.Join(out, ",")
	}

	t.Run("the stage only grows", func(t *testing.T) {
		t.Parallel()
		f := Funnel{Stage: StageRegistered, BindState: BindBound}
		next, hist := applyChange(f, funnelChange{Stage: StageWalletConnected}, now)
		if next.Stage != StageRegistered || len(hist) != 0 {
			t.Fatalf("lower stage applied: %+v %v", next, changes(hist))
		}
		next, hist = applyChange(f, funnelChange{Stage: StageNftActivated}, now)
		if next.Stage != StageNftActivated || changes(hist) != "stage" || !next.UpdatedAt.Equal(now) {
			t.Fatalf("higher stage: %+v %v", next, changes(hist))
		}
	})

	t.Run("the leader the user arrived with stays the first one", func(t *testing.T) {
		t.Parallel()
		f, _ := applyChange(Funnel{BindState: BindNone}, funnelChange{Leader: &contract.Leader{UID: 7, Link: "a", Name: "A"}}, now)
		f, hist := applyChange(f, funnelChange{Leader: &contract.Leader{UID: 8, Link: "b", Name: "B"}}, now)
		if *f.LeaderUID != 7 || f.LeaderCode != "a" || len(hist) != 0 {
			t.Fatalf("%+v %v", f, changes(hist))
		}
	})

	t.Run("registering under another leader than the arrival one is recorded once", func(t *testing.T) {
		t.Parallel()
		f := Funnel{LeaderUID: uid(7), BindState: BindBound}
		next, hist := applyChange(f, funnelChange{Stage: StageRegistered, Registered: true, RegisteredLeader: uid(8)}, now)
		if next.LeftLeaderAt == nil || !next.LeftLeaderAt.Equal(now) || *next.RegisteredLeaderUID != 8 ||
			changes(hist) != "stage,registered_leader,left_leader" {
			t.Fatalf("%+v %v", next, changes(hist))
		}
		again, hist := applyChange(next, funnelChange{Stage: StageRegistered, Registered: true, RegisteredLeader: uid(8)}, now.Add(time.Hour))
		if !again.LeftLeaderAt.Equal(now) || len(hist) != 0 {
			t.Fatalf("replayed: %+v %v", again, changes(hist))
		}
	})

	t.Run("registering under the arrival leader, or with no arrival leader, is not leaving", func(t *testing.T) {
		t.Parallel()
		for _, f := range []Funnel{{LeaderUID: uid(7)}, {}} {
			next, _ := applyChange(f, funnelChange{Registered: true, RegisteredLeader: uid(7)}, now)
			if next.LeftLeaderAt != nil {
				t.Fatalf("from %+v: left at %v", f, next.LeftLeaderAt)
			}
		}
		next, _ := applyChange(Funnel{LeaderUID: uid(7)}, funnelChange{Registered: true}, now)
		if next.LeftLeaderAt == nil {
			t.Fatal("registering with no leader after arriving with one is leaving")
		}
	})

	t.Run("bound is final; other binding states follow the latest answer", func(t *testing.T) {
		t.Parallel()
		cases := []struct{ cur, want, got BindState }{
			{BindNone, BindAwaiting, BindAwaiting},
			{BindAwaiting, BindPrompted, BindPrompted},
			{BindPrompted, BindDeclined, BindDeclined},
			{BindDeclined, BindPrompted, BindPrompted},
			{BindPrompted, BindBound, BindBound},
			{BindBound, BindPrompted, BindBound},
			{BindBound, BindDeclined, BindBound},
			{BindAwaiting, "", BindAwaiting},
		}
		for _, c := range cases {
			if got := nextBind(c.cur, c.want); got != c.got {
				t.Fatalf("%s then %q: %s, want %s", c.cur, c.want, got, c.got)
			}
		}
	})
}

func TestHandlersIdempotentByData(t *testing.T) {
	t.Parallel()
	t.Run("an event applied again, past the ledger, changes nothing and records no call twice", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		ctx := context.Background()
		events := []contract.Event{
			rawEvent(1, contract.EventWalletConnected, 5, "6001", contract.WalletConnectedPayload{Addr: "EQ1"}),
			rawEvent(2, contract.EventRegistered, 5, "6001", contract.RegisteredPayload{LeaderUID: func() *contract.UID { u := contract.UID(9); return &u }()}),
			rawEvent(3, contract.EventNewPartner, 9, "5001", contract.NewPartnerPayload{PartnerName: "Алиса"}),
			rawEvent(4, contract.EventStatusNftActivated, 5, "6001", contract.StatusNftActivatedPayload{Level: contract.NftLP1}),
		}
		apply := func() []string {
			var outcomes []string
			err := e.db.Tx(ctx, func(tx *sql.Tx) error {
				for _, ev := range events {
					r, err := b.handleEvent(ctx, tx, ev, e.db.Now())
					if err != nil {
						return err
					}
					outcomes = append(outcomes, r.Outcome)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return outcomes
		}
		first := apply()
		hist, calls := e.count(`select count(*) from bot_funnel_history`), e.dms()
		f := e.funnel("6001")
		second := apply()
		if strings.Join(first, ",") != "handled,handled,handled,handled" || strings.Join(second, ",") != "no_change,no_change,no_change,no_change" {
			t.Fatalf("outcomes %v then %v", first, second)
		}
		if e.count(`select count(*) from bot_funnel_history`) != hist || e.dms() != calls || calls != 3 {
			t.Fatalf("replay added history or calls (%d calls first; want two prompts and a DM)", calls)
		}
		if g := e.funnel("6001"); g.Stage != StageNftActivated || !g.UpdatedAt.Equal(f.UpdatedAt) {
			t.Fatalf("funnel moved on replay: %+v vs %+v", g, f)
		}
	})

	t.Run("a stage event for a uid finds the Telegram user linked to it", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		ctx := context.Background()
		err := e.db.Tx(ctx, func(tx *sql.Tx) error {
			five := contract.UID(5)
			if _, _, _, err := b.applyFunnel(ctx, tx, e.db.Now(), "6001", "test", funnelChange{Stage: StageAccountLinked, UID: &five}); err != nil {
				return err
			}
			r, err := b.handleEvent(ctx, tx, rawEvent(1, contract.EventStatusNftActivated, 5, "", nil), e.db.Now())
			if err == nil && (r.Outcome != outcomeHandled || r.TelegramID != "6001") {
				err = errors.New("not handled for 6001: " + r.Outcome)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if f := e.funnel("6001"); f.Stage != StageNftActivated {
			t.Fatalf("funnel %+v", f)
		}
	})
}
