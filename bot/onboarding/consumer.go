package onboarding

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/telemetry"
)

// runConsumer is the consumer loop: it holds the lease onboarding:outbox
// through store.RunExclusive and long-polls GET /bot/events/pending page
// after page. RunExclusive renews the lease in the background while a page
// is fetched and handled, so a page slower than LeaseTTL keeps it, and
// cancels the loop's context before the lease could expire when it cannot
// renew, so no two processes ever consume at once. Another process's loop
// stands by meanwhile and takes over within a second of a release (a
// graceful stop), or within LeaseTTL of a holder's death.
func (o *Bot) runConsumer(ctx context.Context) {
	o.whileHeld(ctx, OutboxLeaseName, "consumer", func(held context.Context) {
		o.flight.Lock()
		defer o.flight.Unlock()
		for held.Err() == nil {
			o.consume(held, true, nil)
		}
	})
}

// whileHeld runs work whenever this process holds the lease name (renewed
// in the background, released when work returns or ctx ends), standing by
// while another process holds it, until ctx ends. work must return soon
// after its context (the lease's) ends.
func (o *Bot) whileHeld(ctx context.Context, name, role string, work func(held context.Context)) {
	lease := store.LeaseOpts{Name: name, Owner: o.owner, TTL: LeaseTTL, Logger: o.log.With(slog.String("role", role))}
	_ = o.db.RunExclusive(ctx, lease, func(held context.Context, _ store.Lease) error {
		work(held)
		return nil
	})
}

// poll is the spec's scheduled cycle (OutboxConsumerService.poll, every 10 s
// by gocron) under its single-flight lock: if this process is not consuming
// already and the lease onboarding:outbox is free, it drains what is pending
// and gives the lease back; otherwise it just returns, as the spec says —
// the consumer loop of this process or of another one holds the lease and
// is at work. It reports whether it drained.
//
// It takes the lease as an owner of its own, o.owner+"/poll", not the
// loop's: a lease lets its owner in again, so with one owner the two would
// consume side by side. The loop takes the lease back within a second of
// the drain's end.
func (o *Bot) poll(ctx context.Context) bool {
	if !o.flight.TryLock() {
		return false
	}
	defer o.flight.Unlock()
	owner := o.owner + "/poll"
	held, err := o.db.AcquireLease(ctx, OutboxLeaseName, owner, LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			o.log.Error("take the outbox lease", slog.String("lease", OutboxLeaseName), slog.Any("err", err))
		}
		return false
	}
	if !held {
		return false
	}
	defer func() {
		rctx, cancel := workContext(ctx)
		defer cancel()
		if err := o.db.ReleaseLease(rctx, OutboxLeaseName, owner); err != nil {
			o.log.Warn("release the outbox lease", slog.Any("err", err))
		}
	}()
	// A drain's pages are fetched without waiting: renewing after each one
	// keeps the lease.
	o.consume(ctx, false, func(ctx context.Context) bool {
		held, err := o.db.RenewLease(ctx, OutboxLeaseName, owner, LeaseTTL)
		if (err != nil || !held) && ctx.Err() == nil {
			o.log.Info("outbox lease lost; stopping the drain", slog.Any("err", err))
		}
		return err == nil && held
	})
	return true
}

// consume is one consumer session, run while the lease onboarding:outbox is
// this process's: a draining session (the cron's) fetches until a page
// comes back short; a long-polling one (the loop's) goes on, waiting up to
// LongPollWait for each page, until ctx ends. renew, when set, is called
// after every page and ends the session when it reports the lease lost.
func (o *Bot) consume(ctx context.Context, longPoll bool, renew func(context.Context) bool) {
	failures := 0
	for ctx.Err() == nil {
		wait := time.Duration(0)
		if longPoll {
			wait = o.longPoll
		}
		began := time.Now()
		n, perr := o.processOnce(ctx, wait)
		if longPoll && perr == nil && n == 0 && time.Since(began) < wait/10 {
			// The long-poll ended early with nothing (the backend is shutting
			// down): do not spin.
			if !store.Sleep(ctx, wait/10) {
				return
			}
		}
		if perr != nil && ctx.Err() == nil {
			failures++
			o.log.Warn("outbox cycle failed", slog.Int("failures", failures), slog.Any("err", perr))
			if !longPoll || !store.Sleep(ctx, queue.RetryPolicy{MinBackoff: time.Second, MaxBackoff: o.longPoll}.Backoff(failures)) {
				return
			}
		} else if perr == nil {
			failures = 0
		}
		if ctx.Err() != nil || (renew != nil && !renew(ctx)) {
			return
		}
		if !longPoll && n < BATCH_LIMIT {
			return
		}
	}
}

