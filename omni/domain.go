package omni

import (
	"time"
)

// ContactID, ThreadID and MessageID are the chat domain's row ids.
type (
	ContactID int64
	ThreadID  int64
	MessageID int64
)

// ThreadState is open or closed.
type ThreadState string

// The thread states. A closed thread opens again when its contact writes.
const (
	ThreadOpen   ThreadState = "open"
	ThreadClosed ThreadState = "closed"
)

// Origin tells who made a message.
type Origin string

// The origins.
const (
	// OriginProvider: it came from the provider (the contact, or the
	// business account's owner writing from their own Telegram app).
	OriginProvider Origin = "provider"
	// OriginOperator: an operator's reply through the admin API or console.
	OriginOperator Origin = "operator"
	// OriginRule: a chat rule wrote it (the automatic acknowledgement).
	OriginRule Origin = "rule"
)

// Status is a message's state. Inbound messages are received; outbound ones
// move queued → sending → sent, or → retrying (with the next attempt's time)
// and back to sending, or → failed (with the reason).
type Status string

// The statuses.
const (
	StatusReceived Status = "received"
	StatusQueued   Status = "queued"
	StatusSending  Status = "sending"
	StatusSent     Status = "sent"
	StatusRetrying Status = "retrying"
	StatusFailed   Status = "failed"
)

// Final reports whether no delivery work remains for a message in status s.
func (s Status) Final() bool {
	return s == StatusReceived || s == StatusSent || s == StatusFailed
}

// Domain errors.
const (
	ErrThreadNotFound  = Error("omni: thread not found")
	ErrMessageNotFound = Error("omni: message not found")
	// ErrCannotReply refuses a business reply on a connection that is
	// disabled, unknown, or has no right to reply.
	ErrCannotReply = Error("omni: the business connection cannot reply")
)

// Contact is a provider identity the platform talks to.
type Contact struct {
	ID                   ContactID `json:"id"`
	Provider             Provider  `json:"provider"`
	ProviderUserID       string    `json:"providerUserId"`
	BusinessConnectionID string    `json:"businessConnectionId,omitempty"`
	Name                 string    `json:"name"`
	Username             string    `json:"username,omitempty"`
	Reachable            bool      `json:"reachable"`
	UnreachableReason    string    `json:"unreachableReason,omitempty"`
}

// Thread is the conversation with one contact on one channel.
type Thread struct {
	ID                   ThreadID    `json:"id"`
	Channel              Channel     `json:"channel"`
	BusinessConnectionID string      `json:"businessConnectionId"`
	Contact              Contact     `json:"contact"`
	State                ThreadState `json:"state"`
	Unread               int         `json:"unread"`
	LastMessageAt        *time.Time  `json:"lastMessageAt"`
	// BotID and ChatID say where the thread lives at the provider.
	BotID  string `json:"botId"`
	ChatID string `json:"chatId"`
}

// OmniMessage is one message of a thread, in either direction, with its
// delivery status.
type OmniMessage struct {
	ID                MessageID   `json:"id"`
	ThreadID          ThreadID    `json:"threadId"`
	Seq               int64       `json:"seq"`
	Direction         Direction   `json:"direction"`
	Origin            Origin      `json:"origin"`
	Kind              MessageKind `json:"kind"`
	Text              string      `json:"text"`
	Status            Status      `json:"status"`
	ProviderMessageID *string     `json:"providerMessageId"`
	Attempts          int         `json:"attempts"`
	NextAttemptAt     *time.Time  `json:"nextAttemptAt,omitempty"`
	FailureReason     string      `json:"failureReason,omitempty"`
	EditedAt          *time.Time  `json:"editedAt,omitempty"`
	DeletedAt         *time.Time  `json:"deletedAt,omitempty"`
	SentAt            *time.Time  `json:"sentAt,omitempty"`
	CreatedAt         time.Time   `json:"createdAt"`
}

// BusinessConnection is the stored state of a Telegram Business connection.
type BusinessConnection struct {
	ID         string    `json:"id"`
	BotID      string    `json:"botId"`
	UserID     string    `json:"userId"`
	UserChatID string    `json:"userChatId"`
	Enabled    bool      `json:"enabled"`
	CanReply   bool      `json:"canReply"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// SendCommand is the outgoing command the chat role puts on sender.flow. It
// carries everything the outbound role needs to deliver, so outbound never
// reads the chat domain beyond the message's delivery status and the
// connection's right to reply.
type SendCommand struct {
	Version   int       `json:"version"`
	MessageID MessageID `json:"messageId"`
	Provider  Provider  `json:"provider"`
	// AccountID is the bot the thread's updates came through.
	AccountID            string  `json:"accountId"`
	Channel              Channel `json:"channel"`
	BusinessConnectionID string  `json:"businessConnectionId,omitempty"`
	ChatID               string  `json:"chatId"`
	Text                 string  `json:"text"`
}

// jobKey is the command's idempotency key on sender.flow and sender.retry:
// one delivery record per message.
func (c SendCommand) jobKey() string { return "omni:message:" + itoa(int64(c.MessageID)) }

// orderKey is the chat the command goes to: sends to one chat keep their
// order.
func (c SendCommand) orderKey() string {
	conn := c.BusinessConnectionID
	if conn == "" {
		conn = "-"
	}
	return string(c.Provider) + ":" + conn + ":" + c.ChatID
}
