package onboarding

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mymmrac/telego"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/telegram"
	"switchyard/telemetry"
)

// DMQueue is the queue every Telegram call of the bot goes through — its
// DMs, the edits of their keyboards, the answers to button presses — and the
// web notifications that stand in for a DM Telegram could not deliver. It is
// a queue like any other (queue/): retries, dead letters and redrive are the
// queue's, and the console's Queues page shows it.
const DMQueue = "onboarding.dm"

// The Bot API methods the bot calls through DMQueue.
const (
	methodSendMessage     = "sendMessage"
	methodEditReplyMarkup = "editMessageReplyMarkup"
	methodAnswerCallback  = "answerCallbackQuery"
)

// Phases of a DM: what its message does when handled.
const (
	phaseTelegram = "telegram" // call Telegram
	phaseFallback = "fallback" // post the web notification (POST /bot/notification)
)

// Outcomes of one delivery attempt, the values of the messages counter's
// outcome label and of the log key.
const (
	outcomeSent     = "sent"     // Telegram accepted the call
	outcomeRetry    = "retry"    // it failed and is tried again (backoff, retry_after, the rate limits)
	outcomeFallback = "fallback" // Telegram cannot reach the user: the web notification goes instead
	outcomeNotified = "notified" // the web notification was stored
	outcomeFailed   = "failed"   // a permanent failure: the message is a dead letter an operator may redrive
)

const (
	// senderWorkers is how many messages of DMQueue one process handles at
	// once (across chats; one chat's go one at a time, by their order key).
	// A worker waiting for a chat's own interval (a second) waits in memory,
	// so there are enough of them to keep the bot's 30 a second meanwhile.
	senderWorkers = 32
	// dmMaxAttempts is how often a message is tried before it is
	// dead-lettered: with the backoff below, a Telegram outage of about
	// eight hours is ridden out.
	dmMaxAttempts = 100
	// minSendBackoff and maxSendBackoff bound the wait between retries of a
	// retryable failure (5xx, network errors, timeouts).
	minSendBackoff = 500 * time.Millisecond
	maxSendBackoff = 5 * time.Minute
	// maxPacingWait is the longest a worker waits in memory for the rate
	// limits to allow a message (a chat's 1 s interval behind the bot's
	// pace); a longer wait — a chat or the bot paused after a 429, or after
	// a takeover — puts the message back in the queue until then.
	maxPacingWait = 3 * time.Second
	// reserveAhead is how far ahead a message books its slot of the bot's
	// limit (telegram.Limiter.Reserve): more than the bot's slots for the
	// workers that can be ready at once, less than a chat's own interval.
	reserveAhead = 500 * time.Millisecond
)

// dmRetry is DMQueue's retry policy.
var dmRetry = queue.RetryPolicy{MaxAttempts: dmMaxAttempts, MinBackoff: minSendBackoff, MaxBackoff: maxSendBackoff}

// button is one inline keyboard button: callback data or a URL.
type button struct {
	Text string `json:"text"`
	Data string `json:"data,omitempty"`
	URL  string `json:"url,omitempty"`
}

// outParams are the parameters of one call, as the message carries them.
type outParams struct {
	Text            string     `json:"text,omitempty"`
	Buttons         [][]button `json:"buttons,omitempty"`
	MessageID       int        `json:"messageId,omitempty"`
	CallbackQueryID string     `json:"callbackQueryId,omitempty"`
}

// outgoingMessage is a call a handler asks for. Key names it within its cause
// (the queue's idempotency key is "<cause>:<Key>"); ChatID "" means the user
// has no chat with the bot, and only the Fallback can reach them.
type outgoingMessage struct {
	Key      string
	Method   string
	ChatID   contract.TelegramID
	Params   outParams
	Fallback *contract.NewNotification
}

// dm is the body of a DMQueue message (JSON). Migration 00011 writes the
// same shape for the calls it carried over from the table before it.
type dm struct {
	// Key is the message's idempotency key, "<cause>:<message key>" (a
	// fallback's: the DM's and ":fallback").
	Key    string `json:"key"`
	Method string `json:"method"`
	// ChatID is absent for a DM only its fallback can deliver (a user
	// without Telegram): "" is no Telegram id, and would not decode.
	ChatID   contract.TelegramID       `json:"chatId,omitempty"`
	Params   outParams                 `json:"params"`
	Fallback *contract.NewNotification `json:"fallback,omitempty"`
	Phase    string                    `json:"phase"`
	// Traceparent is the span that asked for the call, when it was traced:
	// the handling of its event (bot.event.handle) or update
	// (bot.update.handle), or, for a fallback, the attempt that found the
	// user unreachable (bot.dm.send). Each attempt at the call is a span of
	// that trace. Absent in a message recorded untraced, or by migration
	// 00011.
	Traceparent string `json:"traceparent,omitempty"`
}

