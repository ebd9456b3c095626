package omni

import (
	"fmt"
	"time"

	"switchyard/telegram"
)

// The outbound role's rules, as pure functions: what to refuse before
// calling the provider, and what a failed call means for the message.

// ErrOtherBot refuses a send through a bot other than the one the thread's
// updates came through: Telegram lets only the bot a business account
// connected answer its chats, and a bot can only write to users who started it.
const ErrOtherBot = Error("omni: the thread belongs to another bot")

// deliveryState is what outbound reads about a message before sending it.
type deliveryState struct {
	Status   Status
	Attempts int
	// ThreadBotID is the bot the thread's updates came through.
	ThreadBotID string
	// Conn is the thread's business connection; nil for bot chats or when
	// the connection is unknown.
	Conn *BusinessConnection
}

// decideRefusal returns why cmd must not be sent at all by the bot botID, or
// nil. Refusals are permanent: the message fails without a provider call.
func decideRefusal(cmd SendCommand, st deliveryState, botID string) error {
	if st.ThreadBotID != "" && st.ThreadBotID != botID {
		return fmt.Errorf("%w: its updates came through bot %s and this outbound sends as bot %s", ErrOtherBot, st.ThreadBotID, botID)
	}
	if cmd.Channel != ChannelTelegramBusiness {
		return nil
	}
	if st.Conn != nil && st.Conn.BotID != botID {
		return fmt.Errorf("%w: business connection %s is connected to bot %s, not %s", ErrOtherBot, st.Conn.ID, st.Conn.BotID, botID)
	}
	if err := canReply(st.Conn); err != nil {
		switch {
		case st.Conn == nil:
			return fmt.Errorf("%w: connection %s is unknown", err, cmd.BusinessConnectionID)
		case !st.Conn.Enabled:
			return fmt.Errorf("%w: connection %s is disabled", err, st.Conn.ID)
		default:
			return fmt.Errorf("%w: connection %s has no right to reply", err, st.Conn.ID)
		}
	}
	return nil
}

// failureAction is what happens to a message after a failed send.
type failureAction int

const (
	// actionRetryAfter: the provider throttled us; try again after exactly
	// its retry_after, pausing the chat meanwhile.
	actionRetryAfter failureAction = iota + 1
	// actionRetry: a transient failure; try again after a backoff, in the
	// retry lane.
	actionRetry
	// actionFail: it will never succeed, or the attempts ran out.
	actionFail
)

// failureDecision is decideFailure's answer.
type failureDecision struct {
	Action failureAction
	Delay  time.Duration
	Reason string
	// Unreachable marks the contact unreachable (blocked the bot, chat gone).
	Unreachable bool
}

// decideFailure maps a classified provider failure of the attempts-th call
// to what happens next. backoff is the delay a transient failure waits.
func decideFailure(f telegram.Failure, attempts, maxAttempts int, backoff time.Duration) failureDecision {
	reason := failureReason(f)
	switch f.Class {
	case telegram.ClassRetryAfter:
		return failureDecision{Action: actionRetryAfter, Delay: max(f.RetryAfter, time.Second), Reason: reason}
	case telegram.ClassPermanent:
		return failureDecision{Action: actionFail, Reason: reason, Unreachable: f.Unreachable}
	}
	if attempts >= maxAttempts {
		return failureDecision{Action: actionFail, Reason: fmt.Sprintf("gave up after %d attempts: %s", attempts, reason)}
	}
	return failureDecision{Action: actionRetry, Delay: backoff, Reason: reason}
}

// failureReason is the operator-facing text of a failure.
func failureReason(f telegram.Failure) string {
	switch {
	case f.Description != "":
		return fmt.Sprintf("telegram %d: %s", f.Code, f.Description)
	case f.Code != 0:
		return fmt.Sprintf("telegram http %d", f.Code)
	case f.Err != nil:
		return f.Err.Error()
	}
	return string(f.Class)
}