// batchResult is what one processOnce decided, for the ack.
type batchResult struct {
	processed []contract.EventID
	retry     []contract.EventID
	errors    map[string]string
	results   map[contract.EventID]eventResult
	messages  int
}

// processOnce is the spec's processOnce: fetch up to BATCH_LIMIT events
// (long-polling up to wait), group them by user (Event.UserKey) with each
// group in id order, and handle them in one transaction in which every event
// has its own savepoint: tryMark writes the event to the dedup ledger
// bot_processed_events and the handler writes its effects — the funnel and
// the outgoing-message records — beside it. An event already in the ledger
// goes to processedIds without its handler; a handler error rolls back that
// event alone, puts it in retryIds and stops its user's group, while other
// users go on. One ack per batch follows the commit. It returns how many
// events the page had.
//
// Once a page is in hand it is finished — handled, committed and acked —
// even if ctx is cancelled meanwhile (bounded by workContext).
//
// The batch's transaction function may run more than once (PostgreSQL runs
// a transaction again after a serialization failure or a deadlock): it
// starts from a fresh batchResult each time, and what it does outside the
// database — counting, logging, the ack — happens after the commit.
//
// Traces: the cycle is a consumer span, bot.events.batch, whose trace holds
// the fetch (bot.events.poll, and the backend's server span of it), the
// batch's transaction and the ack (bot.events.ack). Each event's handling
// is a span of a trace of its own, bot.event.handle (handleSpan), linked to
// the emit's span and to the batch's.
func (o *Bot) processOnce(ctx context.Context, wait time.Duration) (n int, err error) {
	ctx, batch := telemetry.Start(ctx, "bot.events.batch", trace.WithSpanKind(trace.SpanKindConsumer))
	defer func() { endBatch(batch, n, err) }()
	events, err := o.backend.Pending(ctx, BATCH_LIMIT, wait)
	if err != nil {
		return 0, fmt.Errorf("fetch pending events: %w", err)
	}
	if len(events) == 0 {
		return 0, nil
	}
	wctx, cancel := workContext(ctx)
	defer cancel()

	var res batchResult
	err = o.db.Tx(wctx, func(tx *sql.Tx) error {
		res = batchResult{errors: map[string]string{}, results: map[contract.EventID]eventResult{}}
		now := o.db.Now()
		for _, group := range groupByUser(events) {
			for _, ev := range group {
				hctx, span := o.handleSpan(wctx, ev)
				r, fresh, herr, err := o.tryHandle(hctx, tx, ev, now)
				endHandle(span, r, fresh, herr, err)
				if err != nil {
					return err // the transaction itself broke: nothing of this batch is kept
				}
				if herr != nil {
					res.retry = append(res.retry, ev.ID)
					res.errors[strconv.FormatInt(int64(ev.ID), 10)] = herr.Error()
					break // keep this user's order: the rest of the group waits
				}
				res.processed = append(res.processed, ev.ID)
				if fresh {
					res.results[ev.ID] = r
					res.messages += r.Messages
				}
			}
		}
		return nil
	})
	if err != nil {
		return len(events), fmt.Errorf("handle a batch of %d events: %w", len(events), err)
	}
	o.handled.Add(int64(len(res.results)))
	o.afterBatch(wctx, events, res)
	if o.afterCommit != nil {
		o.afterCommit(res.processed, res.retry)
	}
	req := contract.AckRequest{ProcessedIDs: res.processed, RetryIDs: res.retry}
	if len(res.errors) > 0 {
		req.Errors = res.errors
	}
	if _, err := o.backend.Ack(wctx, req); err != nil {
		// Not lost: the events stay pending, and the ledger turns the next
		// delivery of the handled ones into processedIds without their handlers.
		return len(events), fmt.Errorf("ack %d processed and %d retried events: %w", len(res.processed), len(res.retry), err)
	}
	return len(events), nil
}

// endBatch ends a cycle's span with the size of its page.
func endBatch(span trace.Span, n int, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("bot.events.count", n))
	}
	telemetry.End(span, err)
}

// handleSpan starts the span of one event's handling, bot.event.handle: the
// root of a trace of its own (the handling follows from the backend action
// that emitted the event; it is no part of it), linked to the emit's span
// (the event's traceparent, when the backend traced the emit) and to the
// batch's span (ctx's), whose trace holds the transaction that commits the
// handling. The DMs the handler records carry this span's traceparent.
func (o *Bot) handleSpan(ctx context.Context, ev contract.Event) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, "bot.event.handle") // ctx as it is, and a span that does nothing
	}
	attrs := []attribute.KeyValue{
		attribute.Int64("bot.event_id", int64(ev.ID)),
		attribute.String("bot.event_type", string(ev.EventType)),
		attribute.Int("bot.event.attempts", ev.Attempts),
	}
	if ev.TelegramID != nil {
		attrs = append(attrs, telemetry.String("telegram.user_id", string(*ev.TelegramID)))
	}
	if ev.MagnetUID != nil {
		attrs = append(attrs, telemetry.String("bot.magnet_uid", strconv.FormatInt(int64(*ev.MagnetUID), 10)))
	}
	return telemetry.Start(ctx, "bot.event.handle", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
		telemetry.LinkTo(ev.Traceparent), telemetry.LinkTo(telemetry.Traceparent(ctx)), trace.WithAttributes(attrs...))
}

