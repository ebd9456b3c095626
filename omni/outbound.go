package omni

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mymmrac/telego"
	"golang.org/x/time/rate"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/telegram"
)

// OutboundOpts configure NewOutbound. Zero values get defaults.
type OutboundOpts struct {
	DB *store.DB
	// Token is the business-inbox bot's token (OMNI_TELEGRAM_TOKEN).
	// Required: the sandbox passes a token of its fake Bot API.
	Token string
	// APIURL is the Bot API server (TELEGRAM_API_URL; Telegram's when empty).
	APIURL string
	// HTTPClient calls the Bot API; telegram.NewHTTPClient() when nil.
	HTTPClient *http.Client
	// Limits are the token buckets sends wait for (telegram.DefaultLimits
	// for zero fields): about 1 a second per chat, 20 a minute per group,
	// 30 a second per bot. They live in this process, so the role sends
	// only while it holds the bot's lease (telegram.SenderLeaseName): any
	// number of outbound processes may run, and one at a time sends.
	Limits telegram.Limits
	// LeaseTTL is the time to live of the bot's sender lease (default
	// DefaultSenderLeaseTTL): how long the other processes wait for a
	// holder that died before one takes over.
	LeaseTTL time.Duration
	// MaxAttempts is how many sends a message gets before it fails and is
	// dead-lettered (default 8). A 429 counts as a send.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the jittered, doubling wait after a
	// transient failure (defaults 1 s and 5 min).
	MinBackoff, MaxBackoff time.Duration
	// MaxPacingWait is the longest a send waits in memory for its rate-limit
	// tokens (default 3 s: a chat's 1 s interval behind a full bot's queue
	// of senders); a longer wait — a paused chat or bot, a group's 3 s
	// interval — reschedules the message in its queue instead.
	MaxPacingWait time.Duration
	// BotPauseChats is how many distinct chats must be throttled (429)
	// within one second before the whole bot is paused for the retry_after,
	// rather than each chat alone: a sign that the bot as a whole is over
	// its limit (another process sending with the same token). Default 3;
	// negative never pauses the bot.
	BotPauseChats int
	// Concurrency bounds the sends in flight per queue (default 64); sends
	// to one chat go one at a time whatever it is.
	Concurrency int
	// PollInterval is how often the workers look for commands queued by
	// another process (default queue.DefaultPollInterval).
	PollInterval time.Duration
	// Logger gets failures; nil discards.
	Logger *slog.Logger
}

// DefaultSenderLeaseTTL is the outbound role's lease TTL. The holder renews
// every third of it and stops sending when it could not for two thirds,
// which leaves about 6.7 s for the sends in hand (a pacing wait of at most
// MaxPacingWait, 3 s, then the call) to finish before anyone else may take
// over; a holder that died is replaced within 20 s. A graceful stop hands
// over at once.
const DefaultSenderLeaseTTL = 20 * time.Second

// Outbound is the omni_outbound role: it consumes sender.flow (and
// sender.retry) and delivers each command through the Telegram Bot API,
// keeping to the rate limits, retrying transient failures with backoff,
// failing permanent ones, and recording every step in the message's status.
// It holds no chat rules. It delivers only while it holds the bot's sender
// lease, so that processes sharing a bot keep to one rate limit.
type Outbound struct {
	db      *store.DB
	log     *slog.Logger
	opts    OutboundOpts
	bot     *telego.Bot
	botID   int64
	botKey  string
	limiter *telegram.Limiter
	lane    *lane
	owner   string // this role's name in the sender lease

	// turn admits one sender at a time to wait for the bot's next slot.
	turn        chan struct{}
	botInterval time.Duration

	mu        sync.Mutex
	throttled map[int64]time.Time // chat → when it last got a 429
}

