package omni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	jsonv1 "github.com/go-json-experiment/json/v1"
)

// ErrBadUpdate is returned by NormalizeTelegram for a body that is not a
// Telegram update (not UTF-8 JSON, not an object, no integer update_id).
const ErrBadUpdate = Error("not a telegram update")

// Error is an error of this package that is a constant.
type Error string

func (e Error) Error() string { return string(e) }

// updateTypes are the fields of Telegram's Update object in the Bot API this
// build knows (9.4), in the order the Bot API lists them. An update carries
// at most one of them.
var updateTypes = []string{
	"message", "edited_message", "channel_post", "edited_channel_post",
	"business_connection", "business_message", "edited_business_message", "deleted_business_messages",
	"message_reaction", "message_reaction_count", "inline_query", "chosen_inline_result", "callback_query",
	"shipping_query", "pre_checkout_query", "purchased_paid_media", "poll", "poll_answer",
	"my_chat_member", "chat_member", "chat_join_request", "chat_boost", "removed_chat_boost",
}

// isBotAPIUpdateType reports whether t is an Update field of the Bot API
// this build knows.
func isBotAPIUpdateType(t string) bool { return slices.Contains(updateTypes, t) }

// mediaFields are the Message fields that hold a message's content when it
// is not text, in the Bot API's order (animation before document and venue
// before location: Telegram sets the second of each pair too, for older
// clients).
var mediaFields = []string{
	"animation", "audio", "document", "paid_media", "photo", "sticker", "story", "video", "video_note",
	"voice", "checklist", "contact", "dice", "game", "poll", "venue", "location", "invoice",
	"giveaway", "giveaway_winners",
}

// serviceFields are the Message fields of service messages, in the Bot
// API's order.
var serviceFields = []string{
	"new_chat_members", "left_chat_member", "chat_owner_left", "chat_owner_changed", "new_chat_title",
	"new_chat_photo", "delete_chat_photo", "group_chat_created", "supergroup_chat_created",
	"channel_chat_created", "message_auto_delete_timer_changed", "migrate_to_chat_id",
	"migrate_from_chat_id", "pinned_message", "successful_payment", "refunded_payment", "users_shared",
	"chat_shared", "gift", "unique_gift", "gift_upgrade_sent", "connected_website",
	"write_access_allowed", "passport_data", "proximity_alert_triggered", "boost_added",
	"chat_background_set", "checklist_tasks_done", "checklist_tasks_added",
	"direct_message_price_changed", "forum_topic_created", "forum_topic_edited", "forum_topic_closed",
	"forum_topic_reopened", "general_forum_topic_hidden", "general_forum_topic_unhidden",
	"giveaway_created", "giveaway_completed", "paid_message_price_changed", "suggested_post_approved",
	"suggested_post_approval_failed", "suggested_post_declined", "suggested_post_paid",
	"suggested_post_refunded", "video_chat_scheduled", "video_chat_started", "video_chat_ended",
	"video_chat_participants_invited", "web_app_data",
}

// Telegram's objects as far as the chat role needs them. Decoding into these
// small structs, rather than telego's full types, keeps the webhook's hot
// path cheap and tolerant: fields Telegram adds later are ignored here and
// kept in payloadRaw.

type tgUser struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Username  string `json:"username"`
}

type tgChat struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"`
	Title     string `json:"title"`
	Username  string `json:"username"`
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
}

type tgMessage struct {
	MessageID            int64   `json:"message_id"`
	From                 *tgUser `json:"from"`
	SenderBusinessBot    *tgUser `json:"sender_business_bot"`
	Chat                 tgChat  `json:"chat"`
	Date                 int64   `json:"date"`
	EditDate             int64   `json:"edit_date"`
	BusinessConnectionID string  `json:"business_connection_id"`
	Text                 string  `json:"text"`
	Caption              string  `json:"caption"`
}

type tgBusinessConnection struct {
	ID         string `json:"id"`
	User       tgUser `json:"user"`
	UserChatID int64  `json:"user_chat_id"`
	Date       int64  `json:"date"`
	IsEnabled  bool   `json:"is_enabled"`
	// CanReply is the field of Bot API 7.2–8.x; 9.0 moved it into rights.
	CanReply *bool `json:"can_reply"`
	Rights   *struct {
		CanReply bool `json:"can_reply"`
	} `json:"rights"`
}