// orderKey keeps one chat's calls in order; a DM that only its fallback can
// deliver (no chat) is ordered with the account's other notifications.
func (d dm) orderKey() string {
	if d.Phase == phaseFallback && d.Fallback != nil {
		return "uid:" + strconv.FormatInt(int64(d.Fallback.UID), 10)
	}
	return "chat:" + string(d.ChatID)
}

// recordDMs sends msgs for cause to DMQueue inside tx, so they exist if and
// only if the cause's effects commit. A message whose key was sent before is
// left alone, so a cause yields its calls once. It returns how many it added.
// Each message carries the traceparent of ctx's span (the cause's handling).
func (o *Bot) recordDMs(ctx context.Context, tx *sql.Tx, cause string, msgs []outgoingMessage) (int, error) {
	added := 0
	tp := telemetry.Traceparent(ctx)
	for _, m := range msgs {
		d := dm{Key: cause + ":" + m.Key, Method: m.Method, ChatID: m.ChatID, Params: m.Params, Fallback: m.Fallback, Phase: phaseTelegram,
			Traceparent: tp}
		if m.ChatID == "" {
			if m.Fallback == nil {
				continue // nobody to send it to
			}
			d.Phase = phaseFallback
		}
		res, err := o.sendDM(ctx, tx, d)
		if err != nil {
			return 0, err
		}
		if !res.Duplicate {
			added++
		}
	}
	return added, nil
}

func (o *Bot) sendDM(ctx context.Context, tx *sql.Tx, d dm) (queue.SendResult, error) {
	body, err := json.Marshal(d)
	if err != nil {
		return queue.SendResult{}, fmt.Errorf("DM %s: %w", d.Key, err)
	}
	res, err := o.dms.SendTx(ctx, tx, queue.Message{Body: body, Key: d.Key, OrderKey: d.orderKey()})
	if err != nil {
		return queue.SendResult{}, fmt.Errorf("record DM %s: %w", d.Key, err)
	}
	return res, nil
}

// runSender handles DMQueue while this process holds the bot's sender lease
// (telegram.SenderLeaseName), until ctx ends: Telegram's limits count per
// bot, and the limiter that keeps to them counts in this process only, so
// one process at a time sends for the bot. The others stand by and take over
// when the holder stops or dies. When the lease is lost the workers stop as
// at the end: the calls in hand finish and are recorded, and the other
// messages wait in the queue for the next holder.
func (o *Bot) runSender(ctx context.Context) {
	lease := store.LeaseOpts{
		Name:   telegram.SenderLeaseName(o.botID),
		Owner:  o.owner,
		TTL:    LeaseTTL,
		Logger: o.log.With(slog.String("role", "sender"), slog.Int64("bot_id", o.botID)),
	}
	_ = o.db.RunExclusive(ctx, lease, func(held context.Context, prev store.Lease) error {
		if prev.Owner != "" {
			// Another process sent for this bot until prev.ExpiresAt; its
			// buckets were not ours.
			o.limiter.Handover(o.botID, prev.ExpiresAt)
		}
		// The handlers' context outlives held: a call in hand is finished
		// and recorded; held only ends their waits for the rate limits.
		w := o.dms.Start(context.WithoutCancel(held), queue.WorkerOpts{
			Handler:      func(ctx context.Context, m queue.Message) error { return o.deliver(ctx, held, m) },
			Concurrency:  senderWorkers,
			PollInterval: o.senderPoll,
		})
		<-held.Done()
		sctx, cancel := workContext(ctx)
		defer cancel()
		return w.Stop(sctx)
	})
}

// errPacing is the reason a message goes back to the queue for the rate limits.
var errPacing = errors.New("waiting for the rate limits")

