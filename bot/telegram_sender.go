package bot

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/store"
	"switchyard/telegram"
)

// The Bot API methods the bot calls through outgoing records.
const (
	methodSendMessage     = "sendMessage"
	methodEditReplyMarkup = "editMessageReplyMarkup"
	methodAnswerCallback  = "answerCallbackQuery"
)

// Statuses and phases of an outgoing record.
const (
	OutgoingPending  = "pending"  // waits for its attempt (first or retry)
	OutgoingSending  = "sending"  // claimed by a sender until claimed_until
	OutgoingSent     = "sent"     // Telegram accepted it; never made again
	OutgoingNotified = "notified" // the fallback web notification was stored
	OutgoingFailed   = "failed"   // a permanent failure; an operator may redrive it

	phaseTelegram = "telegram"
	phaseFallback = "fallback"
)

const (
	// claimTTL is how long a sender owns a claimed record; a sender that died
	// with a claim leaves the record to be retried after it. Twice the
	// longest Bot API call (telegram.DefaultRequestTimeout), so a live sender
	// never loses a claim mid-call.
	claimTTL = 2 * telegram.DefaultRequestTimeout
	// senderWorkers is how many calls one process makes at once (across chats).
	senderWorkers = 8
	// senderIdleCheck bounds the sender's sleep when nothing is due: records
	// committed by another process (whose consumer or updates worker may
	// hold those leases while this one holds the sender's) wake no one here.
	senderIdleCheck = time.Second
	// maxSendBackoff caps the wait between retries of a retryable failure.
	maxSendBackoff = 5 * time.Minute
)

// button is one inline keyboard button: callback data or a URL.
type button struct {
	Text string `json:"text"`
	Data string `json:"data,omitempty"`
	URL  string `json:"url,omitempty"`
}

// outParams are the parameters of one call, as stored.
type outParams struct {
	Text            string     `json:"text,omitempty"`
	Buttons         [][]button `json:"buttons,omitempty"`
	MessageID       int        `json:"messageId,omitempty"`
	CallbackQueryID string     `json:"callbackQueryId,omitempty"`
}

// outgoingMessage is a call a handler asks for. Key names it within its cause
// (the dedup key is "<cause>:<Key>"); ChatID "" means the user has no chat
// with the bot, and only the Fallback can reach them.
type outgoingMessage struct {
	Key      string
	Method   string
	ChatID   TelegramID
	Params   outParams
	Fallback *NewNotification
}

const insertOutgoingSQL = `
	insert into bot_outgoing (dedup_key, method, chat_id, order_key, params, fallback, status, phase,
		attempts, next_attempt_at, created_at, updated_at)
	values (?, ?, ?, ?, ?, ?, 'pending', ?, 0, ?, ?, ?)
	on conflict (dedup_key) do nothing`