// endHandle ends an event's span with what its handling came to: handled
// (with its outcome), a duplicate the ledger had already, or a failure.
func endHandle(span trace.Span, r eventResult, fresh bool, herr, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	outcome := outcomeDuplicate
	switch {
	case err != nil || herr != nil:
		outcome = outcomeRetry
	case fresh:
		outcome = r.Outcome
	}
	span.SetAttributes(attribute.String("bot.event.outcome", outcome))
	telemetry.End(span, errors.Join(herr, err))
}

// tryHandle marks and handles one event inside its own savepoint of tx. fresh
// reports that the handler ran (false: the ledger had the event already);
// herr is the handler's failure, whose writes were rolled back; err means the
// transaction can not go on. A serialization failure or deadlock
// (PostgreSQL) is no failure of the event: it ends the transaction, which
// Tx runs again, rather than cost the event an attempt and its backoff.
func (o *Bot) tryHandle(ctx context.Context, tx *sql.Tx, ev contract.Event, now time.Time) (r eventResult, fresh bool, herr, err error) {
	if _, err := tx.ExecContext(ctx, `savepoint bot_event`); err != nil {
		return eventResult{}, false, nil, fmt.Errorf("savepoint: %w", err)
	}
	rollback := func(cause error) (eventResult, bool, error, error) {
		if store.IsRetryable(cause) {
			return eventResult{}, false, nil, fmt.Errorf("event %d: %w", ev.ID, cause)
		}
		if _, err := tx.ExecContext(ctx, `rollback to bot_event`); err != nil {
			return eventResult{}, false, nil, fmt.Errorf("roll back event %d after %v: %w", ev.ID, cause, err)
		}
		if _, err := tx.ExecContext(ctx, `release bot_event`); err != nil {
			return eventResult{}, false, nil, fmt.Errorf("release savepoint: %w", err)
		}
		return eventResult{}, false, cause, nil
	}
	marked, err := tryMark(ctx, tx, ev, now)
	if err != nil {
		return rollback(err)
	}
	if marked {
		if o.beforeHandle != nil {
			if err := o.beforeHandle(ev); err != nil {
				return rollback(err)
			}
		}
		r, err = o.handleEvent(ctx, tx, ev, now)
		if err != nil {
			return rollback(err)
		}
		if r.Outcome != outcomeHandled {
			if _, err := tx.ExecContext(ctx, `update bot_processed_events set outcome = ? where outbox_event_id = ?`,
				r.Outcome, int64(ev.ID)); err != nil {
				return rollback(err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, `release bot_event`); err != nil {
		return eventResult{}, false, nil, fmt.Errorf("release savepoint: %w", err)
	}
	return r, marked, nil, nil
}

// tryMark is the spec's tryMark: it writes ev to the dedup ledger and reports
// whether it was new.
func tryMark(ctx context.Context, tx *sql.Tx, ev contract.Event, now time.Time) (bool, error) {
	res, err := tx.ExecContext(ctx, `
		insert into bot_processed_events (outbox_event_id, event_type, user_key, outcome, emitted_at, processed_at)
		values (?, ?, ?, ?, ?, ?)
		on conflict (outbox_event_id) do nothing`,
		int64(ev.ID), string(ev.EventType), ev.UserKey(), outcomeHandled, store.TS(ev.CreatedAt), store.TS(now))
	if err != nil {
		return false, fmt.Errorf("mark event %d: %w", ev.ID, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// groupByUser groups a page by Event.UserKey, groups in the order they first
// appear and each group sorted by id. Events about nobody are each their own group.
func groupByUser(events []contract.Event) [][]contract.Event {
	index := map[string]int{}
	var groups [][]contract.Event
	for _, ev := range events {
		key := ev.UserKey()
		i, ok := index[key]
		if !ok || key == "" {
			i = len(groups)
			groups = append(groups, nil)
			if key != "" {
				index[key] = i
			}
		}
		groups[i] = append(groups[i], ev)
	}
	for _, g := range groups {
		slices.SortStableFunc(g, func(a, b contract.Event) int { return cmp.Compare(a.ID, b.ID) })
	}
	return groups
}

// afterBatch logs and counts a committed batch. (The DMs it recorded woke
// the sender's queue workers by themselves.)
func (o *Bot) afterBatch(ctx context.Context, events []contract.Event, res batchResult) {
	now := o.db.Now()
	retry := make(map[contract.EventID]bool, len(res.retry))
	for _, id := range res.retry {
		retry[id] = true
	}
	processed := make(map[contract.EventID]bool, len(res.processed))
	for _, id := range res.processed {
		processed[id] = true
	}
	for _, ev := range events {
		attrs := []slog.Attr{slog.Int64("event_id", int64(ev.ID)), slog.String("event_type", string(ev.EventType)),
			slog.String("user_id", ev.UserKey())}
		switch r, fresh := res.results[ev.ID]; {
		case retry[ev.ID]:
			metricEventsHandled.WithLabelValues(string(ev.EventType), outcomeRetry).Inc()
			o.log.LogAttrs(ctx, slog.LevelWarn, "outbox event failed; retried by the backend",
				append(attrs, slog.String("outcome", outcomeRetry), slog.String("err", res.errors[strconv.FormatInt(int64(ev.ID), 10)]))...)
		case fresh:
			metricEventsHandled.WithLabelValues(string(ev.EventType), outcomeHandled).Inc()
			metricEventLatency.Observe(now.Sub(ev.CreatedAt).Seconds())
			o.log.LogAttrs(ctx, slog.LevelDebug, "outbox event handled", append(attrs, slog.String("outcome", r.Outcome))...)
			if r.LeftLeader {
				metricLeaderSwitches.Inc()
				o.log.LogAttrs(ctx, slog.LevelWarn, "user registered under another leader than the one they arrived with",
					append(attrs, slog.String("telegram_id", string(r.TelegramID)), slog.String("outcome", "left_leader"))...)
			}
			if r.Outcome == outcomeIgnored {
				o.log.LogAttrs(ctx, slog.LevelWarn, "outbox event of a type this bot does not know; acked without effect", attrs...)
			}
		case processed[ev.ID]:
			metricEventsHandled.WithLabelValues(string(ev.EventType), outcomeDuplicate).Inc()
			o.log.LogAttrs(ctx, slog.LevelDebug, "outbox event was handled before; acked again", append(attrs, slog.String("outcome", outcomeDuplicate))...)
		}
	}
}

// PruneResult counts what a prune deleted.
type PruneResult struct {
	ProcessedEvents int64 `json:"processedEvents"`
}

// scheduledPrune is the daily prune job, single-flight across the
// processes of the database: the first whose midnight comes takes the lease
// PruneLeaseName and prunes, and keeps the lease for PruneLeaseTTL, so the
// others' midnights — the same moment, give or take their clocks' drift —
// find it held and skip. It is not released, nor taken over: the work is
// once a day, and a prune that did not happen (its process died, or the
// delete failed) is done by the next midnight's, whose cutoff covers it.
// The prune itself is idempotent (it deletes by a cutoff), so even an
// overlap — a prune longer than the lease, or clocks an hour apart — would
// only delete nothing the second time.
func (o *Bot) scheduledPrune(ctx context.Context) {
	held, err := o.db.AcquireLease(ctx, PruneLeaseName, o.owner, PruneLeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			o.log.Error("take the prune lease", slog.String("lease", PruneLeaseName), slog.Any("err", err))
		}
		return
	}
	if !held {
		o.log.Debug("another process prunes the onboarding bot's tables today", slog.String("lease", PruneLeaseName))
		return
	}
	if _, err := o.prune(ctx); err != nil && ctx.Err() == nil {
		o.log.Error("prune the onboarding bot's tables", slog.Any("err", err))
	}
}

// prune is the spec's ProcessedPruneService (daily at midnight): it deletes
// bot_processed_events rows older than RETENTION_DAYS by the store's clock —
// safe because the backend never hands out an acked event again. The bot's
// other history — handled Telegram updates and recorded deliveries — is the
// retention runner's (retention.go: PruneUpdates, PruneDeliveries), in
// small batches by its own options. The DMs that failed are DMQueue's dead
// letters, pruned with the other dead letters.
func (o *Bot) prune(ctx context.Context) (PruneResult, error) {
	var res PruneResult
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		cutoff := store.TS(o.db.Now().AddDate(0, 0, -RETENTION_DAYS))
		r, err := tx.ExecContext(ctx, `delete from bot_processed_events where processed_at < ?`, cutoff)
		if err != nil {
			return fmt.Errorf("prune: %w", err)
		}
		res.ProcessedEvents, err = r.RowsAffected()
		return err
	})
	if err != nil {
		return PruneResult{}, err
	}
	o.log.Info("onboarding bot pruned", slog.Int64("processed_events", res.ProcessedEvents), slog.Int("retention_days", RETENTION_DAYS))
	return res, nil
}
