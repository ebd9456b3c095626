// Package contract is what the two halves of the bot outbox contract
// (specs/bot-outbox-contract.ru.txt) share, and all they share: the event
// types as the spec spells them, the BOT_OUTBOX_* constants, the ids, the
// event payloads, and the wire types and error codes of the /bot/* HTTP API.
//
// The backend (bot/backend) serves the contract: its outbox, the /bot/*
// routes and the backend actions. The onboarding bot (bot/onboarding) calls
// it over HTTP. Neither imports the other; both import this package, which
// imports nothing of the project but the JSON error leaf (httpjson).
package contract

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// EventType is the kind of an outbox event. Values are persisted as strings
// and never versioned: add, never rename.
type EventType string

// The event types of the contract, spelled as the spec spells them.
const (
	EventWalletConnected    EventType = "wallet_connected"
	EventRegistered         EventType = "registered"
	EventNewPartner         EventType = "new_partner"
	EventStatusNftActivated EventType = "status_nft_activated"
	// EventReactivation is reserved: the backend does not emit it on its own;
	// operators can through the admin API.
	EventReactivation EventType = "reactivation"
	// EventStructOvertake is reserved like EventReactivation.
	EventStructOvertake EventType = "struct_overtake"
)

// EventTypes lists every EventType in the spec's order.
var EventTypes = []EventType{
	EventWalletConnected, EventRegistered, EventNewPartner,
	EventStatusNftActivated, EventReactivation, EventStructOvertake,
}

// Valid reports whether t is one of EventTypes.
func (t EventType) Valid() bool {
	for _, v := range EventTypes {
		if t == v {
			return true
		}
	}
	return false
}

// Constants of the contract, named as the spec names them.
const (
	// BOT_OUTBOX_MAX_ATTEMPTS is the number of retries after which an event is
	// dead-lettered (registered) or closed (every other type).
	BOT_OUTBOX_MAX_ATTEMPTS = 10
	// BOT_OUTBOX_BACKOFF_BASE_SECONDS: a retried event is due again after
	// BOT_OUTBOX_BACKOFF_BASE_SECONDS · 2^attempts seconds.
	BOT_OUTBOX_BACKOFF_BASE_SECONDS = 60
	// BOT_OUTBOX_DEFAULT_PENDING_LIMIT is the page size without ?limit=.
	BOT_OUTBOX_DEFAULT_PENDING_LIMIT = 100
	// BOT_OUTBOX_MAX_PENDING_LIMIT caps ?limit=; a larger limit is capped.
	BOT_OUTBOX_MAX_PENDING_LIMIT = 500
)

// MaxPendingWait caps the long-poll ?wait= of GET /bot/events/pending.
const MaxPendingWait = 30 * time.Second

// ClampPendingLimit applies the contract's default and cap: 0 means
// BOT_OUTBOX_DEFAULT_PENDING_LIMIT, more than BOT_OUTBOX_MAX_PENDING_LIMIT is capped.
func ClampPendingLimit(limit int) int {
	switch {
	case limit <= 0:
		return BOT_OUTBOX_DEFAULT_PENDING_LIMIT
	case limit > BOT_OUTBOX_MAX_PENDING_LIMIT:
		return BOT_OUTBOX_MAX_PENDING_LIMIT
	}
	return limit
}

// EventID identifies an outbox event; ids are never reused.
type EventID int64

// UID is a backend user's id (the spec's magnet_uid).
type UID int64

// TelegramID is a Telegram user id: a bigint kept as decimal text, since it
// may not fit a float64. In JSON it is written as a string and read from a
// string or a number.
type TelegramID string

// ParseTelegramID checks that s is a Telegram id in canonical form: decimal
// digits, the first not 0, with no sign or space, of a positive int64 (at
// most 9223372036854775807). That is the pattern OpenAPI documents,
// ^[1-9][0-9]{0,18}$, within int64's range.
func ParseTelegramID(s string) (TelegramID, error) {
	if s == "" || s[0] < '1' || s[0] > '9' || strings.TrimLeft(s, "0123456789") != "" {
		return "", Invalidf("telegram id %q is not a positive integer in decimal digits", s)
	}
	if _, err := strconv.ParseInt(s, 10, 64); err != nil {
		return "", Invalidf("telegram id %q is larger than 9223372036854775807", s)
	}
	return TelegramID(s), nil
}

// UnmarshalJSON reads a Telegram id from a JSON string or a JSON integer,
// each in ParseTelegramID's canonical form (a number such as 1.0 or 1e3 is
// refused).
func (t *TelegramID) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = ""
		return nil
	}
	s := string(b)
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	id, err := ParseTelegramID(s)
	if err != nil {
		return err
	}
	*t = id
	return nil
}

// Event is one outbox event as GET /bot/events/pending returns it.
type Event struct {
	ID         EventID         `json:"id"`
	EventType  EventType       `json:"eventType"`
	TelegramID *TelegramID     `json:"telegramId"`
	MagnetUID  *UID            `json:"magnetUid"`
	Payload    json.RawMessage `json:"payload"`
	CreatedAt  time.Time       `json:"createdAt"`
	Attempts   int             `json:"attempts"`
	// Traceparent is the W3C traceparent of the emit's span
	// (bot.outbox.emit), which the consumer's handling of the event links
	// to. It is optional and was added to the contract later: absent when
	// the emit was not traced (tracing off, or an event older than the
	// field), and a consumer that does not read it loses only the link.
	Traceparent string `json:"traceparent,omitempty"`
}

// UserKey is the identity the pending order groups by: "uid:<n>" when the
// event names a backend user, else "tg:<id>", else "" (an event about nobody).
// In a pending page the events of one key are adjacent and in id order.
func (e Event) UserKey() string {
	return UserKey(e.MagnetUID, e.TelegramID)
}

// UserKey is Event.UserKey of an event about uid and tg (either may be nil).
func UserKey(uid *UID, tg *TelegramID) string {
	switch {
	case uid != nil:
		return fmt.Sprintf("uid:%d", int64(*uid))
	case tg != nil:
		return "tg:" + string(*tg)
	default:
		return ""
	}
}

// WalletConnectedPayload is the payload of wallet_connected.
type WalletConnectedPayload struct {
	Addr string `json:"addr"`
}

// RegisteredPayload is the payload of registered: the leader the user
// registered under (nil for a user without a leader), so the bot can detect a
// user who left for another leader.
type RegisteredPayload struct {
	LeaderUID  *UID   `json:"leaderUid"`
	LeaderLink string `json:"leaderLink,omitempty"`
}

// NewPartnerPayload is the payload of new_partner, sent to the leader.
type NewPartnerPayload struct {
	PartnerUID  UID    `json:"partnerUid"`
	PartnerName string `json:"partnerName"`
	PartnerLink string `json:"partnerLink"`
}

// NftLevel is a status NFT level.
type NftLevel string

// The status NFT levels.
const (
	NftLP1 NftLevel = "lp1"
	NftLP2 NftLevel = "lp2"
)

// StatusNftActivatedPayload is the payload of status_nft_activated.
type StatusNftActivatedPayload struct {
	Level NftLevel `json:"level"`
}