type tgDeletedMessages struct {
	BusinessConnectionID string  `json:"business_connection_id"`
	Chat                 tgChat  `json:"chat"`
	MessageIDs           []int64 `json:"message_ids"`
}

type tgChatMemberUpdated struct {
	Chat          tgChat `json:"chat"`
	From          tgUser `json:"from"`
	Date          int64  `json:"date"`
	OldChatMember struct {
		Status string `json:"status"`
	} `json:"old_chat_member"`
	NewChatMember struct {
		Status string `json:"status"`
	} `json:"new_chat_member"`
}

type tgCallbackQuery struct {
	ID      string `json:"id"`
	From    tgUser `json:"from"`
	Message *struct {
		MessageID int64  `json:"message_id"`
		Chat      tgChat `json:"chat"`
	} `json:"message"`
	Data string `json:"data"`
}

// unusable is an update of a known type that lacks what the Bot API always
// sends; its text becomes the invalid envelope's reason.
type unusable string

func (u unusable) Error() string { return string(u) }

// NormalizeTelegram turns the body of a Telegram webhook into the universal
// envelope v1. It is pure: botID is the receiving bot's id and receivedAt the
// time the webhook accepted the body. It refuses (ErrBadUpdate) only a body
// that is not a UTF-8 JSON object with an integer update_id; every update
// gives an envelope, whose payloadRaw is body byte for byte:
//
//   - an update type the chat role uses gives its event type (message.created,
//     connection.updated, …);
//   - any other update type, one of the Bot API's or a newer one, gives
//     eventType "unknown" with updateType naming it;
//   - an update of a type the chat role uses that lacks what Telegram always
//     sends (a business message's business_connection_id, a message's chat,
//     a field of the wrong JSON type) gives eventType "invalid" with
//     updateType and the reason, for the chat role to dead-letter.
func NormalizeTelegram(body []byte, botID int64, receivedAt time.Time) (*Envelope, error) {
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not UTF-8", ErrBadUpdate)
	}
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: the body is not a JSON object", ErrBadUpdate)
	}
	// The update's own keys, matched exactly (a struct would match them
	// case-insensitively).
	var fields map[string]json.RawMessage
	if err := jsonv1.Unmarshal(body, &fields); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadUpdate, err)
	}
	rawID, ok := fields["update_id"]
	if !ok {
		return nil, fmt.Errorf("%w: update_id is missing", ErrBadUpdate)
	}
	var updateID int64
	if err := jsonv1.Unmarshal(rawID, &updateID); err != nil || bytes.Equal(rawID, []byte("null")) {
		return nil, fmt.Errorf("%w: update_id is not an integer", ErrBadUpdate)
	}
	receivedAt = receivedAt.UTC()
	env := &Envelope{
		Version:         EnvelopeVersion,
		IdempotencyKey:  string(ProviderTelegram) + ":" + itoa(botID) + ":" + itoa(updateID),
		Provider:        ProviderTelegram,
		Channel:         ChannelTelegramBot,
		Direction:       DirectionInbound,
		ProviderEventID: itoa(updateID),
		EventType:       EventUnknown,
		OccurredAt:      receivedAt,
		ReceivedAt:      receivedAt,
		PayloadRaw:      json.RawMessage(body),
	}
	env.PayloadNormalized.AccountID = itoa(botID)

	kind := updateKind(fields)
	if err := normalizeUpdate(env, kind, fields[kind]); err != nil {
		reason := err.Error()
		var u unusable
		if !errors.As(err, &u) {
			reason = kind + ": " + reason // a JSON type mismatch
		}
		invalidate(env, kind, reason)
	}
	return env, nil
}

