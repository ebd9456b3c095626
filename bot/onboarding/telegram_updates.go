package onboarding

import (
	"bytes"
	"context"
	"crypto/subtle"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/mymmrac/telego"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/authlimit"
	"switchyard/bot/contract"
	"switchyard/httpjson"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/telegram"
	"switchyard/telemetry"
)

// allowedUpdates are the kinds of updates the bot asks Telegram for.
var allowedUpdates = []string{telego.MessageUpdates, telego.CallbackQueryUpdates, telego.MyChatMemberUpdates}

const (
	// getUpdatesTimeout is the long-poll timeout of getUpdates, in seconds.
	getUpdatesTimeout = 20
	// maxUpdateAttempts is how often a stored update is tried before the bot
	// gives up on it and apologises to the user.
	maxUpdateAttempts = 5
	// updateWorkers is how many chats' updates are handled at once.
	updateWorkers = 8
	// webhookIdleCheck is how often a webhook-mode worker looks for updates
	// another process stored.
	webhookIdleCheck = 2 * time.Second
	// maxWebhookBody caps an update posted to POST /webhooks/bot.
	maxWebhookBody = 1 << 20
)

// updateOutcomes are the outcomes of switchyard_bot_onboarding_updates_total:
// stored as new, delivered again (already stored), then handled, retried or
// given up on.
var updateOutcomes = []string{"received", "duplicate", "handled", "retry", "failed"}

func init() {
	// Every kind and outcome is exported from the start, at zero, so a rate
	// over it exists before the first such update.
	for _, kind := range append(slices.Clone(allowedUpdates), "other") {
		for _, outcome := range updateOutcomes {
			metricUpdates.WithLabelValues(kind, outcome)
		}
	}
}

// rawUpdate is an update as stored: its JSON, the chat and kind that order
// and describe it, and the trace that delivered it (the webhook request's;
// "" for none).
type rawUpdate struct {
	ID          int
	ChatID      string
	Kind        string
	Payload     []byte
	Traceparent string
}

// describeUpdate returns the chat an update belongs to ("" for none) and its kind.
func describeUpdate(u telego.Update) (string, string) {
	switch {
	case u.Message != nil:
		return strconv.FormatInt(u.Message.Chat.ID, 10), telego.MessageUpdates
	case u.CallbackQuery != nil:
		if u.CallbackQuery.Message != nil {
			return strconv.FormatInt(u.CallbackQuery.Message.GetChat().ID, 10), telego.CallbackQueryUpdates
		}
		return strconv.FormatInt(u.CallbackQuery.From.ID, 10), telego.CallbackQueryUpdates
	case u.MyChatMember != nil:
		return strconv.FormatInt(u.MyChatMember.Chat.ID, 10), telego.MyChatMemberUpdates
	}
	return "", "other"
}