// insertOutgoing records msgs for cause inside tx. A record whose key exists
// already is left alone, so a cause yields its calls once. It returns how
// many records it added.
func insertOutgoing(ctx context.Context, tx *sql.Tx, now time.Time, cause string, msgs []outgoingMessage) (int, error) {
	added := 0
	for _, m := range msgs {
		params, err := json.Marshal(m.Params)
		if err != nil {
			return 0, fmt.Errorf("outgoing %s: %w", m.Key, err)
		}
		var fallback any
		if m.Fallback != nil {
			b, err := json.Marshal(m.Fallback)
			if err != nil {
				return 0, fmt.Errorf("outgoing %s fallback: %w", m.Key, err)
			}
			fallback = string(b)
		}
		orderKey, phase := "chat:"+string(m.ChatID), phaseTelegram
		if m.ChatID == "" {
			if m.Fallback == nil {
				continue // nobody to send it to
			}
			orderKey, phase = "uid:"+strconv.FormatInt(int64(m.Fallback.UID), 10), phaseFallback
		}
		res, err := tx.ExecContext(ctx, insertOutgoingSQL, cause+":"+m.Key, m.Method, string(m.ChatID), orderKey,
			string(params), fallback, phase, store.TS(now), store.TS(now), store.TS(now))
		if err != nil {
			return 0, fmt.Errorf("record outgoing %s: %w", m.Key, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		added += int(n)
	}
	return added, nil
}

// Outgoing is one outgoing record, for the operator.
type Outgoing struct {
	ID                int64            `json:"id"`
	DedupKey          string           `json:"dedupKey"`
	Method            string           `json:"method"`
	ChatID            TelegramID       `json:"chatId"`
	OrderKey          string           `json:"orderKey"`
	Params            outParams        `json:"params"`
	Fallback          *NewNotification `json:"fallback"`
	Status            string           `json:"status"`
	Phase             string           `json:"phase"`
	Attempts          int              `json:"attempts"`
	NextAttemptAt     time.Time        `json:"nextAttemptAt"`
	ClaimedUntil      *time.Time       `json:"claimedUntil"`
	LastError         *string          `json:"lastError"`
	TelegramMessageID *int             `json:"telegramMessageId"`
	CreatedAt         time.Time        `json:"createdAt"`
	UpdatedAt         time.Time        `json:"updatedAt"`
	DoneAt            *time.Time       `json:"doneAt"`
}

const outgoingColumns = `id, dedup_key, method, chat_id, order_key, params, fallback, status, phase, attempts,
	next_attempt_at, claimed_until, last_error, telegram_message_id, created_at, updated_at, done_at`

func scanOutgoing(s scanner) (Outgoing, error) {
	var (
		r                                 Outgoing
		chat, params                      string
		fallback, lastErr                 sql.NullString
		msgID                             sql.NullInt64
		next, claimed, created, upd, done store.Timestamp
	)
	if err := s.Scan(&r.ID, &r.DedupKey, &r.Method, &chat, &r.OrderKey, &params, &fallback, &r.Status, &r.Phase,
		&r.Attempts, &next, &claimed, &lastErr, &msgID, &created, &upd, &done); err != nil {
		return Outgoing{}, err
	}
	r.ChatID = TelegramID(chat)
	if err := json.Unmarshal([]byte(params), &r.Params); err != nil {
		return Outgoing{}, fmt.Errorf("outgoing %d params: %w", r.ID, err)
	}
	if fallback.Valid {
		r.Fallback = &NewNotification{}
		if err := json.Unmarshal([]byte(fallback.String), r.Fallback); err != nil {
			return Outgoing{}, fmt.Errorf("outgoing %d fallback: %w", r.ID, err)
		}
	}
	if lastErr.Valid {
		r.LastError = &lastErr.String
	}
	if msgID.Valid {
		id := int(msgID.Int64)
		r.TelegramMessageID = &id
	}
	r.NextAttemptAt, r.ClaimedUntil = next.Time, claimed.Ptr()
	r.CreatedAt, r.UpdatedAt, r.DoneAt = created.Time, upd.Time, done.Ptr()
	return r, nil
}

// dueOutgoingSQL picks the records that may go now: due (or claimed by a
// sender whose claim ran out), and first of their order key among the
// unfinished ones, so one chat's calls go out one at a time in id order.
const dueOutgoingSQL = `
	select ` + outgoingColumns + ` from bot_outgoing m
	where ((m.status = 'pending' and m.next_attempt_at <= ?) or (m.status = 'sending' and m.claimed_until <= ?))
	  and not exists (
	    select 1 from bot_outgoing e
	    where e.order_key = m.order_key and e.id < m.id and e.status in ('pending', 'sending'))
	order by m.id
	limit ?`

// nextOutgoingSQL is the earliest future time a first-of-its-key record
// comes due or a claim runs out.
const nextOutgoingSQL = `
	select min(t) from (
	  select min(m.next_attempt_at) as t from bot_outgoing m
	  where m.status = 'pending' and m.next_attempt_at > ?
	    and not exists (
	      select 1 from bot_outgoing e
	      where e.order_key = m.order_key and e.id < m.id and e.status in ('pending', 'sending'))
	  union all
	  select min(claimed_until) as t from bot_outgoing where status = 'sending' and claimed_until > ?
	) due`

func (o *Onboarding) dueOutgoing(ctx context.Context, now time.Time, limit int) ([]Outgoing, error) {
	rows, err := o.db.Read.QueryContext(ctx, dueOutgoingSQL, store.TS(now), store.TS(now), limit)
	if err != nil {
		return nil, fmt.Errorf("due outgoing: %w", err)
	}
	defer rows.Close()
	var list []Outgoing
	for rows.Next() {
		r, err := scanOutgoing(rows)
		if err != nil {
			return nil, fmt.Errorf("due outgoing: %w", err)
		}
		list = append(list, r)
	}
	return list, rows.Err()
}

func (o *Onboarding) nextOutgoing(ctx context.Context, now time.Time) (time.Time, error) {
	var next store.Timestamp
	if err := o.db.Read.QueryRowContext(ctx, nextOutgoingSQL, store.TS(now), store.TS(now)).Scan(&next); err != nil {
		return time.Time{}, fmt.Errorf("next outgoing: %w", err)
	}
	return next.Time, nil
}

// claimOutgoing makes this sender the owner until until of each record that
// is still due, in one transaction, and returns those it claimed; two
// senders never both own a record.
func (o *Onboarding) claimOutgoing(ctx context.Context, recs []Outgoing, now, until time.Time) ([]Outgoing, error) {
	var claimed []Outgoing
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		claimed = claimed[:0]
		for _, r := range recs {
			res, err := tx.ExecContext(ctx, `
				update bot_outgoing set status = 'sending', claimed_until = ?, updated_at = ?
				where id = ? and ((status = 'pending' and next_attempt_at <= ?) or (status = 'sending' and claimed_until <= ?))`,
				store.TS(until), store.TS(now), r.ID, store.TS(now), store.TS(now))
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				r.Status, r.ClaimedUntil = OutgoingSending, &until
				claimed = append(claimed, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err // rolled back: nothing is claimed
	}
	return claimed, nil
}

// runSender makes the recorded calls while this process holds the bot's
// sender lease (telegram.SenderLeaseName), until ctx ends: Telegram's limits
// count per bot, and the limiter that keeps to them counts in this process
// only, so one process at a time sends for the bot. The others stand by and
// take over when the holder stops or dies.
func (o *Onboarding) runSender(ctx context.Context) {
	lease := store.LeaseOpts{
		Name:   telegram.SenderLeaseName(o.botID),
		Owner:  o.owner,
		TTL:    LeaseTTL,
		Logger: o.log.With(slog.String("role", "sender"), slog.Int64("bot_id", o.botID)),
	}
	_ = o.db.RunExclusive(ctx, lease, func(ctx context.Context, prev store.Lease) error {
		if prev.Owner != "" {
			// Another process sent for this bot until prev.ExpiresAt; its
			// buckets were not ours.
			o.limiter.Handover(o.botID, prev.ExpiresAt)
		}
		o.send(ctx)
		return nil
	})
}

// send makes the recorded calls until ctx ends, then waits for the calls
// in flight. It wakes when records are committed (sendWake), when a call
// finishes, when the next record comes due, and at least every
// senderIdleCheck (records of other processes, expired claims).
func (o *Onboarding) send(ctx context.Context) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, senderWorkers)
	defer wg.Wait()
	for {
		next := o.dispatch(ctx, &wg, sem)
		wait := senderIdleCheck
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(o.db.Now()), time.Millisecond))
		}
		t := time.NewTimer(wait)
		select {
		case <-o.sendWake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// dispatch claims, in one transaction, the records that may go now (or, for
// a message, within reserveAhead) as many as there are free workers, and
// starts their calls; it returns the earliest time another record may (zero:
// none known). The rate limits are taken by the calls themselves (pace), not
// here: a round is a read and a write, slow on a busy machine, and a Take at
// the round's one instant would let one message of the bot's through per
// round, whatever the limits allow.
func (o *Onboarding) dispatch(ctx context.Context, wg *sync.WaitGroup, sem chan struct{}) time.Time {
	if ctx.Err() != nil {
		return time.Time{}
	}
	free := cap(sem) - len(sem) // only dispatch fills sem, so free only grows meanwhile
	if free == 0 {
		return time.Time{} // a finishing call wakes the sender again
	}
	now := o.db.Now()
	recs, err := o.dueOutgoing(ctx, now, 4*senderWorkers)
	if err != nil {
		if ctx.Err() == nil {
			o.log.Error("read due outgoing messages", slog.Any("err", err))
		}
		return now.Add(time.Second)
	}
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	var pick []Outgoing
	for _, r := range recs {
		if len(pick) == free {
			break
		}
		if r.Phase == phaseTelegram && r.Method == methodSendMessage {
			if at := o.limiter.When(o.chat(r.ChatID), now); at.Sub(now) > reserveAhead {
				earliest(at)
				continue
			}
		}
		pick = append(pick, r)
	}
	claimed, err := o.claimOutgoing(ctx, pick, now, now.Add(claimTTL))
	if err != nil && ctx.Err() == nil {
		o.log.Error("claim outgoing messages", slog.Int("messages", len(pick)), slog.Any("err", err))
	}
	for _, r := range claimed {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() {
				<-sem
				wake(o.sendWake)
			}()
			o.deliver(ctx, r)
		})
	}
	if n, err := o.nextOutgoing(ctx, now); err == nil && !n.IsZero() {
		earliest(n)
	}
	return next
}

