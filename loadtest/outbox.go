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
	// early are events acknowledged before their emit's answer came back
	// (the consumer can be that quick), or that this run did not emit, by
	// when they were acknowledged; acked is every event acknowledged, and
	// repeated counts deliveries of one of them.
	early    map[contract.EventID]time.Time
	acked    idSet
	rec      *recorder // set by background before its first ack
	ours     int64     // the run's events acknowledged
	repeated int64
	// quiet is whether the last poll, after every ack before it, found
	// nothing pending: no event, the run's or not, is being delivered again.
	quiet bool
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
		emitted: map[contract.EventID]time.Time{}, early: map[contract.EventID]time.Time{},
	}
}

func (g *outboxGen) prepare(context.Context) error { return nil }

func (g *outboxGen) send(ctx context.Context, n int64) (Item, error) {
	sent := time.Now()
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
		if at, ok := g.early[out.ID]; ok {
			delete(g.early, out.ID)
			g.ours++
			g.rec.handled(max(at.Sub(sent), 0))
		} else {
			g.emitted[out.ID] = time.Now()
		}
		g.mu.Unlock()
	}
	id := strconv.FormatInt(int64(out.ID), 10)
	return Item{Path: PathOutbox, Key: id, Subject: tg, Seq: int64(out.ID)}, nil
}

// background is the consumer: it acknowledges every pending event and
// times emit → acknowledged for the ones this run emitted. An ack whose
// answer is lost is sent again until it is answered (acknowledging an event
// twice changes nothing), so that no event the server recorded as processed
// is thought undelivered.
func (g *outboxGen) background(ctx context.Context, rec *recorder) {
	if !g.consume {
		return
	}
	g.mu.Lock()
	g.rec = rec
	g.mu.Unlock()
	for ctx.Err() == nil {
		events, err := g.backend.Pending(ctx, contract.BOT_OUTBOX_MAX_PENDING_LIMIT, 2*time.Second)
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		g.mu.Lock()
		g.quiet = len(events) == 0
		g.mu.Unlock()
		if len(events) == 0 {
			continue
		}
		ids := make([]contract.EventID, 0, len(events))
		g.mu.Lock()
		for _, e := range events {
			if g.acked.has(int64(e.ID)) {
				g.repeated++
			}
			ids = append(ids, e.ID)
		}
		g.mu.Unlock()
		for {
			_, err := g.backend.Ack(ctx, contract.AckRequest{ProcessedIDs: ids, RetryIDs: []contract.EventID{}})
			if err == nil || ctx.Err() != nil {
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		g.mu.Lock()
		for _, id := range ids {
			g.acked.add(int64(id))
			if at, ok := g.emitted[id]; ok {
				rec.handled(now.Sub(at))
				delete(g.emitted, id)
				g.ours++
			} else {
				g.early[id] = now
			}
		}
		g.forgetForeign(now)
		g.mu.Unlock()
	}
}

// forgetForeign drops, once there are many, the events acknowledged over a
// minute ago that no emit of the run has claimed: they are somebody
// else's. g.mu is held.
func (g *outboxGen) forgetForeign(now time.Time) {
	if len(g.early) < 1024 {
		return
	}
	for id, at := range g.early {
		if now.Sub(at) > time.Minute {
			delete(g.early, id)
		}
	}
}

// drained: every event the run emitted was acknowledged, and a poll since
// found nothing more (with Consume), so that an event delivered again after
// its acknowledgement is seen before the tally.
func (g *outboxGen) drained(context.Context) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.emitted) == 0 && (g.quiet || !g.consume)
}

func (g *outboxGen) waiting() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	var oldest time.Time
	for _, at := range g.emitted {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	return oldest
}

// tally: every emit answered 201 was delivered to the consumer and
// acknowledged, and nothing was delivered after its acknowledgement (see
// OutboxTally).
func (g *outboxGen) tally(_ context.Context, t *Tally) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	t.Outbox = &OutboxTally{
		Emitted: g.ours + int64(len(g.emitted)), Acknowledged: g.ours,
		Missing: int64(len(g.emitted)), Repeated: g.repeated,
	}
	return nil
}