// storeUpdates stores updates (an update seen before is left alone) and, in
// the same transaction, advances the getUpdates offset to nextOffset when it
// is above zero. It returns how many updates were new; the others were
// duplicates (a webhook delivered again, a poll that repeated updates).
func (o *Bot) storeUpdates(ctx context.Context, ups []rawUpdate, nextOffset int) (int, error) {
	stored := 0
	fresh := make([]bool, len(ups))
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		stored = 0
		clear(fresh)
		now := store.TS(o.db.Now())
		for i, u := range ups {
			res, err := tx.ExecContext(ctx, `
				insert into bot_updates (bot_id, update_id, chat_id, kind, payload, status, attempts, next_attempt_at, received_at, traceparent)
				values (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?)
				on conflict (bot_id, update_id) do nothing`,
				o.botID, u.ID, u.ChatID, u.Kind, string(u.Payload), now, now, u.Traceparent)
			if err != nil {
				return fmt.Errorf("store update %d: %w", u.ID, err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			stored += int(n)
			fresh[i] = n == 1
		}
		if nextOffset > 0 {
			if _, err := tx.ExecContext(ctx, `
				insert into bot_update_offsets (bot_id, next_offset, updated_at) values (?, ?, ?)
				on conflict (bot_id) do update set next_offset = excluded.next_offset, updated_at = excluded.updated_at
				where bot_update_offsets.next_offset < excluded.next_offset`,
				o.botID, nextOffset, now); err != nil {
				return fmt.Errorf("advance the update offset: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for i, u := range ups {
		outcome := "received"
		if !fresh[i] {
			outcome = "duplicate"
		}
		metricUpdates.WithLabelValues(u.Kind, outcome).Inc()
	}
	return stored, nil
}

// updateOffset is the durable getUpdates offset (0 before the first update).
func (o *Bot) updateOffset(ctx context.Context) (int, error) {
	var off int
	err := o.db.Read.QueryRowContext(ctx, `select next_offset from bot_update_offsets where bot_id = ?`, o.botID).Scan(&off)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the update offset: %w", err)
	}
	return off, nil
}

// Routes registers POST /webhooks/bot, where Telegram posts the onboarding
// bot's updates in webhook mode.
func (o *Bot) Routes(r *mux.Router) {
	r.Handle("/webhooks/bot", httpjson.HandlerFunc(o.handleWebhook)).Methods(http.MethodPost)
}

// handleWebhook checks X-Telegram-Bot-Api-Secret-Token in constant time,
// refuses a body not declared application/json (415), stores the update and
// only then answers 200, so an update Telegram saw accepted is never lost; a
// repeated delivery is stored once. The update keeps the request's trace,
// which its handling continues.
func (o *Bot) handleWebhook(w http.ResponseWriter, r *http.Request) error {
	// The secret first: a caller without it learns nothing, not even the mode.
	// A presented secret is an attempt on the shared throttle.
	got := []byte(r.Header.Get("X-Telegram-Bot-Api-Secret-Token"))
	if len(got) == 0 {
		return httpjson.Unauthorized()
	}
	switch v, wait := o.authLimit.Check(r, surfaceBotWebhook, func() bool {
		return len(o.webhookSecret) != 0 && len(got) == len(o.webhookSecret) && subtle.ConstantTimeCompare(got, o.webhookSecret) == 1
	}); v {
	case authlimit.Throttled:
		return httpjson.TooManyAttempts(w, wait)
	case authlimit.Refused:
		return httpjson.Unauthorized()
	}
	if o.mode != UpdatesWebhook {
		return httpjson.NotFound("this bot receives updates by long polling")
	}
	if err := httpjson.RequireJSON(r); err != nil {
		return err // Telegram declares every update application/json
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return httpjson.Errorf(http.StatusRequestEntityTooLarge, "too_large", "the update is too large")
		}
		return httpjson.BadRequest("can't read the update: %v", err)
	}
	if len(body) > maxWebhookBody {
		return httpjson.Errorf(http.StatusRequestEntityTooLarge, "too_large", "the update is too large")
	}
	var probe struct {
		UpdateID *int `json:"update_id"`
	}
	var u telego.Update
	if err := json.Unmarshal(body, &probe); err != nil || probe.UpdateID == nil {
		return httpjson.BadRequest("the body is not a Telegram update")
	}
	if !botAPIKeys(body) {
		return httpjson.BadRequest("the body is not a Telegram update: a key is not lower-case snake_case")
	}
	if err := json.Unmarshal(body, &u); err != nil {
		return httpjson.BadRequest("the body is not a Telegram update: %v", err)
	}
	chat, kind := describeUpdate(u)
	up := rawUpdate{ID: u.UpdateID, ChatID: chat, Kind: kind, Payload: body, Traceparent: telemetry.Traceparent(r.Context())}
	if _, err := o.storeUpdates(r.Context(), []rawUpdate{up}, 0); err != nil {
		return httpjson.Unavailable("the update could not be stored; Telegram will retry")
	}
	wake(o.updatesWake)
	httpjson.Write(w, http.StatusOK, map[string]bool{"ok": true})
	return nil
}

// runUpdates is the Telegram updates worker: under the lease
// onboarding:updates (store.RunExclusive: one process at a time, renewed in
// the background, released when it stops) it handles the stored updates
// and, in long-polling mode, fetches new ones with getUpdates, storing them
// with the advanced offset before asking for more. While another process
// holds the lease it stands by, and takes over within a second of a
// release, or within LeaseTTL of the holder's death; the new holder points
// Telegram at its way of delivering updates again (prepareUpdates), once.
func (o *Bot) runUpdates(ctx context.Context) {
	o.whileHeld(ctx, UpdatesLeaseName, "updates", func(held context.Context) {
		for held.Err() == nil {
			o.handleUpdates(held)
		}
	})
}

// handleUpdates runs while this process holds the updates lease, until ctx
// (the lease's) ends.
func (o *Bot) handleUpdates(ctx context.Context) {
	prepared, failures := false, 0
	fail := func(what string, err error) bool {
		failures++
		wait := queue.RetryPolicy{MinBackoff: time.Second, MaxBackoff: 10 * time.Second}.Backoff(failures)
		if f := telegram.Classify(err); f.Class == telegram.ClassRetryAfter {
			wait = f.RetryAfter
		}
		o.log.Warn(what, slog.Int("failures", failures), slog.Any("err", err))
		return store.Sleep(ctx, wait)
	}
	for ctx.Err() == nil {
		if !prepared {
			if err := o.prepareUpdates(ctx); err != nil {
				if ctx.Err() != nil || !fail("prepare telegram updates", err) {
					return
				}
				continue
			}
			prepared = true
		}
		next, err := o.processUpdates(ctx)
		if err != nil && ctx.Err() == nil {
			if !fail("handle stored updates", err) {
				return
			}
			continue
		}
		if o.mode == UpdatesWebhook {
			wait := webhookIdleCheck
			if !next.IsZero() {
				wait = min(wait, max(next.Sub(o.db.Now()), time.Millisecond))
			}
			t := time.NewTimer(wait)
			select {
			case <-o.updatesWake:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
			continue
		}
		timeout := getUpdatesTimeout
		if !next.IsZero() {
			timeout = min(timeout, int((max(next.Sub(o.db.Now()), 0)+time.Second-1)/time.Second))
		}
		if err := o.pollUpdates(ctx, timeout); err != nil {
			if ctx.Err() != nil || !fail("getUpdates", err) {
				return
			}
			continue
		}
		failures = 0
	}
}

// prepareUpdates points Telegram at this bot's way of delivering updates:
// long polling deletes a webhook (keeping pending updates); webhook mode sets
// WebhookURL with the secret, when one is configured. It also sets the bot's
// command list, best effort.
func (o *Bot) prepareUpdates(ctx context.Context) error {
	switch {
	case o.mode == UpdatesLongPoll:
		if err := o.tg.DeleteWebhook(ctx, &telego.DeleteWebhookParams{}); err != nil {
			return err
		}
	case o.webhookURL != "":
		if err := o.tg.SetWebhook(ctx, &telego.SetWebhookParams{
			URL: o.webhookURL, SecretToken: string(o.webhookSecret), AllowedUpdates: allowedUpdates,
		}); err != nil {
			return err
		}
	default:
		o.log.Info("webhook mode without a webhook URL: set the webhook to POST /webhooks/bot yourself")
	}
	if err := o.tg.SetMyCommands(ctx, &telego.SetMyCommandsParams{Commands: botCommands}); err != nil {
		o.log.Debug("set the bot's commands", slog.Any("err", err))
	}
	return nil
}

// pollUpdates asks Telegram for updates after the durable offset, waiting up
// to timeout seconds, and stores them with the offset after the last one. The
// offset sent with the next call is what confirms them to Telegram, so an
// update is confirmed only once it is stored.
func (o *Bot) pollUpdates(ctx context.Context, timeout int) error {
	offset, err := o.updateOffset(ctx)
	if err != nil {
		return err
	}
	ups, err := o.tg.GetUpdates(ctx, &telego.GetUpdatesParams{
		Offset: offset, Timeout: timeout, Limit: 100, AllowedUpdates: allowedUpdates,
	})
	if err != nil || len(ups) == 0 {
		return err
	}
	raws := make([]rawUpdate, 0, len(ups))
	last := 0
	for _, u := range ups {
		b, err := json.Marshal(u)
		if err != nil {
			return fmt.Errorf("encode update %d: %w", u.UpdateID, err)
		}
		chat, kind := describeUpdate(u)
		raws = append(raws, rawUpdate{ID: u.UpdateID, ChatID: chat, Kind: kind, Payload: b})
		last = max(last, u.UpdateID)
	}
	wctx, cancel := workContext(ctx)
	defer cancel()
	_, err = o.storeUpdates(wctx, raws, last+1)
	return err
}

// storedUpdate is a stored update waiting to be handled.
type storedUpdate struct {
	ID          int
	ChatID      string
	Kind        string
	Payload     []byte
	Attempts    int
	Traceparent string
}

// dueUpdatesSQL picks the first pending update of each chat that is due.
const dueUpdatesSQL = `
	select u.update_id, u.chat_id, u.kind, u.payload, u.attempts, u.traceparent from bot_updates u
	where u.bot_id = ? and u.status = 'pending' and u.next_attempt_at <= ?
	  and not exists (
	    select 1 from bot_updates e
	    where e.bot_id = u.bot_id and e.status = 'pending' and e.chat_id = u.chat_id and e.update_id < u.update_id)
	order by u.update_id
	limit ?`

// processUpdates handles stored updates until none is due — one per chat at
// a time, in update_id order, chats side by side — and returns when the next
// one that waits for a retry comes due (zero: none waits).
func (o *Bot) processUpdates(ctx context.Context) (time.Time, error) {
	for ctx.Err() == nil {
		heads, err := o.dueUpdates(ctx, o.db.Now())
		if err != nil {
			return time.Time{}, err
		}
		if len(heads) == 0 {
			break
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, updateWorkers)
		for _, u := range heads {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				o.handleStoredUpdate(ctx, u)
			})
		}
		wg.Wait()
	}
	var next store.Timestamp
	err := o.db.Read.QueryRowContext(ctx,
		`select min(next_attempt_at) from bot_updates where bot_id = ? and status = 'pending' and next_attempt_at > ?`,
		o.botID, store.TS(o.db.Now())).Scan(&next)
	if err != nil {
		return time.Time{}, fmt.Errorf("next update: %w", err)
	}
	return next.Time, nil
}

func (o *Bot) dueUpdates(ctx context.Context, now time.Time) ([]storedUpdate, error) {
	rows, err := o.db.Read.QueryContext(ctx, dueUpdatesSQL, o.botID, store.TS(now), 4*updateWorkers)
	if err != nil {
		return nil, fmt.Errorf("due updates: %w", err)
	}
	defer rows.Close()
	var list []storedUpdate
	for rows.Next() {
		var (
			u       storedUpdate
			payload string
		)
		if err := rows.Scan(&u.ID, &u.ChatID, &u.Kind, &payload, &u.Attempts, &u.Traceparent); err != nil {
			return nil, fmt.Errorf("due updates: %w", err)
		}
		u.Payload = []byte(payload)
		list = append(list, u)
	}
	return list, rows.Err()
}

// handleStoredUpdate handles one update: the conversation decides (calling
// the backend where it must), then one transaction marks the update done and
// writes the funnel change and the replies keyed by the update. A failure is
// retried with backoff; after maxUpdateAttempts the bot apologises instead.
//
// Each attempt is a span, bot.update.handle (updateSpan), whose trace the
// replies' DMs carry on to their Bot API calls.
func (o *Bot) handleStoredUpdate(ctx context.Context, su storedUpdate) {
	wctx, cancel := workContext(ctx)
	defer cancel()
	wctx, span := o.updateSpan(wctx, su)
	var err error
	defer func() { telemetry.End(span, err) }()
	cause := "update:" + strconv.FormatInt(o.botID, 10) + ":" + strconv.Itoa(su.ID)
	var (
		u    telego.Update
		plan updatePlan
	)
	err = json.Unmarshal(su.Payload, &u)
	if err == nil {
		if span.IsRecording() {
			if from := updateSender(u); from != 0 {
				span.SetAttributes(attribute.Int64("telegram.user_id", from))
			}
		}
		plan, err = o.converse(wctx, u)
	}
	if err != nil {
		o.failUpdate(wctx, su, cause, err)
		return
	}
	var done bool
	err = o.db.Tx(wctx, func(tx *sql.Tx) error {
		now := o.db.Now()
		res, err := tx.ExecContext(wctx, `
			update bot_updates set status = 'done', attempts = attempts + 1, done_at = ?, last_error = null
			where bot_id = ? and update_id = ? and status = 'pending'`, store.TS(now), o.botID, su.ID)
		if err != nil {
			return fmt.Errorf("mark update %d: %w", su.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // handled by another process already
		}
		done = true
		if plan.User != "" {
			if plan.Reachable {
				if _, err := tx.ExecContext(wctx, `delete from bot_unreachable where telegram_id = ?`, string(plan.User)); err != nil {
					return fmt.Errorf("mark %s reachable: %w", plan.User, err)
				}
			}
			if plan.Unreachable != "" {
				if _, err := tx.ExecContext(wctx, `
					insert into bot_unreachable (telegram_id, reason, since) values (?, ?, ?)
					on conflict (telegram_id) do update set reason = excluded.reason`,
					string(plan.User), plan.Unreachable, store.TS(now)); err != nil {
					return fmt.Errorf("mark %s unreachable: %w", plan.User, err)
				}
			}
			if plan.Change != nil {
				if _, _, _, err := o.applyFunnel(wctx, tx, now, plan.User, cause, *plan.Change); err != nil {
					return err
				}
			}
		}
		_, err = o.recordDMs(wctx, tx, cause, plan.Replies)
		return err
	})
	if err != nil {
		o.failUpdate(wctx, su, cause, err)
		return
	}
	if done {
		metricUpdates.WithLabelValues(su.Kind, "handled").Inc()
	}
}

// updateSpan starts the span of one attempt at a stored update,
// bot.update.handle: in the trace of the webhook request that stored it, or
// the root of a trace of its own for an update fetched by getUpdates (one
// poll brings many users' updates, each its own story).
func (o *Bot) updateSpan(ctx context.Context, su storedUpdate) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, "bot.update.handle") // ctx as it is, and a span that does nothing
	}
	attrs := []attribute.KeyValue{
		attribute.Int("telegram.update_id", su.ID),
		attribute.String("telegram.update.kind", su.Kind),
		attribute.Int("bot.update.attempt", su.Attempts+1),
	}
	if su.ChatID != "" {
		attrs = append(attrs, telemetry.String("telegram.chat_id", su.ChatID))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if su.Traceparent == "" {
		opts = append(opts, trace.WithNewRoot())
	}
	return telemetry.Start(telemetry.Resume(ctx, su.Traceparent), "bot.update.handle", opts...)
}

