package onboarding

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/httpjson/httpjsontest"
	"switchyard/store/storetest"
)

func TestFullDatabase(t *testing.T) {
	t.Parallel()

	t.Run("the onboarding bot acknowledges no event it could not write, and handles each once once room is back", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t, func(o *onbEnvOpts) { o.manualClock = true })
		b := e.newBot(e.db)
		const n = 60
		for i := range n {
			e.emitNft(backend.Target{TelegramID: contract.TelegramID(fmt.Sprint(20_000 + i%6))})
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
		ob := e.newBot(e.db, func(o *Opts) { o.Updates, o.WebhookSecret = UpdatesWebhook, secret })
		h := httpjsontest.Router(ob.Routes)
		post := func(id int) int {
			body := fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"from":{"id":%d,"is_bot":false,"first_name":"A"},`+
				`"chat":{"id":%d,"type":"private"},"date":1771668000,"text":"%s"}}`, id, id, 9000+id%3, 9000+id%3, strings.Repeat("y", 400))
			return httpjsontest.Do(h, http.MethodPost, "/webhooks/bot", "", http.Header{"X-Telegram-Bot-Api-Secret-Token": {secret}, "Content-Type": {"application/json"}}, []byte(body)).Code
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
