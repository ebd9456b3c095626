package fakebot

import (
	"cmp"
	"slices"
	"time"

	"github.com/mymmrac/telego"
)

// BotView is one bot for the sandbox console.
type BotView struct {
	ID             int64
	Username       string
	Webhook        string // the webhook URL; empty when the bot long-polls
	PendingUpdates int
	LastError      string // the webhook's last delivery error
	Connections    []telego.BusinessConnection
	Chats          []ChatView
}

// ChatView is one chat as the user on the other side sees it.
type ChatView struct {
	ID    int64
	Type  string // "private", "group" or "supergroup"
	Title string // the group's title or the user's name
	// BusinessConnectionID is set for a customer's chat with a business
	// account the bot is connected to.
	BusinessConnectionID string
	User                 telego.User // the user on the other side; zero for groups
	Blocked              bool        // the user blocked the bot
	Messages             []MessageView
	// Seq is the chat's position in the order the bot's chats began (from
	// 1); set by ViewWindow and ChatWindow.
	Seq int
	// MessageCount is how many messages the chat holds; Earlier and Later
	// how many of them are before and after Messages (ViewWindow and
	// ChatWindow return part of a chat).
	MessageCount, Earlier, Later int
}

// Sender says who wrote a message.
type Sender string

// The senders.
const (
	SenderBot  Sender = "bot"  // the bot (in a business chat: the bot on the owner's behalf)
	SenderUser Sender = "user" // the user, or the customer in a business chat
)

// MessageView is one message as it stands now (after edits).
type MessageView struct {
	ID     int
	Date   time.Time
	Sender Sender
	// Text is the text as the user sees it: what parse_mode made of the
	// text sent, without markup. Entities are its formatting, in UTF-16
	// code units as the Bot API counts them.
	Text      string
	Entities  []telego.MessageEntity
	ParseMode string     // the parse_mode the text was sent with
	Buttons   [][]Button // the inline keyboard
	Edited    time.Time  // zero when never edited
	Deleted   bool
	// CallbackAnswers are the texts the bot answered button presses on this
	// message with (the toasts the user saw).
	CallbackAnswers []string
}

// Button is one inline keyboard button.
type Button struct {
	Text         string
	CallbackData string
	URL          string
}

// Bots returns every bot the fake has seen, by id.
func (s *Server) Bots() []BotView {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]BotView, 0, len(s.bots))
	for _, b := range s.bots {
		out = append(out, viewBot(b))
	}
	slices.SortFunc(out, func(a, b BotView) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// View returns the bot with its chats and messages.
func (b *Bot) View() (BotView, error) {
	var out BotView
	err := b.do(func(bs *botState) error { out = viewBot(bs); return nil })
	return out, err
}

// Chats returns the bot's chats in the order they began.
func (b *Bot) Chats() []ChatView {
	var out []ChatView
	_ = b.do(func(bs *botState) error { out = viewChats(bs); return nil })
	return out
}

// Chat returns the private or group chat chatID (not business chats).
func (b *Bot) Chat(chatID int64) (ChatView, bool) {
	var out ChatView
	var ok bool
	_ = b.do(func(bs *botState) error {
		if cs := bs.chat(chatKey{id: chatID}); cs != nil {
			out, ok = viewChat(cs), true
		}
		return nil
	})
	return out, ok
}

func viewBot(b *botState) BotView {
	v := BotView{
		ID: b.me.ID, Username: b.me.Username, Webhook: b.hook.url,
		PendingUpdates: len(b.updates), LastError: b.hook.lastErrorMsg, Chats: viewChats(b),
	}
	for _, id := range b.connOrder {
		v.Connections = append(v.Connections, copyConn(b.conns[id]))
	}
	return v
}

func viewChats(b *botState) []ChatView {
	out := make([]ChatView, 0, len(b.chatOrder))
	for _, key := range b.chatOrder {
		out = append(out, viewChat(b.chats[key]))
	}
	return out
}

func viewChat(cs *chatState) ChatView {
	v := ChatView{
		ID: cs.chat.ID, Type: cs.chat.Type, Title: cs.chat.Title,
		BusinessConnectionID: cs.key.conn, User: cs.peer, Blocked: cs.blocked,
		Messages: make([]MessageView, 0, len(cs.msgs)),
	}
	if v.Title == "" {
		v.Title = cs.peer.FirstName
		if cs.peer.LastName != "" {
			v.Title += " " + cs.peer.LastName
		}
	}
	for _, ms := range cs.msgs {
		mv := MessageView{
			ID: ms.m.MessageID, Date: time.Unix(ms.m.Date, 0).UTC(), Sender: SenderUser,
			Text: ms.m.Text, Entities: cloneEntities(ms.m.Entities), ParseMode: ms.parseMode, Deleted: ms.deleted,
			CallbackAnswers: slices.Clone(ms.callbackAnswers),
		}
		if ms.fromBot {
			mv.Sender = SenderBot
		}
		if ms.m.EditDate != 0 {
			mv.Edited = time.Unix(ms.m.EditDate, 0).UTC()
		}
		if ms.m.ReplyMarkup != nil {
			for _, row := range ms.m.ReplyMarkup.InlineKeyboard {
				buttons := make([]Button, 0, len(row))
				for _, btn := range row {
					buttons = append(buttons, Button{Text: btn.Text, CallbackData: btn.CallbackData, URL: btn.URL})
				}
				mv.Buttons = append(mv.Buttons, buttons)
			}
		}
		v.Messages = append(v.Messages, mv)
	}
	return v
}

func cloneEntities(es []telego.MessageEntity) []telego.MessageEntity {
	out := slices.Clone(es)
	for i := range out {
		if out[i].User != nil {
			u := *out[i].User
			out[i].User = &u
		}
	}
	return out
}
