package omni

import "testing"

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
