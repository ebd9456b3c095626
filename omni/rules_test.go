package omni

import (
	"testing"
	"time"
)

func TestDecideIgnore(t *testing.T) {
	t.Parallel()
	private := &ChatInfo{ID: "42", Type: "private"}
	message := func(chat *ChatInfo) *Envelope {
		return &Envelope{EventType: EventMessageCreated, PayloadNormalized: Normalized{Chat: chat, Message: &Message{Kind: KindText}}}
	}
	for _, tc := range []struct {
		name   string
		env    *Envelope
		groups GroupChats
		want   IgnoreReason
	}{
		{"a private chat's message is applied", message(private), GroupChatsIgnore, ""},
		{"a supergroup's message is ignored as a group chat", message(&ChatInfo{ID: "-1001", Type: "supergroup"}), GroupChatsIgnore, IgnoreGroupChat},
		{"a basic group's message is ignored as a group chat", message(&ChatInfo{ID: "-5", Type: "group"}), GroupChatsIgnore, IgnoreGroupChat},
		{"a channel post is ignored as a group chat", message(&ChatInfo{ID: "-1002", Type: "channel"}), GroupChatsIgnore, IgnoreGroupChat},
		{"a group's message is applied when group chats are threads", message(&ChatInfo{ID: "-5", Type: "group"}), GroupChatsThread, ""},
		{"a button pressed in a group is ignored as a group chat", &Envelope{EventType: EventCallbackReceived,
			PayloadNormalized: Normalized{Chat: &ChatInfo{ID: "-5", Type: "group"}, Callback: &Callback{ID: "q"}}}, "", IgnoreGroupChat},
		{"the bot added to a group is ignored as a group chat", &Envelope{EventType: EventMembershipUpdated,
			PayloadNormalized: Normalized{Chat: &ChatInfo{ID: "-5", Type: "group"}, Membership: &Membership{NewStatus: "member"}}}, "", IgnoreGroupChat},
		{"a Bot API update type the chat does not use is ignored as unused", &Envelope{EventType: EventUnknown,
			PayloadNormalized: Normalized{UpdateType: "message_reaction"}}, GroupChatsThread, IgnoreUnusedUpdate},
		{"an update type newer than this build is ignored as unknown", &Envelope{EventType: EventUnknown,
			PayloadNormalized: Normalized{UpdateType: "story_reaction"}}, GroupChatsThread, IgnoreUnknownUpdate},
		{"a deletion of no messages is ignored", &Envelope{EventType: EventMessageDeleted,
			PayloadNormalized: Normalized{Chat: private, BusinessConnectionID: "bc"}}, "", IgnoreNoMessages},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ignore := decideIgnore(tc.env, tc.groups)
			if got != tc.want || ignore != (tc.want != "") {
				t.Errorf("decideIgnore = %q %v, want %q", got, ignore, tc.want)
			}
		})
	}
}

