package omni

import (
	"fmt"
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

// IgnoreReason says why the chat role stored an envelope as ignored: it is
// kept in the dedup ledger (omni_inbound_events.reason) and counts in
// switchyard_omni_updates_ignored_total{reason}.
type IgnoreReason string

// The ignore reasons.
const (
	// IgnoreGroupChat: a message, edit, button press or membership change in
	// a group, supergroup or channel (any chat that is not private), while
	// GroupChats is GroupChatsIgnore.
	IgnoreGroupChat IgnoreReason = "group_chat"
	// IgnoreUnusedUpdate: an update type of the Bot API the chat role does
	// not use (message_reaction, poll, chat_member, …).
	IgnoreUnusedUpdate IgnoreReason = "unused_update_type"
	// IgnoreUnknownUpdate: an update type this build does not know (a newer
	// Bot API), or an update with no field besides update_id.
	IgnoreUnknownUpdate IgnoreReason = "unknown_update_type"
	// IgnoreStaleEdit: an edit older than the one the message already shows.
	IgnoreStaleEdit IgnoreReason = "stale_edit"
	// IgnoreNoThread: a deletion in a chat that has no thread.
	IgnoreNoThread IgnoreReason = "no_thread"
	// IgnoreNoMessages: a deletion that names no message.
	IgnoreNoMessages IgnoreReason = "no_messages"
	// IgnoreStaleConnection: a business connection's state older than the
	// stored one.
	IgnoreStaleConnection IgnoreReason = "stale_connection"
	// IgnoreMembershipUnchanged: a membership status that changes nothing
	// about reaching the contact.
	IgnoreMembershipUnchanged IgnoreReason = "membership_unchanged"
)

// IgnoreReasons lists every IgnoreReason, for metrics and docs.
var IgnoreReasons = []IgnoreReason{
	IgnoreGroupChat, IgnoreUnusedUpdate, IgnoreUnknownUpdate, IgnoreStaleEdit, IgnoreNoThread,
	IgnoreNoMessages, IgnoreStaleConnection, IgnoreMembershipUnchanged,
}

// GroupChats says what the chat role does with the messages of group,
// supergroup and channel chats, which are not customers' inbox threads.
type GroupChats string

// The group chat policies.
const (
	// GroupChatsIgnore (the default) stores their updates as ignored
	// (IgnoreGroupChat): no contact, no thread, no acknowledgement.
	GroupChatsIgnore GroupChats = "ignore"
	// GroupChatsThread admits each such chat as a thread of its own, named
	// after the chat, that operators can read and answer; it is never
	// acknowledged automatically.
	GroupChatsThread GroupChats = "thread"
)

// ParseGroupChats reads a GroupChats option ("" is GroupChatsIgnore).
func ParseGroupChats(s string) (GroupChats, error) {
	switch g := GroupChats(s); g {
	case "", GroupChatsIgnore:
		return GroupChatsIgnore, nil
	case GroupChatsThread:
		return g, nil
	}
	return "", fmt.Errorf("group chats %q: must be %s or %s", s, GroupChatsIgnore, GroupChatsThread)
}

// isPrivate reports whether c is a user's private chat with the bot, the
// only kind of chat that is a customer's inbox thread by default.
func isPrivate(c *ChatInfo) bool { return c != nil && c.Type == "private" }

// decideIgnore returns why the chat role stores env as ignored before
// looking at any stored state, if it does: an update type it does not use,
// or a chat that is not private while group chats are ignored.
func decideIgnore(env *Envelope, groups GroupChats) (IgnoreReason, bool) {
	n := &env.PayloadNormalized
	switch env.EventType {
	case EventUnknown:
		if isBotAPIUpdateType(n.UpdateType) {
			return IgnoreUnusedUpdate, true
		}
		return IgnoreUnknownUpdate, true
	case EventMessageDeleted:
		if len(n.DeletedMessageIDs) == 0 {
			return IgnoreNoMessages, true
		}
	}
	if n.Chat != nil && !isPrivate(n.Chat) && groups != GroupChatsThread {
		return IgnoreGroupChat, true
	}
	return "", false
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
// the message is the contact's first in the thread, the thread is a private
// chat (a group, supergroup or channel admitted as a thread is never
// acknowledged: the text would go to everyone in it), and the thread can be
// answered (a bot chat, or a business connection that is enabled and may
// reply — otherwise the reply would fail for sure).
func decideAutoAck(rule AutoAckRule, class messageClass, firstInbound bool, chat *ChatInfo, ch Channel, conn *BusinessConnection) (string, bool) {
	if !rule.Enabled || strings.TrimSpace(rule.Text) == "" || !firstInbound || class.Direction != DirectionInbound {
		return "", false
	}
	if !isPrivate(chat) {
		return "", false
	}
	if ch == ChannelTelegramBusiness && (conn == nil || !conn.Enabled || !conn.CanReply) {
		return "", false
	}
	return rule.Text, true
}

// connectionWait bounds how long the chat role holds back a business
// message whose business connection it does not know yet, counted from the
// webhook's acceptance of the message (Envelope.ReceivedAt).
// A business_connection update and the messages of its chats have different
// ordering keys (OrderingKey), so a message can be taken before a
// connection that Telegram sent first; it waits for it, as the connection
// decides the message's direction (the owner's own messages are outbound)
// and whether it is acknowledged. A connection that never comes (the
// account was connected before the webhook was set) costs each of its
// chats this wait once: the message is then applied without it.
const connectionWait = 30 * time.Second

// connectionRecheck is the shortest time between two looks for the
// connection.
const connectionRecheck = 500 * time.Millisecond

// decideAwaitConnection says whether a business message received at
// receivedAt whose connection is unknown waits (and for how long before it
// is tried again) on its attempt-th delivery of a queue that allows
// maxAttempts: until connectionWait has passed, spreading the looks so that
// the queue's attempts never run out first — the last one is kept for
// applying it — so the message is never dead-lettered for waiting.
func decideAwaitConnection(receivedAt, now time.Time, attempt, maxAttempts int) (time.Duration, bool) {
	remaining := receivedAt.Add(connectionWait).Sub(now)
	left := maxAttempts - attempt - 1
	if remaining <= 0 || left <= 0 {
		return 0, false
	}
	return min(max(connectionRecheck, remaining/time.Duration(left)), remaining), true
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