func (o *Onboarding) chat(tg TelegramID) telegram.Chat {
	id, _ := strconv.ParseInt(string(tg), 10, 64)
	return telegram.Chat{Bot: o.botID, ID: id}
}

// reserveAhead is how far ahead a call books its slot under the rate limits
// (pace), and how soon a message's slot must come for dispatch to claim it:
// more than the bot's slots for every worker (8 at 30 a second: 267 ms),
// less than a chat's own interval (1 s), so a worker never sits out a chat's
// pause.
const reserveAhead = 500 * time.Millisecond

// pace waits for the slot of a message to chat: it books the bot's next slot
// (telegram.Limiter.Reserve), waiting first for the chat's own interval when
// that is what holds it back, then waits for the slot. It reports false, with
// the time to try again, when the slot is further off than reserveAhead (a
// pause after a 429); the record then waits without an attempt counted.
func (o *Onboarding) pace(ctx context.Context, chat telegram.Chat) (time.Time, bool) {
	for range 3 {
		now := o.db.Now()
		at, ok := o.limiter.Reserve(chat, now, reserveAhead)
		if at.Sub(now) > reserveAhead || !sleepCtx(ctx, at.Sub(now)) {
			return at, false
		}
		if ok {
			return at, true
		}
	}
	return o.limiter.When(chat, o.db.Now()), false
}