// NewOutbound returns the outbound role. A token without a bot id panics.
func NewOutbound(opts OutboundOpts) *Outbound {
	if opts.DB == nil {
		panic("omni: NewOutbound needs a DB")
	}
	botID, ok := telegram.BotIDFromToken(opts.Token)
	if !ok {
		panic("omni: NewOutbound needs a bot token of the form <bot id>:<secret>")
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = 8
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 5 * time.Minute
	}
	opts.MaxBackoff = max(opts.MaxBackoff, opts.MinBackoff)
	if opts.MaxPacingWait <= 0 {
		opts.MaxPacingWait = 3 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 64
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultSenderLeaseTTL
	}
	if opts.BotPauseChats == 0 {
		opts.BotPauseChats = 3
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	// telego's own log lines stay off: its debug lines carry message texts.
	var botOpts []telegram.BotOption
	if opts.HTTPClient != nil {
		botOpts = append(botOpts, telegram.WithHTTPClient(opts.HTTPClient))
	}
	bot, err := telegram.NewBot(opts.Token, opts.APIURL, botOpts...)
	if err != nil {
		panic(fmt.Sprintf("omni: NewOutbound: %v", err))
	}
	// The retry lane's own attempt limit is a safety net only: deliver
	// counts provider calls and gives up after MaxAttempts of them, while
	// the queue also counts rate-limit reschedules.
	retry := queue.RetryPolicy{MaxAttempts: 1000, MinBackoff: opts.MinBackoff, MaxBackoff: opts.MaxBackoff}
	limiter := telegram.NewLimiter(opts.Limits)
	botInterval := time.Duration(0)
	if r := limiter.Limits().Bot.Rate; r != rate.Inf && r > 0 {
		botInterval = time.Duration(float64(time.Second)/float64(r)) + pacingSlack
	}
	declareOutboundMetrics()
	return &Outbound{
		turn:        make(chan struct{}, 1),
		botInterval: botInterval,
		db:          opts.DB,
		log:         opts.Logger.With(slog.String("role", "outbound")),
		opts:        opts,
		bot:         bot,
		botID:       botID,
		botKey:      itoa(botID),
		limiter:     limiter,
		lane:        newLane(opts.DB, "sender", QueueSenderFlow, QueueSenderRetry, retry, opts.Logger),
		owner:       store.NewOwnerID(),
	}
}

// Name names the worker.
func (o *Outbound) Name() string { return "omni-outbound" }

// Run consumes sender.flow and sender.retry until ctx is cancelled, then
// returns once the sends in hand are finished and recorded. It consumes
// only while it holds the bot's sender lease; while another process holds
// it, Run stands by (and logs so once). When the lease is lost, the workers
// stop as they do at the end: the sends in hand finish and are recorded,
// and the other messages wait in their queues for the next holder.
func (o *Outbound) Run(ctx context.Context) error {
	lease := store.LeaseOpts{
		Name:   telegram.SenderLeaseName(o.botID),
		Owner:  o.owner,
		TTL:    o.opts.LeaseTTL,
		Logger: o.log.With(slog.Int64("bot_id", o.botID)),
	}
	return o.db.RunExclusive(ctx, lease, func(ctx context.Context, prev store.Lease) error {
		if prev.Owner != "" {
			// Another process sent for this bot until prev.ExpiresAt; its
			// buckets were not ours.
			o.limiter.Handover(o.botID, prev.ExpiresAt)
		}
		return o.lane.run(ctx,
			queue.WorkerOpts{Handler: o.handleFlow, Concurrency: o.opts.Concurrency, PollInterval: o.opts.PollInterval},
			queue.WorkerOpts{Handler: o.handleRetry, Concurrency: o.opts.Concurrency, PollInterval: o.opts.PollInterval},
		)
	})
}

func (o *Outbound) handleFlow(ctx context.Context, m queue.Message) error {
	return o.deliver(ctx, m, false)
}

func (o *Outbound) handleRetry(ctx context.Context, m queue.Message) error {
	return o.deliver(ctx, m, true)
}

// errPacing is the reason of a reschedule for the rate limits.
var errPacing = errors.New("waiting for the rate limit")

// deliver sends one command. The message row is the record every send goes
// through: a message already sent is never sent again, and every step is
// committed before the next begins (sending before the call, the outcome
// after it). Only a crash between Telegram's answer and its record can send
// a message twice.
//
// Each attempt is a span, omni.outbound.deliver, whose child is the Bot API
// call; what the attempt learnt goes into d for it.
func (o *Outbound) deliver(ctx context.Context, m queue.Message, inRetry bool) error {
	ctx, span := deliverSpan(ctx, m, inRetry)
	var d deliveryTrace
	err := o.attempt(ctx, m, inRetry, &d)
	endDeliver(span, d, err)
	return err
}

// attempt is deliver's attempt at m.
func (o *Outbound) attempt(ctx context.Context, m queue.Message, inRetry bool, tr *deliveryTrace) error {
	var cmd SendCommand
	if err := json.Unmarshal(m.Body, &cmd); err != nil || cmd.MessageID == 0 {
		return queue.Permanent(fmt.Errorf("decode send command: %w", err))
	}
	chatID, err := strconv.ParseInt(cmd.ChatID, 10, 64)
	if err != nil {
		return queue.Permanent(fmt.Errorf("send command %d: chat id %q: %w", cmd.MessageID, cmd.ChatID, err))
	}
	key, orderKey := cmd.jobKey(), cmd.orderKey()
	tr.message, tr.chatID = cmd.MessageID, cmd.ChatID
	log := o.log.With(slog.Int64("message_id", int64(cmd.MessageID)), slog.String("queue", o.laneQueue(inRetry)))

	st, err := o.state(ctx, cmd)
	if errors.Is(err, ErrMessageNotFound) {
		log.Error("send command for a message that does not exist; dropped", slog.String("outcome", "dropped"))
		tr.outcome = "dropped"
		return nil
	}
	if err != nil {
		return err
	}
	if st.Status == StatusSent {
		metricOutboundSends.WithLabelValues(sendDuplicate).Inc()
		tr.outcome = sendDuplicate
		return o.db.Tx(ctx, func(tx *sql.Tx) error { return o.lane.unparkTx(ctx, tx, key) })
	}

	// A chat with messages in the retry lane: this one goes behind them.
	if !inRetry {
		parked, err := o.lane.parked(ctx, orderKey)
		if err != nil {
			return err
		}
		if parked {
			metricOutboundSends.WithLabelValues(sendDeferred).Inc()
			tr.outcome = sendDeferred
			return o.db.Tx(ctx, func(tx *sql.Tx) error { return o.lane.escalateTx(ctx, tx, m.Body, key, orderKey, 0) })
		}
	}

	if reason := decideRefusal(cmd, st, o.botKey); reason != nil {
		metricOutboundSends.WithLabelValues(sendRefused).Inc()
		tr.outcome = sendRefused
		log.Warn("send refused before calling Telegram", slog.String("outcome", "failed"), slog.String("reason", reason.Error()))
		if err := o.fail(ctx, cmd.MessageID, key, reason.Error(), false); err != nil {
			return err
		}
		return queue.Permanent(reason)
	}

	chat := telegram.Chat{Bot: o.botID, ID: chatID}
	now := o.db.Now()
	if at := o.limiter.When(chat, now); at.Sub(now) > o.opts.MaxPacingWait {
		metricOutboundSends.WithLabelValues(sendRateLimited).Inc()
		tr.outcome = sendRateLimited
		return queue.RetryAfter(at.Sub(now), errPacing)
	}

	attempts, err := o.markSending(ctx, cmd.MessageID)
	if errors.Is(err, errAlreadySent) {
		tr.outcome = sendDuplicate
		return nil
	}
	if err != nil {
		return err
	}
	tr.attempt = attempts
	if !o.pace(ctx, chat) {
		// The token did not come in time (many chats at once): wait in
		// the queue instead.
		metricOutboundSends.WithLabelValues(sendRateLimited).Inc()
		tr.outcome = sendRateLimited
		wait := max(o.limiter.When(chat, o.db.Now()).Sub(o.db.Now()), 10*time.Millisecond)
		if err := o.retrying(ctx, cmd.MessageID, "", o.db.Now().Add(wait), errPacing.Error(), ""); err != nil {
			return err
		}
		return queue.RetryAfter(wait, errPacing)
	}

	start := time.Now()
	sent, err := o.bot.SendMessage(ctx, &telego.SendMessageParams{
		ChatID:               telego.ChatID{ID: chatID},
		Text:                 cmd.Text,
		BusinessConnectionID: cmd.BusinessConnectionID,
	})
	metricOutboundDuration.Observe(time.Since(start).Seconds())
	if err == nil {
		metricOutboundSends.WithLabelValues(sendSent).Inc()
		tr.outcome = sendSent
		return o.markSent(ctx, cmd.MessageID, key, strconv.Itoa(sent.MessageID))
	}
	if ctx.Err() != nil {
		return err // stopping: the message comes back after its timeout
	}

	f := telegram.Classify(err)
	tr.failure = f.Err
	d := decideFailure(f, attempts, o.opts.MaxAttempts,
		queue.RetryPolicy{MinBackoff: o.opts.MinBackoff, MaxBackoff: o.opts.MaxBackoff}.Backoff(attempts))
	now = o.db.Now()
	switch d.Action {
	case actionRetryAfter:
		metricOutboundSends.WithLabelValues(sendRateLimited).Inc()
		tr.outcome = sendRateLimited
		o.pause(chat, now.Add(d.Delay))
		log.Warn("telegram asked to slow down; rescheduled", slog.String("outcome", "retry_after"), slog.Duration("retry_after", d.Delay))
		if err := o.retrying(ctx, cmd.MessageID, "", now.Add(d.Delay), d.Reason, ""); err != nil {
			return err
		}
		return queue.RetryAfter(d.Delay, f.Err)
	case actionRetry:
		metricOutboundSends.WithLabelValues(sendRetry).Inc()
		tr.outcome = sendRetry
		log.Warn("send failed; will retry", slog.String("outcome", "retry"), slog.Int("attempt", attempts),
			slog.Duration("backoff", d.Delay), slog.String("reason", d.Reason))
		if inRetry {
			if err := o.retrying(ctx, cmd.MessageID, key, now.Add(d.Delay), d.Reason, orderKey); err != nil {
				return err
			}
			return queue.RetryAfter(d.Delay, f.Err)
		}
		// Move to sender.retry; later messages of this chat follow it there.
		return o.db.Tx(ctx, func(tx *sql.Tx) error {
			if err := markRetryingTx(ctx, tx, cmd.MessageID, now.Add(d.Delay), d.Reason, now); err != nil {
				return err
			}
			return o.lane.escalateTx(ctx, tx, m.Body, key, orderKey, d.Delay)
		})
	default:
		metricOutboundSends.WithLabelValues(sendFailed).Inc()
		tr.outcome = sendFailed
		log.Warn("send failed for good", slog.String("outcome", "failed"), slog.Int("attempt", attempts), slog.String("reason", d.Reason))
		if err := o.fail(ctx, cmd.MessageID, key, d.Reason, d.Unreachable); err != nil {
			return err
		}
		return queue.Permanent(f.Err) // the queue names the class; f.Error() would name it again
	}
}

func (o *Outbound) laneQueue(inRetry bool) string {
	if inRetry {
		return QueueSenderRetry
	}
	return QueueSenderFlow
}

// pacingSlack is how early a send may take its tokens: a waiter wakes this
// much before its slot and takes the tokens within the slack (the buckets go
// briefly into debt), so a late timer does not waste a slot of a bucket
// whose burst is one.
const pacingSlack = 5 * time.Millisecond

// pace waits, at most MaxPacingWait, for the limits to allow a send to chat,
// and takes the tokens. It reports false when the wait would be longer.
//
// Waiters take the bot's tokens in arrival order: the turnstile (a channel,
// whose waiters Go serves first in, first out) admits one at a time to wait
// for the bot's next slot, so no sender starves and no slot is lost to a
// herd of timers. A wait longer than one bot interval is the chat's own
// interval (or a pause): it is waited out of the turnstile.
func (o *Outbound) pace(ctx context.Context, chat telegram.Chat) bool {
	deadline := time.NewTimer(o.opts.MaxPacingWait)
	defer deadline.Stop()
	for {
		select {
		case o.turn <- struct{}{}:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
		var wait time.Duration
		for {
			now := o.db.Now()
			at, ok := o.limiter.TakeWithin(chat, now, pacingSlack)
			if ok {
				<-o.turn
				return true
			}
			wait = at.Sub(now) - pacingSlack
			if wait > o.botInterval {
				break
			}
			if !o.sleep(ctx, deadline.C, wait) {
				<-o.turn
				return false
			}
		}
		<-o.turn
		if !o.sleep(ctx, deadline.C, wait) {
			return false
		}
	}
}

// sleep waits d, and reports false when the deadline or ctx ends first.
func (o *Outbound) sleep(ctx context.Context, deadline <-chan time.Time, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-deadline:
		return false
	case <-ctx.Done():
		return false
	}
}

// pause holds sends to chat until until after a 429. When BotPauseChats
// distinct chats were throttled within the last second, the bot as a whole
// is over its limit: the bot is paused too.
func (o *Outbound) pause(chat telegram.Chat, until time.Time) {
	o.limiter.PauseChat(chat, until)
	if o.opts.BotPauseChats < 0 {
		return
	}
	now := o.db.Now()
	o.mu.Lock()
	if o.throttled == nil {
		o.throttled = map[int64]time.Time{}
	}
	o.throttled[chat.ID] = now
	recent := 0
	for id, at := range o.throttled {
		if now.Sub(at) < time.Second {
			recent++
		} else {
			delete(o.throttled, id)
		}
	}
	o.mu.Unlock()
	if recent >= o.opts.BotPauseChats {
		o.limiter.PauseBot(chat.Bot, until)
		o.log.Warn("several chats throttled at once; pausing the bot", slog.Int("chats", recent), slog.Time("until", until))
	}
}

// The outbound role's SQL: the delivery status of omni_messages, the
// reachability of the contact, and what a send needs to know.
const (
	deliveryStateQuery = `
		select m.status, m.attempts, t.bot_id from omni_messages m join omni_threads t on t.id = m.thread_id
		where m.id = ? and m.direction = 'outbound'`
	markSendingQuery = `
		update omni_messages set status = 'sending',
			attempts = case when status = 'failed' then 1 else attempts + 1 end,
			next_attempt_at = null, failure_reason = null, updated_at = ?
		where id = ? and status <> 'sent'
		returning attempts`
	// markSentQuery keeps the provider's message id unless another message
	// of the thread holds it already (Telegram echoed the reply back as an
	// update, which the chat role stored first): the statement never trips
	// the unique index itself, which on PostgreSQL would abort the
	// transaction.
	markSentQuery = `
		update omni_messages set status = 'sent',
			provider_message_id = case when exists (
				select 1 from omni_messages held
				where held.thread_id = omni_messages.thread_id and held.provider_message_id = ? and held.id <> omni_messages.id
			) then null else ? end,
			sent_at = ?, next_attempt_at = null, failure_reason = null, updated_at = ?
		where id = ?`
	markRetryingQuery = `
		update omni_messages set status = 'retrying', next_attempt_at = ?, failure_reason = ?, updated_at = ?
		where id = ? and status <> 'sent'`
	markFailedQuery = `
		update omni_messages set status = 'failed', failure_reason = ?, next_attempt_at = null, updated_at = ?
		where id = ? and status <> 'sent'`
	markUnreachableQuery = `
		update omni_contacts set reachable = 0, unreachable_reason = ?, updated_at = ?
		where id = (select t.contact_id from omni_threads t join omni_messages m on m.thread_id = t.id where m.id = ?)`
)

// state reads what deliver needs to know about a message (read pool).
func (o *Outbound) state(ctx context.Context, cmd SendCommand) (deliveryState, error) {
	var (
		st     deliveryState
		status string
	)
	err := o.db.Read.QueryRowContext(ctx, deliveryStateQuery, int64(cmd.MessageID)).Scan(&status, &st.Attempts, &st.ThreadBotID)
	if errors.Is(err, sql.ErrNoRows) {
		return st, ErrMessageNotFound
	}
	if err != nil {
		return st, fmt.Errorf("read message %d: %w", cmd.MessageID, err)
	}
	st.Status = Status(status)
	if cmd.BusinessConnectionID != "" {
		if st.Conn, err = connectionTx(ctx, o.db.Read, cmd.BusinessConnectionID); err != nil {
			return st, err
		}
	}
	return st, nil
}

var errAlreadySent = errors.New("message already sent")

// markSending records that a send is about to start and returns the
// message's attempt count including it. A redriven failed message starts
// counting again.
func (o *Outbound) markSending(ctx context.Context, id MessageID) (int, error) {
	var attempts int
	err := o.db.Tx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, markSendingQuery, store.TS(o.db.Now()), int64(id)).Scan(&attempts)
		if errors.Is(err, sql.ErrNoRows) {
			return errAlreadySent
		}
		return err
	})
	return attempts, err
}

