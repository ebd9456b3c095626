package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/bot/onboarding"
)

// outboxGen emits new_partner events through the admin API (standing in for
// backend actions) and, with Consume, drains them as the bot would: GET
// /bot/events/pending with a long poll, then POST /bot/events/ack. Each
// event names a partner of its own (PartnerName), so the DM the bot sends
// for it says which event it is.
type outboxGen struct {
	api     *client
	runID   int64
	users   int64
	consume bool
	backend *onboarding.BackendClient

	mu      sync.Mutex
	emitted map[contract.EventID]time.Time // accepted, not yet acknowledged by the consumer
}

// PartnerName is the partner event n of a run announces; the onboarding
// bot's DM for the event carries it.
func PartnerName(runID, n int64) string { return fmt.Sprintf("Партнёр %d/%d", runID, n) }

// OutboxTelegramID is the Telegram id of load-test user i.
func OutboxTelegramID(i int64) string { return strconv.FormatInt(7_100_000_000+i, 10) }

func newOutboxGen(api *client, opts Opts) *outboxGen {
	return &outboxGen{
		api: api, runID: opts.RunID, users: int64(opts.OutboxUsers), consume: opts.Consume,
		backend: onboarding.NewBackendClient(opts.BaseURL, opts.BotSecret, opts.Client),
		emitted: map[contract.EventID]time.Time{},
	}
}

func (g *outboxGen) prepare(context.Context) error { return nil }

func (g *outboxGen) send(ctx context.Context, n int64) (Item, error) {
	tg := OutboxTelegramID(n % g.users)
	payload, _ := json.Marshal(contract.NewPartnerPayload{PartnerUID: contract.UID(n), PartnerName: PartnerName(g.runID, n)})
	var out backend.EmitResponse
	err := g.api.adminDo(ctx, http.MethodPost, "/admin/api/bot/events", backend.EmitRequest{
		EventType: contract.EventNewPartner, TelegramID: contract.TelegramID(tg), Payload: payload,
	}, &out)
	if err != nil {
		return Item{}, err
	}
	if g.consume {
		g.mu.Lock()
		g.emitted[out.ID] = time.Now()
		g.mu.Unlock()
	}
	id := strconv.FormatInt(int64(out.ID), 10)
	return Item{Path: PathOutbox, Key: id, Subject: tg, Seq: int64(out.ID)}, nil
}

// background is the consumer: it acknowledges every pending event and
// times emit → acknowledged for the ones this run emitted.
func (g *outboxGen) background(ctx context.Context, rec *recorder) {
	if !g.consume {
		return
	}
	for ctx.Err() == nil {
		events, err := g.backend.Pending(ctx, contract.BOT_OUTBOX_MAX_PENDING_LIMIT, 2*time.Second)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		if len(events) == 0 {
			continue
		}
		ids := make([]contract.EventID, 0, len(events))
		for _, e := range events {
			ids = append(ids, e.ID)
		}
		if _, err := g.backend.Ack(ctx, contract.AckRequest{ProcessedIDs: ids, RetryIDs: []contract.EventID{}}); err != nil {
			continue
		}
		now := time.Now()
		g.mu.Lock()
		for _, id := range ids {
			if at, ok := g.emitted[id]; ok {
				rec.handled(now.Sub(at))
				delete(g.emitted, id)
			}
		}
		g.mu.Unlock()
	}
}

func (g *outboxGen) drained(context.Context) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.emitted) == 0
}
