package fakebot

import "slices"

// A long sandbox run holds thousands of chats and messages; a console page
// shows a window of them, and copies only that window out of the fake.

// Window bounds what ViewWindow copies.
type Window struct {
	// Chats is how many chats, newest first (the last begun first), from
	// Before on; 0 means every chat, a negative number none (the bot and its
	// counts only).
	Chats int
	// Before keeps only the chats begun before the one at this position
	// (ChatView.Seq); 0 starts from the newest.
	Before int
	// Messages is how many of each chat's latest messages; 0 means all.
	Messages int
}

// ChatPage is a window of a bot's chats.
type ChatPage struct {
	BotView
	// ChatCount is how many chats the bot has in all; Older how many began
	// before the window's last (oldest) chat.
	ChatCount, Older int
}

// ViewWindow returns the bot with the chats of w, newest first, each with
// its latest w.Messages messages (ChatView.MessageCount says how many it has).
func (b *Bot) ViewWindow(w Window) (ChatPage, error) {
	var out ChatPage
	err := b.do(func(bs *botState) error {
		chats := bs.chatOrder
		out.BotView = viewBotOnly(bs)
		out.ChatCount = len(chats)
		end := len(chats)
		if w.Before > 0 && w.Before-1 < end {
			end = w.Before - 1
		}
		start := 0
		switch {
		case w.Chats > 0:
			start = max(0, end-w.Chats)
		case w.Chats < 0:
			start = end
		}
		out.Older = start
		for i := end - 1; i >= start; i-- {
			cs := bs.chats[chats[i]]
			v := viewChatWindow(cs, 0, w.Messages)
			v.Seq = i + 1
			out.Chats = append(out.Chats, v)
		}
		return nil
	})
	return out, err
}

// ChatWindow returns the private chat chatID, or with connID the customer's
// business chat, with its latest n messages (0: all) sent before the message
// before (0: up to the newest).
func (b *Bot) ChatWindow(connID string, chatID int64, before, n int) (ChatView, error) {
	var out ChatView
	err := b.do(func(bs *botState) error {
		key := chatKey{conn: connID, id: chatID}
		cs := bs.chat(key)
		if cs == nil {
			return ErrNoChat
		}
		out = viewChatWindow(cs, before, n)
		out.Seq = slices.Index(bs.chatOrder, key) + 1
		return nil
	})
	return out, err
}

// viewBotOnly is viewBot without the chats.
func viewBotOnly(b *botState) BotView {
	v := BotView{
		ID: b.me.ID, Username: b.me.Username, Webhook: b.hook.url,
		PendingUpdates: len(b.updates), LastError: b.hook.lastErrorMsg,
	}
	for _, id := range b.connOrder {
		v.Connections = append(v.Connections, copyConn(b.conns[id]))
	}
	return v
}

// viewChatWindow is viewChat of the latest n messages (0: all) before the
// message before (0: up to the newest).
func viewChatWindow(cs *chatState, before, n int) ChatView {
	end := len(cs.msgs)
	if before > 0 {
		// Message ids grow in the order the chat holds them.
		end, _ = slices.BinarySearchFunc(cs.msgs, before, func(m *msgState, id int) int { return m.m.MessageID - id })
	}
	start := 0
	if n > 0 {
		start = max(0, end-n)
	}
	part := *cs
	part.msgs = cs.msgs[start:end]
	v := viewChat(&part)
	v.MessageCount, v.Earlier, v.Later = len(cs.msgs), start, len(cs.msgs)-end
	return v
}