// deliver handles one message of DMQueue: the call (or the fallback) and its
// record. held ends when this process stops sending for the bot. The error
// tells the queue what happens next: nil (done), retryable (backoff),
// queue.RetryAfter (a 429's retry_after, or the rate limits) or
// queue.Permanent (a dead letter).
//
// Each attempt is a span, bot.dm.send, continuing the trace of the DM's
// cause (its traceparent); the Bot API call (telegram/bot.go's client span)
// or the fallback's POST /bot/notification is its child.
func (o *Bot) deliver(ctx, held context.Context, m queue.Message) error {
	var d dm
	if err := json.Unmarshal(m.Body, &d); err != nil || d.Key == "" {
		o.log.Error("DM message that does not decode; dead-lettered", slog.String("message_id", string(m.ID)), slog.Any("err", err))
		return queue.Permanent(fmt.Errorf("decode DM %s: %w", m.ID, err))
	}
	ctx, span := sendSpan(ctx, m, d)
	var (
		outcome string
		err     error
	)
	if d.Phase == phaseFallback {
		outcome, err = o.deliverFallback(ctx, m, d)
	} else {
		outcome, err = o.deliverTelegram(ctx, held, m, d)
	}
	endSend(span, outcome, err)
	metricMessages.WithLabelValues(d.Method, outcome).Inc()
	level := slog.LevelDebug
	if outcome == outcomeFailed {
		level = slog.LevelWarn
	}
	var reason string
	if err != nil {
		reason = err.Error()
	}
	o.log.LogAttrs(ctx, level, "DM attempt",
		slog.String("message_id", string(m.ID)), slog.String("dm_key", d.Key), slog.String("method", d.Method),
		slog.String("user_id", string(d.ChatID)), slog.Int("attempt", m.Attempt),
		slog.String("outcome", outcome), slog.String("error", reason))
	return err
}

// sendSpan starts the span of one attempt at d, bot.dm.send, in the trace
// of d's cause.
func sendSpan(ctx context.Context, m queue.Message, d dm) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, "bot.dm.send") // ctx as it is, and a span that does nothing
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.destination.name", DMQueue),
		attribute.String("messaging.message.id", string(m.ID)),
		telemetry.String("idempotency.key", d.Key),
		attribute.String("telegram.method", d.Method),
		attribute.String("bot.dm.phase", d.Phase),
		attribute.Int("bot.dm.attempt", m.Attempt),
	}
	if d.ChatID != "" {
		attrs = append(attrs, telemetry.String("telegram.chat_id", string(d.ChatID)))
	}
	if d.Fallback != nil && d.Fallback.UID != 0 {
		attrs = append(attrs, telemetry.String("bot.magnet_uid", strconv.FormatInt(int64(d.Fallback.UID), 10)))
	}
	// The queue's consumer span (queue.handle) already continues the DM's
	// trace when its message carried it; a DM recorded before messages did
	// carries it in its body alone.
	parent := ctx
	if want, ok := telemetry.Parse(d.Traceparent); ok && trace.SpanContextFromContext(ctx).TraceID() != want.TraceID() {
		parent = telemetry.Resume(ctx, d.Traceparent)
	}
	return telemetry.Start(parent, "bot.dm.send",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// endSend ends an attempt's span with its outcome. Waiting for the rate
// limits is no failure of the attempt.
func endSend(span trace.Span, outcome string, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attribute.String("bot.dm.outcome", outcome))
	if errors.Is(err, errPacing) {
		err = nil
	}
	telemetry.End(span, err)
}

