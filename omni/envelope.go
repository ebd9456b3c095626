package omni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// EnvelopeVersion is the version of the universal inbound envelope this
// package writes and reads (docs/contracts/omni-inbound-envelope.v1.json).
const EnvelopeVersion = 1

// Provider names a messaging provider.
type Provider string

// ProviderTelegram is the only provider so far.
const ProviderTelegram Provider = "telegram"

// Channel is how a conversation reaches us within a provider.
type Channel string

// The channels.
const (
	// ChannelTelegramBot: a user's own chat with the bot.
	ChannelTelegramBot Channel = "telegram_bot"
	// ChannelTelegramBusiness: a customer's chat with a Telegram Business
	// account that connected the bot.
	ChannelTelegramBusiness Channel = "telegram_business"
)

// Direction is the way a message or event travels.
type Direction string

// The directions.
const (
	DirectionInbound  Direction = "inbound"
	DirectionOutbound Direction = "outbound"
)

// EventType is what an inbound envelope reports, in provider-neutral words.
type EventType string

// The event types, with the Telegram updates they come from.
const (
	// EventMessageCreated: message, business_message.
	EventMessageCreated EventType = "message.created"
	// EventMessageEdited: edited_message, edited_business_message.
	EventMessageEdited EventType = "message.edited"
	// EventMessageDeleted: deleted_business_messages.
	EventMessageDeleted EventType = "message.deleted"
	// EventConnectionUpdated: business_connection.
	EventConnectionUpdated EventType = "connection.updated"
	// EventMembershipUpdated: my_chat_member (the user blocked or restarted the bot).
	EventMembershipUpdated EventType = "membership.updated"
	// EventCallbackReceived: callback_query (an inline button was pressed).
	EventCallbackReceived EventType = "callback.received"
	// EventUnknown: any other update (Payload.UpdateType names it); enqueued
	// all the same, never dropped.
	EventUnknown EventType = "unknown"
	// EventInvalid: an update of a type the chat role uses that lacks what
	// the Bot API always sends (a business message without its
	// business_connection_id, a message without its chat, a field of the
	// wrong JSON type). It is stored like any other; UpdateType names it and
	// Reason says what is wrong, and the chat role dead-letters it.
	EventInvalid EventType = "invalid"
)

// eventTypes lists every EventType, the values of the chat events counter's
// event_type label.
var eventTypes = []EventType{
	EventMessageCreated, EventMessageEdited, EventMessageDeleted, EventConnectionUpdated,
	EventMembershipUpdated, EventCallbackReceived, EventUnknown, EventInvalid,
}

// Envelope is the universal inbound event, version 1: what omni_inbound puts
// on receiver.flow and omni_chat reads from it. Its JSON form is the contract
// published as docs/contracts/omni-inbound-envelope.v1.json.
type Envelope struct {
	Version int `json:"version"`
	// IdempotencyKey is telegram:{botId}:{update_id}; it is the job id of
	// the enqueue, so a redelivered update is enqueued once.
	IdempotencyKey string    `json:"idempotencyKey"`
	Provider       Provider  `json:"provider"`
	Channel        Channel   `json:"channel"`
	Direction      Direction `json:"direction"`
	// ProviderEventID is Telegram's update_id.
	ProviderEventID string `json:"providerEventId"`
	// ProviderMessageID is the message_id of a message event, else null.
	ProviderMessageID *string   `json:"providerMessageId"`
	EventType         EventType `json:"eventType"`
	// OccurredAt is when the provider says it happened (a message's date, an
	// edit's edit_date); ReceivedAt when the webhook accepted it.
	OccurredAt time.Time `json:"occurredAt"`
	ReceivedAt time.Time `json:"receivedAt"`
	// PayloadRaw is the provider's update exactly as received, byte for
	// byte. Encode writes it into the envelope unchanged; json.Marshal would
	// compact it and escape <, > and & in it.
	PayloadRaw json.RawMessage `json:"payloadRaw"`
	// PayloadNormalized is the part of the update the chat role uses.
	PayloadNormalized Normalized `json:"payloadNormalized"`
}