// delivery is the result of one attempt.
type delivery struct {
	status      string    // OutgoingSent, OutgoingNotified, OutgoingFailed, or OutgoingPending (retry)
	phase       string    // the phase afterwards
	retryAt     time.Time // for a retry
	messageID   int       // Telegram's message id of a sent message
	err         string
	unreachable bool // Telegram said the user cannot be reached
	deferred    bool // the rate limits held it back: no attempt was made
}

// deliver makes one attempt of a claimed record and records its result. The
// attempt finishes even when ctx is cancelled meanwhile (bounded by workContext).
func (o *Onboarding) deliver(ctx context.Context, r Outgoing) {
	wctx, cancel := workContext(ctx)
	defer cancel()
	var d delivery
	if r.Phase == phaseFallback {
		d = o.deliverFallback(wctx, r)
	} else {
		d = o.deliverTelegram(wctx, r)
	}
	if err := o.recordDelivery(wctx, r, d); err != nil {
		o.log.Error("record an outgoing message's result", slog.Int64("message_id", r.ID), slog.Any("err", err))
		return
	}
	metricMessages.WithLabelValues(r.Method, deliveryOutcome(d)).Inc()
	level := slog.LevelDebug
	if d.status == OutgoingFailed {
		level = slog.LevelWarn
	}
	o.log.LogAttrs(ctx, level, "outgoing message attempt",
		slog.Int64("message_id", r.ID), slog.String("method", r.Method), slog.String("user_id", string(r.ChatID)),
		slog.String("outcome", deliveryOutcome(d)), slog.String("error", d.err))
}