func TestDecideAutoAck(t *testing.T) {
	t.Parallel()
	rule := AutoAckRule{Enabled: true, Text: "thanks"}
	inbound := messageClass{Direction: DirectionInbound}
	canReply := &BusinessConnection{Enabled: true, CanReply: true}
	for _, tc := range []struct {
		name  string
		first bool
		chat  *ChatInfo
		ch    Channel
		conn  *BusinessConnection
		want  bool
	}{
		{"a private chat's first message is acknowledged", true, &ChatInfo{Type: "private"}, ChannelTelegramBot, nil, true},
		{"a later message is not", false, &ChatInfo{Type: "private"}, ChannelTelegramBot, nil, false},
		{"a group admitted as a thread is never acknowledged", true, &ChatInfo{Type: "group"}, ChannelTelegramBot, nil, false},
		{"a supergroup admitted as a thread is never acknowledged", true, &ChatInfo{Type: "supergroup"}, ChannelTelegramBot, nil, false},
		{"a channel admitted as a thread is never acknowledged", true, &ChatInfo{Type: "channel"}, ChannelTelegramBot, nil, false},
		{"a business chat whose connection may reply is acknowledged", true, &ChatInfo{Type: "private"}, ChannelTelegramBusiness, canReply, true},
		{"a business chat on an unknown connection is not", true, &ChatInfo{Type: "private"}, ChannelTelegramBusiness, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, got := decideAutoAck(rule, inbound, tc.first, tc.chat, tc.ch, tc.conn); got != tc.want {
				t.Errorf("decideAutoAck = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClassifyMessage(t *testing.T) {
	t.Parallel()
	owner := &BusinessConnection{ID: "bc", UserID: "7"}
	inbound := messageClass{Direction: DirectionInbound, Origin: OriginProvider, Status: StatusReceived, Unread: true}
	ownerWrote := messageClass{Direction: DirectionOutbound, Origin: OriginProvider, Status: StatusSent}
	from := func(conn, sender string) *Normalized {
		n := &Normalized{BusinessConnectionID: conn}
		if sender != "" {
			n.Sender = &Person{ID: sender}
		}
		return n
	}
	for _, tc := range []struct {
		name string
		n    *Normalized
		conn *BusinessConnection
		want messageClass
	}{
		{"a bot chat's message is the contact's, unread", from("", "42"), nil, inbound},
		{"a business chat's message from the contact is inbound, unread", from("bc", "42"), owner, inbound},
		{"what the account's owner writes from their own app is outbound and sent", from("bc", "7"), owner, ownerWrote},
		{"the owner's id in a bot chat is still the contact's", from("", "7"), owner, inbound},
		{"a business message on a connection not stored yet is inbound", from("bc", "7"), nil, inbound},
		{"a message without a sender is inbound", from("bc", ""), owner, inbound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := classifyMessage(tc.n, tc.conn); got != tc.want {
				t.Errorf("classifyMessage = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecideMembership(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status            string
		change, reachable bool
	}{
		{"kicked", true, false},
		{"left", true, false},
		{"member", true, true},
		{"administrator", true, true},
		{"creator", true, true},
		{"restricted", true, true},
		{"", false, false},
		{"a status of a newer Bot API", false, false},
	} {
		t.Run("status "+tc.status, func(t *testing.T) {
			t.Parallel()
			got := decideMembership(&Membership{OldStatus: "member", NewStatus: tc.status})
			if got.Change != tc.change || got.Reachable != tc.reachable {
				t.Errorf("decideMembership(%q) = %+v, want change %v reachable %v", tc.status, got, tc.change, tc.reachable)
			}
			if got.Change && !got.Reachable && got.Reason == "" {
				t.Errorf("decideMembership(%q) makes the contact unreachable without a reason", tc.status)
			}
		})
	}
}

func TestDecideEdit(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name             string
		stored, editedAt time.Time
		want             bool
	}{
		{"a message never edited takes the edit", time.Time{}, at, true},
		{"a newer edit replaces the stored one", at, at.Add(time.Second), true},
		{"an edit of the same moment applies (Telegram's edit_date is in seconds)", at, at, true},
		{"an older edit delivered late does not undo a newer one", at, at.Add(-time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := decideEdit(tc.stored, tc.editedAt); got != tc.want {
				t.Errorf("decideEdit(%v, %v) = %v, want %v", tc.stored, tc.editedAt, got, tc.want)
			}
		})
	}
}

func TestDecideAwaitConnection(t *testing.T) {
	t.Parallel()
	received := time.Date(2026, 2, 21, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name                 string
		age                  time.Duration
		attempt, maxAttempts int
		wait                 bool
		delay                time.Duration
	}{
		{"a fresh message on receiver.flow waits and looks again after connectionRecheck", 0, 1, flowAttempts, true, connectionRecheck},
		{"on receiver.retry's ten attempts the looks spread over the wait", 0, 1, 10, true, 30 * time.Second / 8},
		{"the last look comes when the wait ends", 29 * time.Second, 1, flowAttempts, true, connectionRecheck},
		{"a look never goes past the end of the wait", 29*time.Second + 900*time.Millisecond, 1, flowAttempts, true, 100 * time.Millisecond},
		{"once the wait is over the message is applied", connectionWait, 1, flowAttempts, false, 0},
		{"a message older than the wait is applied", time.Hour, 1, flowAttempts, false, 0},
		{"the queue's last attempt applies it rather than dead-letter it", 0, flowAttempts - 1, flowAttempts, false, 0},
		{"one attempt in all applies it at once", 0, 1, 1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			delay, wait := decideAwaitConnection(received, received.Add(tc.age), tc.attempt, tc.maxAttempts)
			if wait != tc.wait || delay != tc.delay {
				t.Errorf("decideAwaitConnection = %s %v, want %s %v", delay, wait, tc.delay, tc.wait)
			}
		})
	}
}