func (o *Bot) deliverTelegram(ctx, held context.Context, m queue.Message, d dm) (string, error) {
	switch d.Method {
	case methodSendMessage, methodEditReplyMarkup, methodAnswerCallback:
	default:
		return outcomeFailed, queue.Permanent(fmt.Errorf("unknown method %q", d.Method))
	}
	if _, err := strconv.ParseInt(string(d.ChatID), 10, 64); err != nil && d.Method != methodAnswerCallback {
		return outcomeFailed, queue.Permanent(fmt.Errorf("chat id %q: %w", d.ChatID, err))
	}
	chat := o.chat(d.ChatID)
	if d.Method == methodSendMessage {
		unreachable, err := o.isUnreachable(ctx, d.ChatID)
		if err != nil {
			return outcomeRetry, err
		}
		if unreachable {
			return o.unreachable(ctx, m, d, false, "the user is unreachable (blocked the bot or never started it)")
		}
		// The limits' slot is booked right before the call (pace): booked
		// when the message was received, the call would leave later than
		// the limiter counted it.
		if at, ok := o.pace(ctx, held, chat); !ok {
			return outcomeRetry, queue.RetryAfter(max(at.Sub(o.db.Now()), time.Millisecond), errPacing)
		}
	}
	msgID, err := o.call(ctx, d)
	if err == nil || (d.Method == methodEditReplyMarkup && telegram.IsMessageNotModified(err)) {
		return outcomeSent, o.delivered(ctx, m, d, outcomeSent, msgID)
	}
	if ctx.Err() != nil {
		return outcomeRetry, err // a hard stop: the message comes back after its timeout
	}
	f := telegram.Classify(err)
	switch f.Class {
	case telegram.ClassRetryAfter:
		o.limiter.PauseChat(chat, o.db.Now().Add(f.RetryAfter))
		return outcomeRetry, queue.RetryAfter(f.RetryAfter, f.Err)
	case telegram.ClassPermanent:
		if f.Unreachable {
			return o.unreachable(ctx, m, d, true, f.Err.Error())
		}
		return outcomeFailed, queue.Permanent(f.Err) // the queue names the class; f.Error() would name it again
	}
	return outcomeRetry, f.Err
}

// unreachable settles a DM Telegram cannot deliver (marked says it just
// told us so: the user is remembered in bot_unreachable). A DM with a
// fallback is done: in one transaction its web notification is queued
// (keyed by the DM, so it is queued once) and the DM acknowledged. One
// without a fallback fails for good. The attempt's span (ctx's) gets an
// event saying which, and the fallback's message carries the span's
// traceparent, so its delivery continues this trace.
func (o *Bot) unreachable(ctx context.Context, m queue.Message, d dm, marked bool, reason string) (string, error) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		name := "bot.dm.unreachable"
		if d.Fallback != nil {
			name = "bot.dm.fallback"
		}
		span.AddEvent(name, trace.WithAttributes(attribute.Bool("bot.dm.marked_unreachable", marked)))
	}
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		if marked {
			if _, err := tx.ExecContext(ctx, markUnreachableSQL, string(d.ChatID), reason, store.TS(o.db.Now())); err != nil {
				return fmt.Errorf("mark %s unreachable: %w", d.ChatID, err)
			}
		}
		if d.Fallback == nil {
			return nil
		}
		fb := d
		fb.Key, fb.Phase, fb.Traceparent = d.Key+":fallback", phaseFallback, telemetry.Traceparent(ctx)
		if _, err := o.sendDM(ctx, tx, fb); err != nil {
			return err
		}
		return o.dms.AckTx(ctx, tx, m)
	})
	switch {
	case err != nil:
		return outcomeRetry, err
	case d.Fallback == nil:
		return outcomeFailed, queue.Permanent(errors.New(reason))
	}
	return outcomeFallback, nil
}

func (o *Bot) deliverFallback(ctx context.Context, m queue.Message, d dm) (string, error) {
	if d.Fallback == nil {
		return outcomeFailed, queue.Permanent(errors.New("no fallback recorded"))
	}
	_, err := o.backend.AddNotification(ctx, *d.Fallback)
	if err == nil {
		return outcomeNotified, o.delivered(ctx, m, d, outcomeNotified, 0)
	}
	var api *APIError
	if errors.As(err, &api) && !api.Temporary() {
		return outcomeFailed, queue.Permanent(err)
	}
	return outcomeRetry, err
}

const (
	insertDeliverySQL = `
		insert into bot_deliveries (dm_key, method, chat_id, text, outcome, telegram_message_id, attempts, delivered_at, traceparent)
		values (?, ?, ?, ?, ?, ?, ?, ?, ?)
		on conflict (dm_key) do nothing`
	markUnreachableSQL = `
		insert into bot_unreachable (telegram_id, reason, since) values (?, ?, ?)
		on conflict (telegram_id) do update set reason = excluded.reason`
)

