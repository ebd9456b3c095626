package omni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// ErrBadUpdate is returned by NormalizeTelegram for a body that is not a
// Telegram update (malformed JSON, not an object, no integer update_id).
const ErrBadUpdate = Error("not a telegram update")

// Error is an error of this package that is a constant.
type Error string

func (e Error) Error() string { return string(e) }

// Telegram's update as far as the chat role needs it. Decoding into these
// small structs, rather than telego's full types, keeps the webhook's hot
// path cheap and tolerant: fields Telegram adds later are ignored here and
// kept in payloadRaw.
type tgUpdate struct {
	UpdateID                *int64                `json:"update_id"`
	Message                 *tgMessage            `json:"message"`
	EditedMessage           *tgMessage            `json:"edited_message"`
	BusinessConnection      *tgBusinessConnection `json:"business_connection"`
	BusinessMessage         *tgMessage            `json:"business_message"`
	EditedBusinessMessage   *tgMessage            `json:"edited_business_message"`
	DeletedBusinessMessages *tgDeletedMessages    `json:"deleted_business_messages"`
	MyChatMember            *tgChatMemberUpdated  `json:"my_chat_member"`
	CallbackQuery           *tgCallbackQuery      `json:"callback_query"`
}

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

	// Presence of one of these makes a media message.
	Photo     json.RawMessage `json:"photo"`
	Document  json.RawMessage `json:"document"`
	Video     json.RawMessage `json:"video"`
	Voice     json.RawMessage `json:"voice"`
	Audio     json.RawMessage `json:"audio"`
	Sticker   json.RawMessage `json:"sticker"`
	Animation json.RawMessage `json:"animation"`
	VideoNote json.RawMessage `json:"video_note"`
	Contact   json.RawMessage `json:"contact"`
	Location  json.RawMessage `json:"location"`
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

// NormalizeTelegram turns the body of a Telegram webhook into the universal
// envelope v1. It is pure: botID is the receiving bot's id and receivedAt the
// time the webhook accepted the body. Every update with an integer update_id
// gives an envelope — an update type the chat role does not use becomes
// eventType "unknown" — and anything else, or an update lacking what
// Telegram always sends (a business update's connection id), is ErrBadUpdate.
func NormalizeTelegram(body []byte, botID int64, receivedAt time.Time) (*Envelope, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return nil, fmt.Errorf("%w: the body is not a JSON object", ErrBadUpdate)
	}
	var u tgUpdate
	if err := json.Unmarshal(body, &u); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadUpdate, err)
	}
	if u.UpdateID == nil {
		return nil, fmt.Errorf("%w: update_id is missing", ErrBadUpdate)
	}
	receivedAt = receivedAt.UTC()
	env := &Envelope{
		Version:         EnvelopeVersion,
		IdempotencyKey:  string(ProviderTelegram) + ":" + itoa(botID) + ":" + itoa(*u.UpdateID),
		Provider:        ProviderTelegram,
		Channel:         ChannelTelegramBot,
		Direction:       DirectionInbound,
		ProviderEventID: itoa(*u.UpdateID),
		EventType:       EventUnknown,
		OccurredAt:      receivedAt,
		ReceivedAt:      receivedAt,
		PayloadRaw:      json.RawMessage(body),
	}
	n := &env.PayloadNormalized
	n.AccountID = itoa(botID)

	switch {
	case u.Message != nil:
		normalizeMessage(env, u.Message, EventMessageCreated, false)
	case u.EditedMessage != nil:
		normalizeMessage(env, u.EditedMessage, EventMessageEdited, false)
	case u.BusinessMessage != nil:
		normalizeMessage(env, u.BusinessMessage, EventMessageCreated, true)
	case u.EditedBusinessMessage != nil:
		normalizeMessage(env, u.EditedBusinessMessage, EventMessageEdited, true)
	case u.DeletedBusinessMessages != nil:
		d := u.DeletedBusinessMessages
		env.EventType = EventMessageDeleted
		env.Channel = ChannelTelegramBusiness
		n.BusinessConnectionID = d.BusinessConnectionID
		n.Chat = chatOf(d.Chat)
		n.DeletedMessageIDs = make([]string, len(d.MessageIDs))
		for i, id := range d.MessageIDs {
			n.DeletedMessageIDs[i] = itoa(id)
		}
	case u.BusinessConnection != nil:
		c := u.BusinessConnection
		env.EventType = EventConnectionUpdated
		env.Channel = ChannelTelegramBusiness
		env.OccurredAt = unixOr(c.Date, receivedAt)
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
	case u.MyChatMember != nil:
		m := u.MyChatMember
		env.EventType = EventMembershipUpdated
		env.OccurredAt = unixOr(m.Date, receivedAt)
		n.Chat = chatOf(m.Chat)
		n.Sender = personOf(&m.From)
		n.Membership = &Membership{OldStatus: m.OldChatMember.Status, NewStatus: m.NewChatMember.Status}
	case u.CallbackQuery != nil:
		q := u.CallbackQuery
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
		n.UpdateType = updateType(body)
	}
	if err := checkContract(env); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadUpdate, err)
	}
	return env, nil
}

