// Package bot is both halves of the bot outbox contract
// (specs/bot-outbox-contract.ru.txt) in one binary: the backend's
// transactional outbox bot_event_outbox with the /bot/* service API, the
// minimal backend domain behind it (users, web notifications, connect
// tokens), and the onboarding bot that consumes it.
//
// Guarantees of the backend half:
//
//   - An event exists if and only if its business change committed: the
//     backend actions emit inside their own transaction (the *Tx emitters).
//   - GET /bot/events/pending returns unprocessed, due events grouped by user
//     (uid first, else Telegram id) and by id within a user, so a consumer that
//     stops a user at its first failure keeps that user's order.
//   - Nothing is lost: a retried event comes back after 60 s · 2^attempts; after
//     BOT_OUTBOX_MAX_ATTEMPTS a registered event is dead-lettered (kept,
//     logged with [bot-outbox][DEAD-LETTER], listed and redrivable in the admin
//     API); any other type is closed so it stops blocking its user.
//   - Ack is idempotent: processing an acked event again changes nothing, and
//     a retry counts only for an event that was due.
//   - Every /bot/* route checks the shared secret in constant time.
//
// Guarantees of the onboarding bot (Onboarding), which reaches the backend
// only through BackendClient:
//
//   - Each event takes effect once. Its mark in the dedup ledger
//     bot_processed_events and its handler's writes (the funnel, the records
//     of the Telegram calls it causes) commit in one transaction, so a crash
//     leaves both or neither; an event found in the ledger is acked without
//     its handler. The spec's gap — a crash between the mark and the handler
//     losing the side effect — is closed.
//   - Telegram calls go through records (bot_outgoing) keyed by their cause
//     ("event:<id>:…", "update:<bot>:<id>:…"). A sender claims a record, makes
//     the call and marks it sent; a sent record is never sent again, and a
//     failed call is retried until sent (429 after its retry_after, 5xx and
//     network errors with backoff). A 403 marks the user unreachable and moves
//     the record to its fallback, the web notification (POST /bot/notification).
//     The one duplicate left is a process dying after Telegram accepted a call
//     and before its mark committed: the call is made again once the claim runs
//     out — at least once there, never lost. One process at a time sends
//     for the bot (the lease telegram:sender:<bot id>), so processes on one
//     database keep to the bot's rate limits together.
//   - Per-user order: a user's events are handled in id order. A handler error
//     rolls back that event alone, asks the backend to retry it and stops the
//     user's group while other users go on; the backend holds the user's later
//     events until the retried one is handled, closed or dead-lettered.
//   - One consumer at a time across processes (the lease onboarding:outbox),
//     and a stopped consumer finishes and acks the page it holds; a page whose
//     ack was lost comes back and is acked from the ledger.
//   - A Telegram update is stored before it is confirmed: long polling advances
//     the durable offset in the transaction that stores the updates, and the
//     webhook answers 200 only after the store. Each stored update is handled
//     once, in order per chat.
//
// EventType, Event and BackendClient are the one definition both sides use.
package bot

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
		return "", invalidf("telegram id %q is not a positive integer in decimal digits", s)
	}
	if _, err := strconv.ParseInt(s, 10, 64); err != nil {
		return "", invalidf("telegram id %q is larger than 9223372036854775807", s)
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
}

// UserKey is the identity the pending order groups by: "uid:<n>" when the
// event names a backend user, else "tg:<id>", else "" (an event about nobody).
// In a pending page the events of one key are adjacent and in id order.
func (e Event) UserKey() string {
	return shortUserKey(e.MagnetUID, e.TelegramID)
}

func shortUserKey(uid *UID, tg *TelegramID) string {
	switch {
	case uid != nil:
		return fmt.Sprintf("uid:%d", int64(*uid))
	case tg != nil:
		return "tg:" + string(*tg)
	default:
		return ""
	}
}

// Target names the user an event is about. The zero value of a field is NULL
// in the row; at least one field should be set for the per-user order to mean
// anything.
type Target struct {
	MagnetUID  UID
	TelegramID TelegramID
}

func (t Target) ptrs() (*UID, *TelegramID) {
	var (
		uid *UID
		tg  *TelegramID
	)
	if t.MagnetUID != 0 {
		uid = &t.MagnetUID
	}
	if t.TelegramID != "" {
		tg = &t.TelegramID
	}
	return uid, tg
}

// userKey is the stored grouping key. The numbers are zero-padded so that the
// text order of keys is the numeric order of ids within each kind.
func userKey(uid *UID, tg *TelegramID) string {
	switch {
	case uid != nil:
		return fmt.Sprintf("uid:%020d", int64(*uid))
	case tg != nil:
		n, _ := strconv.ParseInt(string(*tg), 10, 64)
		return fmt.Sprintf("tg:%020d", n)
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

// Error is a domain error of package bot. The API maps each to a status and a
// stable code, and BackendClient maps the code back, so errors.Is works on
// both sides of the HTTP contract.
type Error string

func (e Error) Error() string { return string(e) }

// Domain errors.
const (
	ErrUserNotFound      = Error("user not found")
	ErrLeaderNotFound    = Error("leader not found")
	ErrEventNotFound     = Error("event not found")
	ErrEventProcessed    = Error("event already processed")
	ErrLinkTaken         = Error("link already taken")
	ErrTelegramTaken     = Error("telegram id already bound to another account")
	ErrAccountBound      = Error("account already bound to another telegram id")
	ErrNoPreview         = Error("telegram id is not awaiting confirmation for this account")
	ErrAlreadyRegistered = Error("user already registered under another leader")
	ErrTokenNotFound     = Error("connect token not found")
	ErrTokenExpired      = Error("connect token expired")
	ErrTokenUsed         = Error("connect token already used by another telegram id")
	ErrUnauthorized      = Error("missing or invalid credentials")
)

// InvalidError is bad input: the API answers 400 with its message.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

func invalidf(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}