// updateSender is the Telegram user an update comes from (0: none).
func updateSender(u telego.Update) int64 {
	switch {
	case u.Message != nil && u.Message.From != nil:
		return u.Message.From.ID
	case u.CallbackQuery != nil:
		return u.CallbackQuery.From.ID
	case u.MyChatMember != nil:
		return u.MyChatMember.From.ID
	}
	return 0
}

// failUpdate schedules a retry of su, or gives up after maxUpdateAttempts
// and tells the user something went wrong.
func (o *Bot) failUpdate(ctx context.Context, su storedUpdate, cause string, failure error) {
	attempts := su.Attempts + 1
	final := attempts >= maxUpdateAttempts
	var syntax *json.SyntaxError
	if errors.As(failure, &syntax) {
		final = true // a payload that never parses
	}
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		now := o.db.Now()
		status, next, done := "pending", store.TS(now.Add(queue.RetryPolicy{MinBackoff: 500 * time.Millisecond, MaxBackoff: 30 * time.Second}.Backoff(attempts))), store.Timestamp{}
		if final {
			status, next, done = "failed", store.TS(now), store.TS(now)
		}
		res, err := tx.ExecContext(ctx, `
			update bot_updates set status = ?, attempts = ?, next_attempt_at = ?, last_error = ?, done_at = ?
			where bot_id = ? and update_id = ? and status = 'pending'`,
			status, attempts, next, failure.Error(), done, o.botID, su.ID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 || !final || su.ChatID == "" || su.ChatID[0] == '-' {
			return err
		}
		_, err = o.recordDMs(ctx, tx, cause, []outgoingMessage{{
			Key: "failed", Method: methodSendMessage, ChatID: contract.TelegramID(su.ChatID), Params: outParams{Text: updateFailedText},
		}})
		return err
	})
	outcome := "retry"
	if final {
		outcome = "failed"
	}
	metricUpdates.WithLabelValues(su.Kind, outcome).Inc()
	o.log.Warn("telegram update failed", slog.Int("update_id", su.ID), slog.String("outcome", outcome),
		slog.Int("attempts", attempts), slog.Any("err", failure), slog.Any("record_err", err))
}