// maxIDLength is the longest provider id the envelope's schema allows.
const maxIDLength = 256

// checkContract refuses an update whose envelope would break the published
// v1 schema — a business update without its connection id, a deletion of
// no messages, an empty or oversized string id — which Telegram never sends and the chat role could
// only dead-letter; refusing it at the webhook makes it a 400 that changes
// nothing.
func checkContract(env *Envelope) error {
	if err := validFor(env); err != nil {
		return err
	}
	n := &env.PayloadNormalized
	if env.EventType == EventMessageDeleted && len(n.DeletedMessageIDs) == 0 {
		return fmt.Errorf("deleted_business_messages names no message_ids")
	}
	type id struct{ field, value string }
	var ids []id
	if n.BusinessConnectionID != "" {
		ids = append(ids, id{"business_connection_id", n.BusinessConnectionID})
	}
	if n.Connection != nil {
		ids = append(ids, id{"business_connection.id", n.Connection.ID})
	}
	if n.Callback != nil {
		ids = append(ids, id{"callback_query.id", n.Callback.ID})
	}
	for _, i := range ids {
		if i.value == "" || len(i.value) > maxIDLength {
			return fmt.Errorf("%s must have 1 to %d characters", i.field, maxIDLength)
		}
	}
	return nil
}

func normalizeMessage(env *Envelope, m *tgMessage, t EventType, business bool) {
	n := &env.PayloadNormalized
	env.EventType = t
	if business {
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
	msg := &Message{ID: id, Kind: KindService, Date: env.OccurredAt, SentByBusinessBot: m.SenderBusinessBot != nil}
	switch media := mediaOf(m); {
	case media != "":
		msg.Kind, msg.Media, msg.Text = KindMedia, media, m.Caption
	case m.Text != "":
		msg.Kind, msg.Text = KindText, m.Text
	}
	if t == EventMessageEdited {
		edited := unixOr(m.EditDate, env.ReceivedAt)
		msg.EditedAt = &edited
		env.OccurredAt = edited
	}
	n.Message = msg
}

func mediaOf(m *tgMessage) string {
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{
		{"photo", m.Photo}, {"document", m.Document}, {"video", m.Video}, {"voice", m.Voice},
		{"audio", m.Audio}, {"sticker", m.Sticker}, {"animation", m.Animation},
		{"video_note", m.VideoNote}, {"contact", m.Contact}, {"location", m.Location},
	} {
		if len(f.raw) > 0 && !bytes.Equal(f.raw, []byte("null")) {
			return f.name
		}
	}
	return ""
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

// updateType names an unknown update by its first key other than update_id.
func updateType(body []byte) string {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return ""
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