// deliveryOutcome is one attempt's outcome label and log value, one of
// deliveryOutcomes.
func deliveryOutcome(d delivery) string {
	switch {
	case d.status == OutgoingPending && d.phase == phaseFallback:
		return phaseFallback
	case d.status == OutgoingPending:
		return outcomeRetry
	}
	return d.status
}

func (o *Onboarding) deliverTelegram(ctx context.Context, r Outgoing) delivery {
	now := o.db.Now()
	if r.Method == methodSendMessage {
		unreachable, err := o.isUnreachable(ctx, r.ChatID)
		if err != nil {
			return delivery{status: OutgoingPending, phase: phaseTelegram, retryAt: now.Add(time.Second), err: err.Error()}
		}
		if unreachable {
			return unreachableDelivery(r, "the user is unreachable (blocked the bot or never started it)")
		}
		// The limits' slot is booked right before the call (pace): booked
		// when the record was claimed, the call would leave up to a commit
		// later than the limiter counted it.
		if at, ok := o.pace(ctx, o.chat(r.ChatID)); !ok {
			return delivery{status: OutgoingPending, phase: phaseTelegram, retryAt: at, deferred: true}
		}
	}
	msgID, err := o.call(ctx, r)
	if err == nil || (r.Method == methodEditReplyMarkup && telegram.IsMessageNotModified(err)) {
		return delivery{status: OutgoingSent, phase: r.Phase, messageID: msgID}
	}
	f := telegram.Classify(err)
	switch f.Class {
	case telegram.ClassRetryAfter:
		o.limiter.PauseChat(o.chat(r.ChatID), now.Add(f.RetryAfter))
		return delivery{status: OutgoingPending, phase: phaseTelegram, retryAt: now.Add(f.RetryAfter), err: f.Error()}
	case telegram.ClassPermanent:
		if f.Unreachable {
			d := unreachableDelivery(r, f.Error())
			d.unreachable = true
			return d
		}
		return delivery{status: OutgoingFailed, phase: phaseTelegram, err: f.Error()}
	default:
		return delivery{status: OutgoingPending, phase: phaseTelegram, retryAt: now.Add(backoff(r.Attempts, 500*time.Millisecond, maxSendBackoff)), err: f.Error()}
	}
}

// unreachableDelivery moves a record whose user cannot be reached to its
// fallback, or fails it when it has none.
func unreachableDelivery(r Outgoing, reason string) delivery {
	if r.Fallback != nil {
		return delivery{status: OutgoingPending, phase: phaseFallback, err: reason}
	}
	return delivery{status: OutgoingFailed, phase: phaseTelegram, err: reason}
}

func (o *Onboarding) deliverFallback(ctx context.Context, r Outgoing) delivery {
	if r.Fallback == nil {
		return delivery{status: OutgoingFailed, phase: phaseFallback, err: "no fallback recorded"}
	}
	_, err := o.backend.AddNotification(ctx, *r.Fallback)
	if err == nil {
		return delivery{status: OutgoingNotified, phase: phaseFallback}
	}
	var api *APIError
	if errors.As(err, &api) && !api.Temporary() {
		return delivery{status: OutgoingFailed, phase: phaseFallback, err: err.Error()}
	}
	return delivery{status: OutgoingPending, phase: phaseFallback,
		retryAt: o.db.Now().Add(backoff(r.Attempts, 500*time.Millisecond, maxSendBackoff)), err: err.Error()}
}

