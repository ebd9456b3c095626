package omni

import (
	"strings"
	"time"
)

// The chat domain's rules, as pure functions of their inputs. The
// transactions in chat.go read the inputs, call these, and write what they
// decide.

// messageClass is how the chat stores a created message.
type messageClass struct {
	Direction Direction
	Origin    Origin
	Status    Status
	// Unread counts the message as unread for operators.
	Unread bool
}

// classifyMessage decides the direction of a created message. In a business
// chat Telegram also reports what the account's owner writes from their own
// app: that message is outbound and already sent. Everything else in a
// thread's chat comes from the contact.
func classifyMessage(n *Normalized, conn *BusinessConnection) messageClass {
	if n.BusinessConnectionID != "" && conn != nil && n.Sender != nil && n.Sender.ID == conn.UserID {
		return messageClass{Direction: DirectionOutbound, Origin: OriginProvider, Status: StatusSent}
	}
	return messageClass{Direction: DirectionInbound, Origin: OriginProvider, Status: StatusReceived, Unread: true}
}

// contactName is the display name of a chat's counterpart: a user's first
// and last name, or a group's title.
func contactName(c *ChatInfo) string {
	if c.Title != "" {
		return c.Title
	}
	return strings.TrimSpace(c.FirstName + " " + c.LastName)
}

// reachabilityChange is what a my_chat_member update means for the contact.
type reachabilityChange struct {
	Change    bool
	Reachable bool
	Reason    string
}

// decideMembership: "kicked" (the user blocked the bot) and "left" make the
// contact unreachable; becoming a member or administrator again (the user
// restarted the bot) makes it reachable. Other statuses change nothing.
func decideMembership(m *Membership) reachabilityChange {
	switch m.NewStatus {
	case "kicked":
		return reachabilityChange{Change: true, Reachable: false, Reason: "the user blocked the bot"}
	case "left":
		return reachabilityChange{Change: true, Reachable: false, Reason: "the bot left the chat"}
	case "member", "administrator", "creator", "restricted":
		return reachabilityChange{Change: true, Reachable: true}
	}
	return reachabilityChange{}
}

// AutoAckRule is the chat rule that acknowledges a contact's first message
// in a thread with a fixed text.
type AutoAckRule struct {
	Enabled bool   `json:"enabled"`
	Text    string `json:"text"`
}

// DefaultAutoAckText is the acknowledgement's text unless configured.
const DefaultAutoAckText = "Здравствуйте! Мы получили ваше сообщение и скоро ответим."

// ruleAutoAck names the auto-acknowledgement in omni_rules.
const ruleAutoAck = "auto_ack"

// decideAutoAck returns the acknowledgement to queue, if any: the rule is on,
// the message is the contact's first in the thread, and the thread can be
// answered (a bot chat, or a business connection that is enabled and may
// reply — otherwise the reply would fail for sure).
func decideAutoAck(rule AutoAckRule, class messageClass, firstInbound bool, ch Channel, conn *BusinessConnection) (string, bool) {
	if !rule.Enabled || strings.TrimSpace(rule.Text) == "" || !firstInbound || class.Direction != DirectionInbound {
		return "", false
	}
	if ch == ChannelTelegramBusiness && (conn == nil || !conn.Enabled || !conn.CanReply) {
		return "", false
	}
	return rule.Text, true
}

// decideEdit reports whether an edit made at editedAt replaces a stored
// message last edited at stored (zero: never): edits apply in provider order,
// so an older edit delivered late does not undo a newer one.
func decideEdit(stored, editedAt time.Time) bool {
	return stored.IsZero() || !editedAt.Before(stored)
}

// canReply says whether outbound may send on a thread's business connection.
func canReply(conn *BusinessConnection) error {
	if conn == nil || !conn.Enabled || !conn.CanReply {
		return ErrCannotReply
	}
	return nil
}