// delivered records a delivered DM in bot_deliveries, with the traceparent
// of the attempt that delivered it (ctx's span), and acknowledges its
// message, in one transaction. Telegram has the call already, so the record
// is tried a few times: a delivery whose record is lost is the one way a DM
// goes out twice (the message comes back after its timeout).
func (o *Bot) delivered(ctx context.Context, m queue.Message, d dm, outcome string, msgID int) error {
	text := d.Params.Text
	if outcome == outcomeNotified {
		text = d.Fallback.Text
	}
	var tgID any
	if msgID != 0 {
		tgID = msgID
	}
	ctx = context.WithoutCancel(ctx) // recorded even when the worker is stopping: the call happened
	tp := telemetry.Traceparent(ctx)
	var err error
	for try := range 5 {
		if try > 0 {
			time.Sleep(time.Duration(try*try) * 50 * time.Millisecond)
		}
		err = o.db.Tx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, insertDeliverySQL, d.Key, d.Method, string(d.ChatID), text, outcome, tgID,
				m.Attempt-1, store.TS(o.db.Now()), tp); err != nil {
				return fmt.Errorf("record delivery %s: %w", d.Key, err)
			}
			return o.dms.AckTx(ctx, tx, m)
		})
		if err == nil || errors.Is(err, queue.ErrNotFound) {
			break // acknowledged, or delivered again meanwhile: nothing to retry here
		}
	}
	if err != nil {
		o.log.Error("DM delivered but not recorded; it may be delivered again",
			slog.String("message_id", string(m.ID)), slog.String("dm_key", d.Key), slog.Any("err", err))
	}
	return err
}

func (o *Bot) chat(tg contract.TelegramID) telegram.Chat {
	id, _ := strconv.ParseInt(string(tg), 10, 64)
	return telegram.Chat{Bot: o.botID, ID: id}
}

// pace waits for the slot of a message to chat: it books the bot's next slot
// (telegram.Limiter.Reserve), waiting first for the chat's own interval when
// that is what holds it back, then waits for the slot. It reports false, with
// the time to try again, when the slot is further off than maxPacingWait (a
// pause after a 429 or a takeover) or held ends first.
func (o *Bot) pace(ctx, held context.Context, chat telegram.Chat) (time.Time, bool) {
	deadline := time.Now().Add(maxPacingWait)
	for {
		now := o.db.Now()
		at, ok := o.limiter.Reserve(chat, now, reserveAhead)
		wait := at.Sub(now)
		if time.Now().Add(wait).After(deadline) || !store.Sleep(held, wait) || ctx.Err() != nil {
			return at, false
		}
		if ok {
			return at, true
		}
	}
}