// call makes the record's Bot API call and returns the sent message's id.
func (o *Onboarding) call(ctx context.Context, r Outgoing) (int, error) {
	chatID, err := strconv.ParseInt(string(r.ChatID), 10, 64)
	if err != nil && r.Method != methodAnswerCallback {
		return 0, fmt.Errorf("chat id %q: %w", r.ChatID, err)
	}
	chat := telego.ChatID{ID: chatID}
	switch r.Method {
	case methodSendMessage:
		p := &telego.SendMessageParams{ChatID: chat, Text: r.Params.Text}
		if mk := inlineKeyboard(r.Params.Buttons); mk != nil {
			p.ReplyMarkup = mk
		}
		m, err := o.tg.SendMessage(ctx, p)
		if err != nil {
			return 0, err
		}
		return m.MessageID, nil
	case methodEditReplyMarkup:
		_, err := o.tg.EditMessageReplyMarkup(ctx, &telego.EditMessageReplyMarkupParams{
			ChatID: chat, MessageID: r.Params.MessageID, ReplyMarkup: inlineKeyboard(r.Params.Buttons),
		})
		return 0, err
	case methodAnswerCallback:
		return 0, o.tg.AnswerCallbackQuery(ctx, &telego.AnswerCallbackQueryParams{
			CallbackQueryID: r.Params.CallbackQueryID, Text: r.Params.Text,
		})
	}
	return 0, fmt.Errorf("unknown method %q", r.Method)
}

// inlineKeyboard is the markup of buttons; nil for none.
func inlineKeyboard(rows [][]button) *telego.InlineKeyboardMarkup {
	if len(rows) == 0 {
		return nil
	}
	mk := &telego.InlineKeyboardMarkup{InlineKeyboard: make([][]telego.InlineKeyboardButton, 0, len(rows))}
	for _, row := range rows {
		out := make([]telego.InlineKeyboardButton, 0, len(row))
		for _, b := range row {
			out = append(out, telego.InlineKeyboardButton{Text: b.Text, CallbackData: b.Data, URL: b.URL})
		}
		mk.InlineKeyboard = append(mk.InlineKeyboard, out)
	}
	return mk
}

// recordDelivery writes an attempt's result, if this sender still owns the
// record (its claim did not run out and pass to another sender).
func (o *Onboarding) recordDelivery(ctx context.Context, r Outgoing, d delivery) error {
	return o.db.Tx(ctx, func(tx *sql.Tx) error {
		now := o.db.Now()
		var (
			doneAt, nextAt store.Timestamp
			lastErr        any
			msgID          any
			attempts       = r.Attempts
		)
		switch d.status {
		case OutgoingSent, OutgoingNotified:
			doneAt, nextAt = store.TS(now), store.TS(r.NextAttemptAt)
			if d.messageID != 0 {
				msgID = d.messageID
			}
		case OutgoingFailed:
			nextAt, attempts, lastErr = store.TS(r.NextAttemptAt), attempts+1, d.err
		default: // a retry, in this phase or the fallback's
			nextAt, attempts, lastErr = store.TS(now), attempts+1, d.err
			if d.deferred { // no attempt was made: the last one's error stays
				attempts, lastErr = r.Attempts, r.LastError
			}
			if !d.retryAt.IsZero() {
				nextAt = store.TS(d.retryAt)
			}
		}
		if _, err := tx.ExecContext(ctx, `
			update bot_outgoing set status = ?, phase = ?, attempts = ?, next_attempt_at = ?, claimed_until = null,
				last_error = ?, telegram_message_id = coalesce(?, telegram_message_id), updated_at = ?, done_at = ?
			where id = ? and status = 'sending' and claimed_until = ?`,
			d.status, d.phase, attempts, nextAt, lastErr, msgID, store.TS(now), doneAt,
			r.ID, store.TS(*r.ClaimedUntil)); err != nil {
			return fmt.Errorf("record outgoing %d: %w", r.ID, err)
		}
		if d.unreachable {
			if _, err := tx.ExecContext(ctx, `
				insert into bot_unreachable (telegram_id, reason, since) values (?, ?, ?)
				on conflict (telegram_id) do update set reason = excluded.reason`,
				string(r.ChatID), d.err, store.TS(now)); err != nil {
				return fmt.Errorf("mark %s unreachable: %w", r.ChatID, err)
			}
		}
		return nil
	})
}

