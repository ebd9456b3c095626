package telegram

import (
	"errors"
	"net/http"
	"strings"
	"time"

	ta "github.com/mymmrac/telego/telegoapi"
)

// Class says what a caller should do after a failed Bot API call.
type Class string

// The failure classes. The zero Class means there was no failure.
const (
	// ClassRetryable: try again later with backoff (5xx, network, timeouts,
	// anything unrecognised).
	ClassRetryable Class = "retryable"
	// ClassRetryAfter: Telegram's flood control answered 429; try again after
	// Failure.RetryAfter, not sooner.
	ClassRetryAfter Class = "retry_after"
	// ClassPermanent: the same call will never succeed (403 blocked or never
	// started, 400 chat not found or a malformed request, 401 bad token).
	ClassPermanent Class = "permanent"
)

// Failure is the classified form of an error from a telego call.
type Failure struct {
	Class Class
	// RetryAfter is parameters.retry_after of a 429, for ClassRetryAfter.
	RetryAfter time.Duration
	// Code is the Bot API error_code or the HTTP status of a 5xx; 0 when no
	// answer came back (network errors, timeouts).
	Code int
	// Description is the Bot API description, e.g. "Forbidden: bot was
	// blocked by the user"; empty when no answer came back.
	Description string
	// Unreachable is set when the recipient cannot be reached at all: the
	// user blocked the bot, never started it, was deactivated, or the chat
	// does not exist. Callers mark the contact unreachable.
	Unreachable bool
	// MigrateToChatID is set when a group became a supergroup with this id.
	MigrateToChatID int64
	// Err is the classified error.
	Err error
}

// Error describes the failure; it never contains the bot token when the
// error came from a bot built by NewBot.
func (f Failure) Error() string {
	if f.Err == nil {
		return string(f.Class)
	}
	return string(f.Class) + ": " + f.Err.Error()
}

// Unwrap returns the classified error.
func (f Failure) Unwrap() error { return f.Err }

// Classify sorts err, as returned by a telego call, into a Class. A nil err
// gives the zero Failure.
func Classify(err error) Failure {
	if err == nil {
		return Failure{}
	}
	f := Failure{Class: ClassRetryable, Err: err}
	var apiErr *ta.Error
	if errors.As(err, &apiErr) {
		f.Code = apiErr.ErrorCode
		f.Description = apiErr.Description
		if apiErr.Parameters != nil {
			f.MigrateToChatID = apiErr.Parameters.MigrateToChatID
		}
		switch {
		case apiErr.ErrorCode == http.StatusTooManyRequests:
			if apiErr.Parameters != nil && apiErr.Parameters.RetryAfter > 0 {
				f.Class = ClassRetryAfter
				f.RetryAfter = time.Duration(apiErr.Parameters.RetryAfter) * time.Second
			}
		case apiErr.ErrorCode >= http.StatusInternalServerError:
			// Telegram's own trouble: retry.
		case apiErr.ErrorCode == http.StatusConflict:
			// getUpdates against a webhook or a second poller: it clears when
			// the other side stops, so retry with backoff.
		case apiErr.ErrorCode == http.StatusForbidden:
			f.Class = ClassPermanent
			f.Unreachable = true
		case apiErr.ErrorCode >= http.StatusBadRequest:
			f.Class = ClassPermanent
			f.Unreachable = apiErr.ErrorCode == http.StatusBadRequest && chatGone(apiErr.Description)
		}
		return f
	}
	var statusErr *HTTPStatusError
	if errors.As(err, &statusErr) {
		f.Code = statusErr.StatusCode
	}
	return f
}

// chatGone reports whether a 400's description says the chat does not exist.
func chatGone(description string) bool {
	d := strings.ToLower(description)
	return strings.Contains(d, "chat not found") ||
		strings.Contains(d, "user not found") ||
		strings.Contains(d, "peer_id_invalid")
}

// IsMessageNotModified reports whether err is Telegram refusing an edit that
// changes nothing; an edit retried after it already took effect gets this,
// and callers treat it as success.
func IsMessageNotModified(err error) bool {
	var apiErr *ta.Error
	return errors.As(err, &apiErr) && apiErr.ErrorCode == http.StatusBadRequest &&
		strings.Contains(apiErr.Description, "message is not modified")
}