// Normalized is the provider-neutral content of an envelope. Ids are strings
// (Telegram's are 64-bit and opaque to us). Which parts are set depends on
// the event type; the JSON Schema spells out which are required for which.
type Normalized struct {
	// AccountID is the provider account that received the event (the bot's id).
	AccountID string `json:"accountId"`
	// BusinessConnectionID is set for the telegram_business channel.
	BusinessConnectionID string `json:"businessConnectionId,omitempty"`
	// Chat is the conversation the event belongs to.
	Chat *ChatInfo `json:"chat,omitempty"`
	// Sender is who caused the event.
	Sender *Person `json:"sender,omitempty"`
	// Message is the created or edited message.
	Message *Message `json:"message,omitempty"`
	// DeletedMessageIDs are the messages a message.deleted event removed.
	DeletedMessageIDs []string `json:"deletedMessageIds,omitzero"`
	// Connection is the business connection's new state.
	Connection *Connection `json:"connection,omitempty"`
	// Membership is the bot's membership change in a chat.
	Membership *Membership `json:"membership,omitempty"`
	// Callback is the pressed inline button.
	Callback *Callback `json:"callback,omitempty"`
	// UpdateType is the provider's name of the update of an unknown or
	// invalid event (Telegram's Update field: poll, message_reaction, …).
	UpdateType string `json:"updateType,omitempty"`
	// Reason says what an invalid event lacks.
	Reason string `json:"reason,omitempty"`
}

// ChatInfo is a conversation at the provider.
type ChatInfo struct {
	ID string `json:"id"`
	// Type is private, group, supergroup or channel.
	Type  string `json:"type"`
	Title string `json:"title,omitempty"`
	// FirstName, LastName and Username describe a private chat's user.
	FirstName string `json:"firstName,omitempty"`
	LastName  string `json:"lastName,omitempty"`
	Username  string `json:"username,omitempty"`
}

// Person is a provider user.
type Person struct {
	ID        string `json:"id"`
	IsBot     bool   `json:"isBot"`
	FirstName string `json:"firstName,omitempty"`
	LastName  string `json:"lastName,omitempty"`
	Username  string `json:"username,omitempty"`
}

// MessageKind tells what a message holds.
type MessageKind string

// The message kinds. An envelope's message is text, media or service; the
// chat domain also stores a pressed button as a callback message.
const (
	// KindText: a text message.
	KindText MessageKind = "text"
	// KindMedia: a message whose content is not text — an attachment (photo,
	// document, …) or another content type (dice, poll, venue, …), named by
	// Message.Media; a content the build does not know is media "unknown".
	KindMedia MessageKind = "media"
	// KindCallback: a pressed inline button (chat domain only).
	KindCallback MessageKind = "callback"
	// KindService: a service message (a member joined, a payment went
	// through, …), named by Message.Service.
	KindService MessageKind = "service"
)

// MediaUnknown is the Media of a message whose content this build does not
// recognise: a content type newer than the Bot API it knows.
const MediaUnknown = "unknown"

// Message is a chat message.
type Message struct {
	ID   string      `json:"id"`
	Kind MessageKind `json:"kind"`
	// Text is the text, or a media message's caption.
	Text string    `json:"text"`
	Date time.Time `json:"date"`
	// EditedAt is set on message.edited.
	EditedAt *time.Time `json:"editedAt,omitempty"`
	// Media names the content of a media message: the Bot API's Message
	// field that holds it (photo, document, dice, poll, …), or MediaUnknown.
	Media string `json:"media,omitempty"`
	// Service names a service message's event: the Bot API's Message field
	// that holds it (new_chat_members, successful_payment, …).
	Service string `json:"service,omitempty"`
	// SentByBusinessBot is set when a bot wrote the message on the business
	// account's behalf.
	SentByBusinessBot bool `json:"sentByBusinessBot,omitempty"`
}

// Connection is a Telegram Business connection's state.
type Connection struct {
	ID         string    `json:"id"`
	UserID     string    `json:"userId"`
	UserChatID string    `json:"userChatId"`
	Enabled    bool      `json:"enabled"`
	CanReply   bool      `json:"canReply"`
	Date       time.Time `json:"date"`
}

