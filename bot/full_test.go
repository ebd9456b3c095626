package bot

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard/store/storetest"
)

func TestFullDatabase(t *testing.T) {
	t.Parallel()

	t.Run("emits and backend actions answer 5xx while the database is full and store nothing, and succeed once room is back", func(t *testing.T) {
		t.Parallel()
		e := newBackendEnv(t)
		u := e.createUser(t, "full-user", "7001")
		admin := func(method, path string, body any) (int, []byte) {
			return e.request(t, method, "/admin/api"+path, "", body)
		}
		// Each request writes something new every time it is sent.
		requests := []struct {
			name, path string
			body       func(i int) any
			ok         int
		}{
			{"a raw emit", "/bot/events", func(i int) any {
				return map[string]any{"eventType": "reactivation", "telegramId": "7001", "payload": map[string]int{"days": i}}
			}, 201},
			{"a wallet connection", fmt.Sprintf("/users/%d/wallet", u.UID), func(i int) any {
				return map[string]string{"addr": fmt.Sprintf("EQDk2VTvn04SUKJrW7rXahzdF8_Qi6utb0wj43InCu9vdj%02d", i)}
			}, 200},
			{"a new user", "/users", func(i int) any {
				return map[string]string{"link": fmt.Sprintf("user-%d", i), "name": strings.Repeat("N", 200)}
			}, 201},
		}
		makeRoom := storetest.FillUp(t, e.db, false)
		before := e.countEvents(t)
		for _, r := range requests {
			// The first few may still fit in pages with room left; each
			// answer is either a success that is stored or a 5xx that
			// stored nothing, and the database soon refuses.
			refused := false
			for i := 0; i < 50 && !refused; i++ {
				events := e.countEvents(t)
				status, body := admin(http.MethodPost, r.path, r.body(i))
				switch {
				case status == r.ok:
					if r.ok == 201 && r.path == "/bot/events" && e.countEvents(t) != events+1 {
						t.Fatalf("%s answered %d but is not stored", r.name, status)
					}
				case status >= 500:
					if errorCode(t, body) == "" || e.countEvents(t) != events {
						t.Fatalf("%s answered %d but changed the outbox", r.name, status)
					}
					refused = true
				default:
					t.Fatalf("%s on a full database: %d %s, want %d or a 5xx", r.name, status, body, r.ok)
				}
			}
			if !refused {
				t.Fatalf("%s was never refused on a full database", r.name)
			}
		}
		pending := e.pending(t, "?limit=1000")
		if len(pending) != e.countEvents(t) {
			t.Fatalf("pending on a full database lists %d events, want the %d stored", len(pending), e.countEvents(t))
		}

		makeRoom()
		for _, r := range requests {
			if status, body := admin(http.MethodPost, r.path, r.body(100)); status != r.ok {
				t.Fatalf("%s with room again: %d %s, want %d", r.name, status, body, r.ok)
			}
		}
		if after := e.countEvents(t); after <= before {
			t.Fatalf("%d events after the emits succeeded, %d before", after, before)
		}
	})

	t.Run("the onboarding bot acknowledges no event it could not write, and handles each once once room is back", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t, func(o *onbEnvOpts) { o.manualClock = true })
		b := e.newBot(e.db)
		const n = 60
		for i := range n {
			e.emitNft(Target{TelegramID: TelegramID(fmt.Sprint(20_000 + i%6))})
		}
		makeRoom := storetest.FillUp(t, e.db, false)
		ctx := context.Background()
		b.poll(ctx)

		// An event is processed only with its ledger mark and its message
		// written; one whose writes failed is not processed and has neither.
		processed := e.count(`select count(*) from bot_event_outbox where processed_at is not null`)
		marked := e.count(`select count(*) from bot_processed_events`)
		if processed != marked {
			t.Fatalf("while full: %d processed, %d marked in the ledger", processed, marked)
		}
		if !strings.Contains(e.logs.String(), "database or disk is full") {
			t.Fatalf("the poll did not meet the full database:\n%s", tail(e.logs.String(), 10))
		}
		if processed == n {
			t.Fatalf("all %d events handled on a full database: the test filled nothing", n)
		}
		if burnt := e.count(`select count(*) from bot_event_outbox where processed_at is null and attempts > 0`); burnt > 0 {
			t.Fatalf("%d events were charged a failed attempt for the full database, which is no fault of theirs:\n%s", burnt, tail(e.logs.String(), 10))
		}

		makeRoom()
		e.clock.Advance(time.Hour)
		b.poll(ctx)
		if u := e.unprocessed(); u != 0 {
			t.Fatalf("%d events unprocessed once room is back", u)
		}
		if m := e.count(`select count(*) from bot_processed_events`); m != n {
			t.Fatalf("%d ledger marks for %d events: each must have one", m, n)
		}
		if d := e.count(`select count(*) from bot_event_outbox where dead_lettered_at is not null`); d != 0 {
			t.Fatalf("%d events dead-lettered", d)
		}
		t.Logf("while full: %d of %d handled, the rest left pending; all handled once after", processed, n)
	})

	t.Run("the onboarding bot's webhook answers 503 while the database is full and stores every update once room is back", func(t *testing.T) {
		t.Parallel()
		const secret = "full-webhook_SECRET"
		e := newOnbEnv(t)
		ob := e.newBot(e.db, func(o *OnboardingOpts) { o.Updates, o.WebhookSecret = UpdatesWebhook, secret })
		h := fuzzRouter(ob.Routes)
		post := func(id int) int {
			body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"from":{"id":%d,"is_bot":false,"first_name":"A"},`+
				`"chat":{"id":%d,"type":"private"},"date":1771668000,"text":"%s"}}`, id, id, 9000+id%3, 9000+id%3, strings.Repeat("y", 400))
			return fuzzDo(h, http.MethodPost, "/webhooks/bot", "", http.Header{"X-Telegram-Bot-Api-Secret-Token": {secret}, "Content-Type": {"application/json"}}, []byte(body)).Code
		}
		stored := func(id int) bool {
			return e.count(`select count(*) from bot_updates where update_id = ?`, id) == 1
		}
		const n = 40
		makeRoom := storetest.FillUp(t, e.db, false)
		var refused []int
		for id := 1; id <= n; id++ {
			switch code := post(id); {
			case code == http.StatusOK && stored(id):
			case code == http.StatusServiceUnavailable && !stored(id):
				refused = append(refused, id)
			default:
				t.Fatalf("update %d: %d (stored: %v) on a full database, want 200 and stored or 503 and not", id, code, stored(id))
			}
		}
		if len(refused) == 0 {
			t.Fatal("no update was refused on a full database")
		}
		makeRoom()
		for _, id := range refused {
			if code := post(id); code != http.StatusOK {
				t.Fatalf("update %d redelivered with room: %d", id, code)
			}
		}
		if got := e.count(`select count(*) from bot_updates`); got != n {
			t.Fatalf("%d updates stored, want %d", got, n)
		}
	})
}