// updateKind is the update's type: the first Update field of the Bot API it
// carries, else its first other key in sorted order ("" when it has none).
func updateKind(fields map[string]json.RawMessage) string {
	for _, t := range updateTypes {
		if _, ok := fields[t]; ok {
			return t
		}
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if k != "update_id" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	slices.Sort(keys)
	return keys[0]
}

// normalizeUpdate fills env from the update's field kind, holding raw. An
// error makes the envelope invalid.
func normalizeUpdate(env *Envelope, kind string, raw json.RawMessage) error {
	n := &env.PayloadNormalized
	if bytes.Equal(raw, []byte("null")) && isBotAPIUpdateType(kind) {
		return unusable(kind + " is null")
	}
	switch kind {
	case "message", "channel_post":
		return normalizeMessage(env, kind, raw, EventMessageCreated, false)
	case "edited_message", "edited_channel_post":
		return normalizeMessage(env, kind, raw, EventMessageEdited, false)
	case "business_message":
		return normalizeMessage(env, kind, raw, EventMessageCreated, true)
	case "edited_business_message":
		return normalizeMessage(env, kind, raw, EventMessageEdited, true)
	case "deleted_business_messages":
		var d tgDeletedMessages
		if err := jsonv1.Unmarshal(raw, &d); err != nil {
			return err
		}
		if err := checkID(kind, "business_connection_id", d.BusinessConnectionID); err != nil {
			return err
		}
		if d.Chat.ID == 0 || d.Chat.Type == "" {
			return unusable(kind + " has no chat")
		}
		env.EventType = EventMessageDeleted
		env.Channel = ChannelTelegramBusiness
		n.BusinessConnectionID = d.BusinessConnectionID
		n.Chat = chatOf(d.Chat)
		n.DeletedMessageIDs = make([]string, len(d.MessageIDs))
		for i, id := range d.MessageIDs {
			n.DeletedMessageIDs[i] = itoa(id)
		}
	case "business_connection":
		var c tgBusinessConnection
		if err := jsonv1.Unmarshal(raw, &c); err != nil {
			return err
		}
		if err := checkID(kind, "id", c.ID); err != nil {
			return err
		}
		if c.User.ID == 0 {
			return unusable(kind + " has no user")
		}
		env.EventType = EventConnectionUpdated
		env.Channel = ChannelTelegramBusiness
		env.OccurredAt = unixOr(c.Date, env.ReceivedAt)
		n.BusinessConnectionID = c.ID
		n.Sender = personOf(&c.User)
		canReply := c.Rights != nil && c.Rights.CanReply
		if c.CanReply != nil {
			canReply = canReply || *c.CanReply
		}
		n.Connection = &Connection{
			ID:         c.ID,
			UserID:     itoa(c.User.ID),
			UserChatID: itoa(c.UserChatID),
			Enabled:    c.IsEnabled,
			CanReply:   canReply,
			Date:       env.OccurredAt,
		}
	case "my_chat_member":
		var m tgChatMemberUpdated
		if err := jsonv1.Unmarshal(raw, &m); err != nil {
			return err
		}
		if m.Chat.ID == 0 || m.Chat.Type == "" {
			return unusable(kind + " has no chat")
		}
		env.EventType = EventMembershipUpdated
		env.OccurredAt = unixOr(m.Date, env.ReceivedAt)
		n.Chat = chatOf(m.Chat)
		n.Sender = personOf(&m.From)
		n.Membership = &Membership{OldStatus: m.OldChatMember.Status, NewStatus: m.NewChatMember.Status}
	case "callback_query":
		var q tgCallbackQuery
		if err := jsonv1.Unmarshal(raw, &q); err != nil {
			return err
		}
		if err := checkID(kind, "id", q.ID); err != nil {
			return err
		}
		if q.From.ID == 0 {
			return unusable(kind + " has no from")
		}
		env.EventType = EventCallbackReceived
		n.Sender = personOf(&q.From)
		n.Callback = &Callback{ID: q.ID, Data: q.Data}
		if q.Message != nil && q.Message.Chat.ID != 0 {
			n.Chat = chatOf(q.Message.Chat)
			n.Callback.MessageID = itoa(q.Message.MessageID)
		} else {
			// A button under an inline-mode message has no chat: the
			// presser's private chat with the bot stands in for it.
			n.Chat = &ChatInfo{ID: itoa(q.From.ID), Type: "private",
				FirstName: q.From.FirstName, LastName: q.From.LastName, Username: q.From.Username}
		}
	default:
		n.UpdateType = kind
	}
	return nil
}

// maxIDLength is the longest provider id the envelope's schema allows.
const maxIDLength = 256

// checkID refuses an empty or oversized string id, which Telegram never
// sends and the envelope's schema does not allow.
func checkID(kind, field, value string) error {
	switch {
	case value == "":
		return unusable(kind + " has no " + field)
	case len(value) > maxIDLength:
		return unusable(fmt.Sprintf("%s.%s is longer than %d bytes", kind, field, maxIDLength))
	}
	return nil
}

// invalidate makes env the invalid event of an update of type kind: the
// provider's ids and the raw payload stay, the normalised content is only
// what is wrong with it.
func invalidate(env *Envelope, kind, reason string) {
	env.EventType = EventInvalid
	env.Channel = ChannelTelegramBot
	if strings.HasPrefix(kind, "business_") || strings.HasPrefix(kind, "edited_business_") || strings.HasPrefix(kind, "deleted_business_") {
		env.Channel = ChannelTelegramBusiness
	}
	env.ProviderMessageID = nil
	env.OccurredAt = env.ReceivedAt
	env.PayloadNormalized = Normalized{AccountID: env.PayloadNormalized.AccountID, UpdateType: kind, Reason: reason}
}

func normalizeMessage(env *Envelope, kind string, raw json.RawMessage, t EventType, business bool) error {
	var m tgMessage
	if err := jsonv1.Unmarshal(raw, &m); err != nil {
		return err
	}
	if m.Chat.ID == 0 || m.Chat.Type == "" {
		return unusable(kind + " has no chat")
	}
	n := &env.PayloadNormalized
	env.EventType = t
	if business {
		if err := checkID(kind, "business_connection_id", m.BusinessConnectionID); err != nil {
			return err
		}
		env.Channel = ChannelTelegramBusiness
		n.BusinessConnectionID = m.BusinessConnectionID
	}
	id := itoa(m.MessageID)
	env.ProviderMessageID = &id
	env.OccurredAt = unixOr(m.Date, env.ReceivedAt)
	n.Chat = chatOf(m.Chat)
	if m.From != nil {
		n.Sender = personOf(m.From)
	}
	msg := &Message{ID: id, Date: env.OccurredAt, SentByBusinessBot: m.SenderBusinessBot != nil, Kind: KindText, Text: m.Text}
	if m.Text == "" {
		// The message's own keys tell its content.
		var fields map[string]json.RawMessage
		if err := jsonv1.Unmarshal(raw, &fields); err != nil {
			return err
		}
		msg.Kind, msg.Media, msg.Service = contentOf(fields)
		if msg.Kind == KindMedia {
			msg.Text = m.Caption
		}
	}
	if t == EventMessageEdited {
		edited := unixOr(m.EditDate, env.ReceivedAt)
		msg.EditedAt = &edited
		env.OccurredAt = edited
	}
	n.Message = msg
	return nil
}

// contentOf classifies a message without text by the Bot API field that
// holds its content: a media field, else a service field. A message with
// none of them holds a content type newer than this build: media "unknown".
func contentOf(fields map[string]json.RawMessage) (kind MessageKind, media, service string) {
	present := func(f string) bool {
		v, ok := fields[f]
		return ok && !bytes.Equal(v, []byte("null")) && !bytes.Equal(v, []byte("false"))
	}
	for _, f := range mediaFields {
		if present(f) {
			return KindMedia, f, ""
		}
	}
	for _, f := range serviceFields {
		if present(f) {
			return KindService, "", f
		}
	}
	return KindMedia, MediaUnknown, ""
}

func chatOf(c tgChat) *ChatInfo {
	return &ChatInfo{ID: itoa(c.ID), Type: c.Type, Title: c.Title,
		FirstName: c.FirstName, LastName: c.LastName, Username: c.Username}
}

func personOf(u *tgUser) *Person {
	return &Person{ID: itoa(u.ID), IsBot: u.IsBot, FirstName: u.FirstName, LastName: u.LastName, Username: u.Username}
}

// maxUnixDate is 9999-12-31T23:59:59Z, the last second RFC 3339 (and so
// the envelope's JSON) can write.
const maxUnixDate = 253402300799

// unixOr is Telegram's unix date sec, or def when sec is absent or is no
// date an envelope can carry (a later year than 9999 cannot be encoded, and
// the webhook would answer 503 to that update for ever).
func unixOr(sec int64, def time.Time) time.Time {
	if sec <= 0 || sec > maxUnixDate {
		return def
	}
	return time.Unix(sec, 0).UTC()
}