// Membership is a change of the bot's status in a chat.
type Membership struct {
	// OldStatus and NewStatus are Telegram's chat member statuses
	// (member, kicked, left, administrator, …).
	OldStatus string `json:"oldStatus"`
	NewStatus string `json:"newStatus"`
}

// Callback is an inline button press.
type Callback struct {
	ID   string `json:"id"`
	Data string `json:"data"`
	// MessageID is the message that carried the button, when accessible.
	MessageID string `json:"messageId,omitempty"`
}

// OrderingKey is the key receiver.flow keeps in order: the conversation the
// envelope belongs to, so that the events of one thread are applied in the
// order they were enqueued and events of other threads flow past a stuck one.
// It maps one to one onto the chat role's threads. Events outside any
// conversation get the empty key (no ordering).
func OrderingKey(env *Envelope) string {
	n := &env.PayloadNormalized
	prefix := string(env.Provider) + ":" + n.AccountID
	switch {
	case env.EventType == EventConnectionUpdated && n.Connection != nil:
		return prefix + ":connection:" + n.Connection.ID
	case n.Chat == nil:
		return ""
	case n.BusinessConnectionID != "":
		return prefix + ":business:" + n.BusinessConnectionID + ":" + n.Chat.ID
	default:
		return prefix + ":chat:" + n.Chat.ID
	}
}

// connectionChatsKey is the start of the OrderingKey of every chat of the
// business connection env updates: the key prefix of the messages that may
// wait for it (decideAwaitConnection).
func connectionChatsKey(env *Envelope) string {
	n := &env.PayloadNormalized
	return string(env.Provider) + ":" + n.AccountID + ":business:" + n.Connection.ID + ":"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// envelopeHead is the Envelope without its two payloads, field for field in
// the same order and with the same names (TestEnvelopeHeadMatchesEnvelope
// keeps them in step).
type envelopeHead struct {
	Version           int       `json:"version"`
	IdempotencyKey    string    `json:"idempotencyKey"`
	Provider          Provider  `json:"provider"`
	Channel           Channel   `json:"channel"`
	Direction         Direction `json:"direction"`
	ProviderEventID   string    `json:"providerEventId"`
	ProviderMessageID *string   `json:"providerMessageId"`
	EventType         EventType `json:"eventType"`
	OccurredAt        time.Time `json:"occurredAt"`
	ReceivedAt        time.Time `json:"receivedAt"`
}

// Encode returns env's JSON form with payloadRaw exactly as received: the
// bytes of env.PayloadRaw go into the envelope unchanged, whitespace, key
// order, escapes and all. (json.Marshal compacts a json.RawMessage and
// escapes <, > and & in it, so the stored update would no longer be the one
// Telegram sent.) A PayloadRaw that is not a UTF-8 JSON object is an error.
func (env *Envelope) Encode() ([]byte, error) {
	raw := env.PayloadRaw
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || trimmed[0] != '{' || !jsonv1.Valid(raw) || !utf8.Valid(raw) {
		return nil, fmt.Errorf("encode envelope %s: payloadRaw is not a UTF-8 JSON object", env.IdempotencyKey)
	}
	head, err := jsonv1.Marshal(envelopeHead{
		Version: env.Version, IdempotencyKey: env.IdempotencyKey, Provider: env.Provider, Channel: env.Channel,
		Direction: env.Direction, ProviderEventID: env.ProviderEventID, ProviderMessageID: env.ProviderMessageID,
		EventType: env.EventType, OccurredAt: env.OccurredAt, ReceivedAt: env.ReceivedAt,
	})
	if err != nil {
		return nil, fmt.Errorf("encode envelope %s: %w", env.IdempotencyKey, err)
	}
	normalized, err := jsonv1.Marshal(&env.PayloadNormalized)
	if err != nil {
		return nil, fmt.Errorf("encode envelope %s: %w", env.IdempotencyKey, err)
	}
	out := make([]byte, 0, len(head)+len(raw)+len(normalized)+40)
	out = append(out, head[:len(head)-1]...) // without its closing brace
	out = append(out, `,"payloadRaw":`...)
	out = append(out, raw...)
	out = append(out, `,"payloadNormalized":`...)
	out = append(out, normalized...)
	return append(out, '}'), nil
}