// botAPIKeys reports whether every object key in body (valid JSON) is
// lower-case snake_case, as every field of the Bot API is. telego's decoder
// (go-json) matches keys case-insensitively where its own probes do not: a
// "Message" in a callback_query leaves an interface holding a corrupt value,
// and the first method call on it crashes the process. Such a body is no
// Telegram update, so the webhook refuses it before anything decodes it.
func botAPIKeys(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	// objects[i] tells whether the i-th open container is an object, and
	// wantKey whether the innermost object expects a key next.
	var objects []bool
	wantKey := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
		inObject := len(objects) > 0 && objects[len(objects)-1]
		if key, ok := tok.(string); ok && inObject && wantKey {
			for i := 0; i < len(key); i++ {
				if c := key[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
					return false
				}
			}
			wantKey = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			objects, wantKey = append(objects, true), true
		case json.Delim('['):
			objects = append(objects, false)
		case json.Delim('}'), json.Delim(']'):
			objects = objects[:len(objects)-1]
			wantKey = len(objects) > 0 && objects[len(objects)-1]
		default:
			wantKey = inObject
		}
	}
}

// validWebhookSecret reports whether s is a secret Telegram accepts for
// setWebhook: 1 to 256 of A-Z a-z 0-9 _ -.
func validWebhookSecret(s string) bool {
	if len(s) < 1 || len(s) > 256 {
		return false
	}
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