func (o *Onboarding) isUnreachable(ctx context.Context, tg TelegramID) (bool, error) {
	var n int
	if err := o.db.Read.QueryRowContext(ctx, `select count(*) from bot_unreachable where telegram_id = ?`, string(tg)).Scan(&n); err != nil {
		return false, fmt.Errorf("read unreachable: %w", err)
	}
	return n > 0, nil
}

// OutgoingFilter selects outgoing records for ListOutgoing; a zero Status
// lists every status. Records come newest first.
type OutgoingFilter struct {
	Status string
	Limit  int
}

// ListOutgoing lists outgoing records for the operator.
func (o *Onboarding) ListOutgoing(ctx context.Context, f OutgoingFilter) ([]Outgoing, error) {
	switch f.Status {
	case "", OutgoingPending, OutgoingSending, OutgoingSent, OutgoingNotified, OutgoingFailed:
	default:
		return nil, invalidf("status must be pending, sending, sent, notified or failed, not %q", f.Status)
	}
	rows, err := o.db.Read.QueryContext(ctx,
		`select `+outgoingColumns+` from bot_outgoing where (? = '' or status = ?) order by id desc limit ?`,
		f.Status, f.Status, ClampPendingLimit(f.Limit))
	if err != nil {
		return nil, fmt.Errorf("list outgoing: %w", err)
	}
	defer rows.Close()
	list := make([]Outgoing, 0)
	for rows.Next() {
		r, err := scanOutgoing(rows)
		if err != nil {
			return nil, fmt.Errorf("list outgoing: %w", err)
		}
		list = append(list, r)
	}
	return list, rows.Err()
}

// ErrOutgoingNotFound is an unknown outgoing record; ErrOutgoingNotFailed is
// a redrive of a record that did not fail.
const (
	ErrOutgoingNotFound  = Error("outgoing message not found")
	ErrOutgoingNotFailed = Error("outgoing message has not failed")
)

// RedriveOutgoing puts a failed record back in line at once, attempts reset.
func (o *Onboarding) RedriveOutgoing(ctx context.Context, id int64) (Outgoing, error) {
	var rec Outgoing
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		r, err := scanOutgoing(tx.QueryRowContext(ctx, `select `+outgoingColumns+` from bot_outgoing where id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrOutgoingNotFound
		}
		if err != nil {
			return fmt.Errorf("read outgoing %d: %w", id, err)
		}
		if r.Status != OutgoingFailed {
			return ErrOutgoingNotFailed
		}
		now := o.db.Now()
		if _, err := tx.ExecContext(ctx,
			`update bot_outgoing set status = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ? where id = ?`,
			store.TS(now), store.TS(now), id); err != nil {
			return fmt.Errorf("redrive outgoing %d: %w", id, err)
		}
		if r.Phase == phaseTelegram {
			if _, err := tx.ExecContext(ctx, `delete from bot_unreachable where telegram_id = ?`, string(r.ChatID)); err != nil {
				return fmt.Errorf("redrive outgoing %d: %w", id, err)
			}
		}
		rec, err = scanOutgoing(tx.QueryRowContext(ctx, `select `+outgoingColumns+` from bot_outgoing where id = ?`, id))
		return err
	})
	if err == nil {
		wake(o.sendWake)
	}
	return rec, err
}
