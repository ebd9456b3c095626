package contract

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The wire types of the /bot/* HTTP API: the bodies of its requests and
// answers, as the backend serves them and the bot's client sends and reads
// them. The OpenAPI document (bot/backend) describes each.

// PendingResponse is the body of GET /bot/events/pending.
type PendingResponse struct {
	Events []Event `json:"events"`
}

// AckRequest is the body of POST /bot/events/ack. Errors (optional) holds the
// reason of a retry by event id; it is stored as last_error.
type AckRequest struct {
	ProcessedIDs []EventID         `json:"processedIds"`
	RetryIDs     []EventID         `json:"retryIds"`
	Errors       map[string]string `json:"errors,omitempty"`
}

// AckResult counts what an ack changed. Ids that were unknown, already
// processed, dead-lettered or (for a retry) not due are not counted.
type AckResult struct {
	Processed    int `json:"processed"`
	Retried      int `json:"retried"`
	DeadLettered int `json:"deadLettered"`
	Closed       int `json:"closed"`
}

// Leader is the answer of GET /bot/leader/resolve.
type Leader struct {
	UID  UID    `json:"uid"`
	Link string `json:"link"`
	Name string `json:"name"`
}

// UserState is the answer of GET /bot/user/state: what the bot's console gate needs.
type UserState struct {
	IsRegistrationConfirmed bool       `json:"isRegistrationConfirmed"`
	LP1                     bool       `json:"lp1"`
	LP2                     bool       `json:"lp2"`
	Addr                    *string    `json:"addr"`
	TimeActive              *time.Time `json:"timeActive"`
	OwnLink                 string     `json:"ownLink"`
}

// AccountCheck is the answer of GET /auth/check-account-by-telegram/{id}.
type AccountCheck struct {
	Exists bool `json:"exists"`
	UID    *UID `json:"uid"`
}

// BindRequest is the body of POST /bot/telegram/bind.
type BindRequest struct {
	UID        UID        `json:"uid"`
	TelegramID TelegramID `json:"telegramId"`
}

// BindResponse is the answer of POST /bot/telegram/bind.
type BindResponse struct {
	UID        UID        `json:"uid"`
	TelegramID TelegramID `json:"telegramId"`
}

// NotificationID identifies a web-cabinet notification.
type NotificationID int64

// NewNotification is the body of POST /bot/notification: the account by uid
// or by bound Telegram id (both: they must agree), a kind, a text, and an
// optional dedup key that makes a repeated write return the first one.
type NewNotification struct {
	UID        UID        `json:"uid,omitempty"`
	TelegramID TelegramID `json:"telegramId,omitempty"`
	Kind       string     `json:"kind"`
	Text       string     `json:"text"`
	DedupKey   string     `json:"dedupKey,omitempty"`
}

// Notification is a stored web-cabinet notification.
type Notification struct {
	ID        NotificationID `json:"id"`
	UID       UID            `json:"uid"`
	Kind      string         `json:"kind"`
	Text      string         `json:"text"`
	DedupKey  *string        `json:"dedupKey"`
	CreatedAt time.Time      `json:"createdAt"`
	ReadAt    *time.Time     `json:"readAt"`
}

// ConnectLinkRequest is the body of POST /bot/telegram/connect-link.
type ConnectLinkRequest struct {
	UID UID `json:"uid"`
}

// ConnectPayloadPrefix starts the bot's /start payload of a connect token.
const ConnectPayloadPrefix = "telegramConnect"

// ConnectLink is the answer of POST /bot/telegram/connect-link.
type ConnectLink struct {
	// Token is "telegramConnect=<uuid>", the spec's one-time token.
	Token string `json:"token"`
	// StartParam is the token as a Telegram /start parameter, which allows only
	// A-Z a-z 0-9 _ -: "telegramConnect-<uuid>".
	StartParam string `json:"startParam"`
	// Link is https://t.me/<bot>?start=<StartParam>.
	Link      string    `json:"link"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// ParseConnectPayload reads a connect token's uuid from the token
// ("telegramConnect=<uuid>"), the /start parameter ("telegramConnect-<uuid>")
// or the bare uuid.
func ParseConnectPayload(s string) (string, bool) {
	s = strings.TrimSpace(s)
	for _, sep := range []string{"=", "-", "_"} {
		if rest, ok := strings.CutPrefix(s, ConnectPayloadPrefix+sep); ok {
			s = rest
			break
		}
	}
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", false
	}
	return id.String(), true
}

// RedeemRequest is the body of POST /bot/telegram/connect-link/redeem: the
// /start payload (any form ParseConnectPayload reads) and who sent it.
type RedeemRequest struct {
	Token      string     `json:"token"`
	TelegramID TelegramID `json:"telegramId"`
}

// Redemption is the answer of redeeming a connect token.
type Redemption struct {
	UID               UID        `json:"uid"`
	PreviewTelegramID TelegramID `json:"previewTelegramId"`
}

// ParseLimit reads ?limit= as GET /bot/events/pending does (and the
// operators' lists with it): absent is BOT_OUTBOX_DEFAULT_PENDING_LIMIT; an
// integer ≥ 1 is capped at BOT_OUTBOX_MAX_PENDING_LIMIT (however many digits
// it has); anything else is an *InvalidError.
func ParseLimit(r *http.Request) (int, error) {
	q := r.URL.Query()
	if !q.Has("limit") {
		return BOT_OUTBOX_DEFAULT_PENDING_LIMIT, nil
	}
	s := q.Get("limit")
	n, err := strconv.Atoi(s)
	if err != nil {
		var num *strconv.NumError
		if errors.As(err, &num) && errors.Is(num.Err, strconv.ErrRange) && !strings.HasPrefix(s, "-") {
			return BOT_OUTBOX_MAX_PENDING_LIMIT, nil
		}
		return 0, Invalidf("limit must be an integer of at least 1, not %q", s)
	}
	if n < 1 {
		return 0, Invalidf("limit must be an integer of at least 1, not %q", s)
	}
	return ClampPendingLimit(n), nil
}

// InstanceHeader is the request header a consumer of the outbox names
// itself by (hostname:pid) in the attempt history of the events it
// acknowledges. It is optional and beyond the contract: a backend that does
// not know it ignores it.
const InstanceHeader = "X-Switchyard-Instance"