// markSent records a delivered message. Telegram has the message now, so the
// record is retried a few times before giving up: a send whose record is
// lost is the one way a message could go out twice. (An echo of the reply
// that the chat role stores between markSentQuery's check and its write
// fails the try on the unique index; the next try sees the echo.)
func (o *Outbound) markSent(ctx context.Context, id MessageID, key, providerID string) error {
	// Recorded even when the worker is stopping: the send happened.
	ctx = context.WithoutCancel(ctx)
	var err error
	for try := range 5 {
		if try > 0 {
			time.Sleep(time.Duration(try*try) * 50 * time.Millisecond)
		}
		err = o.db.Tx(ctx, func(tx *sql.Tx) error {
			now := store.TS(o.db.Now())
			if _, err := tx.ExecContext(ctx, markSentQuery, providerID, providerID, now, now, int64(id)); err != nil {
				return err
			}
			return o.lane.unparkTx(ctx, tx, key)
		})
		if err == nil {
			return nil
		}
	}
	o.log.Error("message sent but its status could not be recorded; it may be sent again",
		slog.Int64("message_id", int64(id)), slog.Any("err", err))
	return err
}

func markRetryingTx(ctx context.Context, tx *sql.Tx, id MessageID, next time.Time, reason string, now time.Time) error {
	_, err := tx.ExecContext(ctx, markRetryingQuery, store.TS(next), reason, store.TS(now), int64(id))
	return err
}

// retrying records the next attempt's time; with orderKey set it also keeps
// the chat parked behind the message (the retry lane).
func (o *Outbound) retrying(ctx context.Context, id MessageID, key string, next time.Time, reason, orderKey string) error {
	return o.db.Tx(ctx, func(tx *sql.Tx) error {
		if err := markRetryingTx(ctx, tx, id, next, reason, o.db.Now()); err != nil {
			return err
		}
		if orderKey == "" {
			return nil
		}
		return o.lane.parkTx(ctx, tx, key, orderKey)
	})
}

// fail records a message that will not be delivered, marks its contact
// unreachable when Telegram said so, and releases its chat.
func (o *Outbound) fail(ctx context.Context, id MessageID, key, reason string, unreachable bool) error {
	return o.db.Tx(ctx, func(tx *sql.Tx) error {
		now := store.TS(o.db.Now())
		if _, err := tx.ExecContext(ctx, markFailedQuery, reason, now, int64(id)); err != nil {
			return err
		}
		if unreachable {
			if _, err := tx.ExecContext(ctx, markUnreachableQuery, reason, now, int64(id)); err != nil {
				return err
			}
		}
		return o.lane.unparkTx(ctx, tx, key)
	})
}