// call makes the DM's Bot API call and returns the sent message's id.
func (o *Bot) call(ctx context.Context, d dm) (int, error) {
	chatID, _ := strconv.ParseInt(string(d.ChatID), 10, 64) // checked by deliverTelegram
	chat := telego.ChatID{ID: chatID}
	switch d.Method {
	case methodSendMessage:
		p := &telego.SendMessageParams{ChatID: chat, Text: d.Params.Text}
		if mk := inlineKeyboard(d.Params.Buttons); mk != nil {
			p.ReplyMarkup = mk
		}
		m, err := o.tg.SendMessage(ctx, p)
		if err != nil {
			return 0, err
		}
		return m.MessageID, nil
	case methodEditReplyMarkup:
		_, err := o.tg.EditMessageReplyMarkup(ctx, &telego.EditMessageReplyMarkupParams{
			ChatID: chat, MessageID: d.Params.MessageID, ReplyMarkup: inlineKeyboard(d.Params.Buttons),
		})
		return 0, err
	case methodAnswerCallback:
		return 0, o.tg.AnswerCallbackQuery(ctx, &telego.AnswerCallbackQueryParams{
			CallbackQueryID: d.Params.CallbackQueryID, Text: d.Params.Text,
		})
	}
	return 0, fmt.Errorf("unknown method %q", d.Method)
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

func (o *Bot) isUnreachable(ctx context.Context, tg contract.TelegramID) (bool, error) {
	var n int
	if err := o.db.Read.QueryRowContext(ctx, `select count(*) from bot_unreachable where telegram_id = ?`, string(tg)).Scan(&n); err != nil {
		return false, fmt.Errorf("read unreachable: %w", err)
	}
	return n > 0, nil
}

// DMStatus is where a DM stands.
type DMStatus string

// DM statuses. Pending, retrying and sending are messages of DMQueue
// (waiting, waiting after a failure, being handled); failed is one of its
// dead letters; sent and notified are recorded deliveries.
const (
	DMPending  DMStatus = "pending"
	DMRetrying DMStatus = "retrying"
	DMSending  DMStatus = "sending"
	DMFailed   DMStatus = "failed"
	DMSent     DMStatus = "sent"
	DMNotified DMStatus = "notified"
)

// DM is one of the bot's Telegram calls (or a fallback notification), for
// the operator.
type DM struct {
	// Key is "<cause>:<message key>"; Cause is the event or update that
	// asked for it ("event:<id>", "update:<bot>:<id>").
	Key    string              `json:"key"`
	Cause  string              `json:"cause"`
	Method string              `json:"method"`
	ChatID contract.TelegramID `json:"chatId"`
	Text   string              `json:"text"`
	Status DMStatus            `json:"status"`
	// Attempts counts the failed attempts so far (before the delivery, for
	// a delivered one).
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError,omitempty"`
	// MessageID is the queue message's id (pending, retrying, sending, failed:
	// a dead letter's id, to redrive on the Queues page).
	MessageID string    `json:"messageId,omitempty"`
	At        time.Time `json:"at"`
	// Traceparent is the DM's trace, when it was traced: the span that
	// asked for it (in the queue, dead) or that delivered it (delivered).
	Traceparent string `json:"traceparent,omitempty"`
}

// DMFilter selects DMs for ListDMs.
type DMFilter struct {
	// ChatID keeps the DMs to one chat; empty keeps every chat's.
	ChatID contract.TelegramID
	// Status keeps the DMs of one status; empty keeps every status.
	Status DMStatus
	// Limit caps each of the three sources — in the queue, dead, delivered
	// (default 100, at most 500).
	Limit int
}

// sources says which of ListDMs' three sources hold DMs of status st.
func (st DMStatus) sources() (live, dead, delivered bool) {
	switch st {
	case "":
		return true, true, true
	case DMPending, DMRetrying, DMSending:
		return true, false, false
	case DMFailed:
		return false, true, false
	}
	return false, false, true
}

const listDeliveriesSQL = `
	select dm_key, method, chat_id, text, outcome, attempts, delivered_at, traceparent from bot_deliveries
	where (? = '' or chat_id = ?) and (? = '' or outcome = ?)
	order by delivered_at desc limit ?`

// cause is the part of a DM key before its message key.
func cause(key string) string {
	if i := strings.LastIndex(strings.TrimSuffix(key, ":fallback"), ":"); i > 0 {
		return key[:i]
	}
	return key
}

// ListDMs lists DMs, oldest first: those in DMQueue, its dead letters, and
// the deliveries recorded in bot_deliveries. It reads the queue through the
// queue's own admin API.
func (o *Bot) ListDMs(ctx context.Context, f DMFilter) ([]DM, error) {
	switch f.Status {
	case "", DMPending, DMRetrying, DMSending, DMFailed, DMSent, DMNotified:
	default:
		return nil, contract.Invalidf("status must be pending, retrying, sending, failed, sent or notified, not %q", f.Status)
	}
	limit := contract.ClampPendingLimit(f.Limit)
	var orderKey string
	if f.ChatID != "" {
		orderKey = "chat:" + string(f.ChatID)
	}
	live, dead, delivered := f.Status.sources()
	var out []DM
	if live {
		msgs, err := o.queues.ListMessages(ctx, queue.MessageFilter{Queue: DMQueue, OrderKey: orderKey, Limit: limit})
		if err != nil {
			return nil, err
		}
		for _, l := range msgs {
			d, ok := decodeDM(l.Body)
			if !ok {
				continue
			}
			st := DMPending
			switch {
			case l.State == queue.StateInFlight:
				st = DMSending
			case l.LastError != "":
				st = DMRetrying
			}
			if f.Status == "" || f.Status == st {
				attempts := l.Attempts
				if l.State == queue.StateInFlight {
					attempts-- // the attempt in hand has not ended
				}
				out = append(out, d.view(st, max(attempts, 0), l.LastError, string(l.ID), l.SentAt))
			}
		}
	}
	if dead {
		letters, err := o.queues.ListDead(ctx, queue.DeadFilter{Queue: DMQueue, OrderKey: orderKey, Limit: limit})
		if err != nil {
			return nil, err
		}
		for _, l := range letters {
			if d, ok := decodeDM(l.Body); ok {
				out = append(out, d.view(DMFailed, l.Attempts, l.LastError, l.ID, l.DeadAt))
			}
		}
	}
	if delivered {
		list, err := o.listDeliveries(ctx, f.ChatID, f.Status, limit)
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	slices.SortStableFunc(out, func(a, b DM) int { return a.At.Compare(b.At) })
	return out, nil
}

// listDeliveries reads bot_deliveries, newest first.
func (o *Bot) listDeliveries(ctx context.Context, chat contract.TelegramID, st DMStatus, limit int) ([]DM, error) {
	rows, err := o.db.Read.QueryContext(ctx, listDeliveriesSQL, string(chat), string(chat), string(st), string(st), limit)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	var out []DM
	for rows.Next() {
		var (
			d  DM
			at store.Timestamp
		)
		if err := rows.Scan(&d.Key, &d.Method, &d.ChatID, &d.Text, &d.Status, &d.Attempts, &at, &d.Traceparent); err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		d.Cause, d.At = cause(d.Key), at.Time
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

// RedriveDM is an operator's "send again" of the failed DM whose dead
// letter is id: the user's unreachable mark is cleared first, since the
// operator asks for a real call to Telegram (a DM to a marked user would go
// straight to its fallback or back to the dead letters), and then the dead
// letter goes back to DMQueue through the queue's own redrive, attempts reset
// and its place in its chat's order kept. The queue's generic redrive (the
// Queues page) leaves the mark alone. ErrNotFound (queue's) when id is no
// dead letter of DMQueue.
func (o *Bot) RedriveDM(ctx context.Context, id string) error {
	letters, err := o.queues.ListDead(ctx, queue.DeadFilter{Queue: DMQueue, ID: id, Limit: 1})
	if err != nil {
		return fmt.Errorf("redrive DM %s: %w", id, err)
	}
	if len(letters) == 0 {
		return fmt.Errorf("redrive DM %s: %w", id, queue.ErrNotFound)
	}
	if d, ok := decodeDM(letters[0].Body); ok && d.Phase == phaseTelegram && d.ChatID != "" {
		err := o.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `delete from bot_unreachable where telegram_id = ?`, string(d.ChatID))
			return err
		})
		if err != nil {
			return fmt.Errorf("redrive DM %s: clear the unreachable mark: %w", id, err)
		}
	}
	if _, err := o.queues.Redrive(ctx, queue.DeadFilter{Queue: DMQueue, ID: id}); err != nil {
		return fmt.Errorf("redrive DM %s: %w", id, err)
	}
	return nil
}

func decodeDM(body []byte) (dm, bool) {
	var d dm
	return d, json.Unmarshal(body, &d) == nil && d.Key != ""
}

func (d dm) view(st DMStatus, attempts int, lastErr, id string, at time.Time) DM {
	text := d.Params.Text
	if d.Phase == phaseFallback && d.Fallback != nil {
		text = d.Fallback.Text
	}
	return DM{Key: d.Key, Cause: cause(d.Key), Method: d.Method, ChatID: d.ChatID, Text: text, Status: st,
		Attempts: attempts, LastError: lastErr, MessageID: id, At: at, Traceparent: d.Traceparent}
}

// maxDMRedrive caps the failed DMs one RedriveDMs sends again.
const maxDMRedrive = 1000

// RedriveDMs is RedriveDM of each of ids, or, when ids is nil, of every
// failed DM (up to maxDMRedrive, the oldest dead letters first). Each goes
// through RedriveDM — its own transaction with the user's unreachable mark
// and the queue's own redrive —, so a DM redriven meanwhile (not found
// any more) is passed over. It returns how many it sent again.
func (o *Bot) RedriveDMs(ctx context.Context, ids []string) (int64, error) {
	if ids == nil {
		letters, err := o.queues.ListDead(ctx, queue.DeadFilter{Queue: DMQueue, Limit: maxDMRedrive})
		if err != nil {
			return 0, fmt.Errorf("redrive DMs: %w", err)
		}
		for _, l := range letters {
			ids = append(ids, l.ID)
		}
	}
	var n int64
	for _, id := range ids[:min(len(ids), maxDMRedrive)] {
		err := o.RedriveDM(ctx, id)
		if errors.Is(err, queue.ErrNotFound) {
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
