package fakebot

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/mymmrac/telego"
)

// Errors the simulated users' actions return.
var (
	ErrBadToken      = errors.New("fakebot: not a bot token this fake accepts")
	ErrBadUser       = errors.New("fakebot: a user needs a positive id and a first name")
	ErrNoChat        = errors.New("fakebot: the user has no chat with this bot")
	ErrNoMessage     = errors.New("fakebot: no such message in the chat")
	ErrNoButton      = errors.New("fakebot: the message has no inline button with this callback data")
	ErrNoConnection  = errors.New("fakebot: no such business connection for this bot")
	ErrBlocked       = errors.New("fakebot: the user blocked the bot")
	ErrNotAGroup     = errors.New("fakebot: group chat ids are negative")
	ErrNotCustomer   = errors.New("fakebot: the message was not written by the customer")
	ErrConnectionOff = errors.New("fakebot: the business connection is disabled")
)

// Bot is a handle on one fake bot, through which tests and the sandbox act
// as Telegram users towards it. Every action makes a real Update with the
// next update_id, queued for getUpdates or posted to the bot's webhook.
type Bot struct {
	s     *Server
	token string
}

// Bot returns the handle of token's bot (created on first use).
func (s *Server) Bot(token string) *Bot { return &Bot{s: s, token: token} }

// BotByID returns the handle of a bot the fake has seen with this id.
func (s *Server) BotByID(id int64) (*Bot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for token, b := range s.bots {
		if b.me.ID == id {
			return &Bot{s: s, token: token}, true
		}
	}
	return nil, false
}

// Me returns the bot's user, as getMe answers it.
func (b *Bot) Me() (telego.User, error) {
	var me telego.User
	err := b.do(func(bs *botState) error { me = bs.meWithProfile(); return nil })
	return me, err
}

// PendingUpdates is how many updates wait for getUpdates to confirm them or
// for the webhook to accept them.
func (b *Bot) PendingUpdates() int {
	var n int
	_ = b.do(func(bs *botState) error { n = len(bs.updates); return nil })
	return n
}

// do runs fn on the bot's state with the server's lock held.
func (b *Bot) do(fn func(bs *botState) error) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	bs := b.s.bot(b.token)
	if bs == nil {
		return ErrBadToken
	}
	return fn(bs)
}

func checkUser(u telego.User) error {
	if u.ID <= 0 || u.FirstName == "" {
		return ErrBadUser
	}
	return nil
}

// Send is user from writing text to the bot in their private chat. A user
// who had blocked the bot unblocks it first, as Telegram's "Restart" does.
func (b *Bot) Send(from telego.User, text string) (telego.Message, error) {
	var out telego.Message
	err := b.do(func(bs *botState) error {
		if err := checkUser(from); err != nil {
			return err
		}
		b.s.users[from.ID] = from
		cs := bs.openChat(chatKey{id: from.ID}, privateChat(from), from)
		if cs.blocked {
			b.s.setBlocked(bs, cs, false)
		}
		cs.started = true
		user := from
		m := telego.Message{From: &user, Chat: cs.chat, Date: b.s.now().Unix(), Text: text, Entities: commandEntities(text)}
		out = cs.add(m, false, "", b.s.opts.MaxMessagesPerChat).m
		b.s.enqueue(bs, "message", telego.Update{Message: &out})
		b.s.signal()
		return nil
	})
	return out, err
}

// Start is user from opening the bot with a deep link carrying payload (or
// pressing Start, when payload is empty): the message "/start <payload>".
func (b *Bot) Start(from telego.User, payload string) (telego.Message, error) {
	text := "/start"
	if payload != "" {
		text += " " + payload
	}
	return b.Send(from, text)
}

// commandEntities marks a leading /command as a bot_command entity.
func commandEntities(text string) []telego.MessageEntity {
	if !strings.HasPrefix(text, "/") {
		return nil
	}
	cmd, _, _ := strings.Cut(text, " ")
	return []telego.MessageEntity{{Type: telego.EntityTypeBotCommand, Offset: 0, Length: len(utf16.Encode([]rune(cmd)))}}
}

// Press is user from pressing the inline button with callbackData under the
// bot's message messageID in their private chat. It returns the callback
// query id the bot answers with answerCallbackQuery.
func (b *Bot) Press(from telego.User, messageID int, callbackData string) (string, error) {
	var id string
	err := b.do(func(bs *botState) error {
		if err := checkUser(from); err != nil {
			return err
		}
		key := chatKey{id: from.ID}
		cs := bs.chat(key)
		if cs == nil || !cs.started {
			return ErrNoChat
		}
		if cs.blocked {
			return ErrBlocked
		}
		ms := cs.byID[messageID]
		if ms == nil || ms.deleted || !ms.fromBot {
			return ErrNoMessage
		}
		if !hasButton(ms.m.ReplyMarkup, callbackData) {
			return ErrNoButton
		}
		b.s.seq++
		id = strconv.FormatInt(bs.me.ID, 10) + strconv.Itoa(1_000_000+b.s.seq)
		bs.callbacks[id] = &callbackState{chat: key, msgID: messageID}
		msg := ms.m
		b.s.enqueue(bs, "callback_query", telego.Update{CallbackQuery: &telego.CallbackQuery{
			ID: id, From: from, Message: &msg, Data: callbackData,
			ChatInstance: strconv.FormatInt(bs.me.ID*31+from.ID, 10),
		}})
		return nil
	})
	return id, err
}

func hasButton(markup *telego.InlineKeyboardMarkup, data string) bool {
	if markup == nil {
		return false
	}
	for _, row := range markup.InlineKeyboard {
		for _, btn := range row {
			if btn.CallbackData != "" && btn.CallbackData == data {
				return true
			}
		}
	}
	return false
}

// Block is user blocking the bot: a my_chat_member update (member → kicked),
// and from then on sends to them fail with 403 "Forbidden: bot was blocked
// by the user".
func (b *Bot) Block(user telego.User) error {
	return b.do(func(bs *botState) error {
		cs := bs.chat(chatKey{id: user.ID})
		if cs == nil || !cs.started {
			return ErrNoChat
		}
		if !cs.blocked {
			b.s.setBlocked(bs, cs, true)
		}
		return nil
	})
}

// Unblock is user unblocking the bot (my_chat_member kicked → member).
func (b *Bot) Unblock(user telego.User) error {
	return b.do(func(bs *botState) error {
		cs := bs.chat(chatKey{id: user.ID})
		if cs == nil || !cs.started {
			return ErrNoChat
		}
		if cs.blocked {
			b.s.setBlocked(bs, cs, false)
		}
		return nil
	})
}

// setBlocked flips the block and sends the my_chat_member update; call with
// s.mu held.
func (s *Server) setBlocked(bs *botState, cs *chatState, blocked bool) {
	cs.blocked = blocked
	member := &telego.ChatMemberMember{Status: telego.MemberStatusMember, User: bs.me}
	kicked := &telego.ChatMemberBanned{Status: telego.MemberStatusBanned, User: bs.me}
	upd := &telego.ChatMemberUpdated{Chat: cs.chat, From: cs.peer, Date: s.now().Unix(),
		OldChatMember: member, NewChatMember: kicked}
	if !blocked {
		upd.OldChatMember, upd.NewChatMember = kicked, member
	}
	s.enqueue(bs, "my_chat_member", telego.Update{MyChatMember: upd})
	s.signal()
}

// AddGroup puts the bot in a group chat (chatID < 0) so it may send there;
// the group limit applies to it.
func (b *Bot) AddGroup(chatID int64, title string) error {
	if chatID >= 0 {
		return ErrNotAGroup
	}
	return b.do(func(bs *botState) error {
		typ := telego.ChatTypeGroup
		if chatID < -1_000_000_000_000 {
			typ = telego.ChatTypeSupergroup
		}
		cs := bs.openChat(chatKey{id: chatID}, telego.Chat{ID: chatID, Type: typ, Title: title}, telego.User{})
		cs.started = true
		b.s.signal()
		return nil
	})
}

// ConnectBusiness is the business account owner connecting the bot with
// rights (rights.CanReply lets the bot answer customers): a
// business_connection update. It returns the new connection.
func (b *Bot) ConnectBusiness(owner telego.User, rights telego.BusinessBotRights) (telego.BusinessConnection, error) {
	var out telego.BusinessConnection
	err := b.do(func(bs *botState) error {
		if err := checkUser(owner); err != nil {
			return err
		}
		b.s.users[owner.ID] = owner
		b.s.seq++
		r := rights
		conn := &telego.BusinessConnection{
			ID: fmt.Sprintf("fakebc-%d-%d", bs.me.ID, b.s.seq), User: owner, UserChatID: owner.ID,
			Date: b.s.now().Unix(), Rights: &r, IsEnabled: true,
		}
		bs.conns[conn.ID] = conn
		bs.connOrder = append(bs.connOrder, conn.ID)
		out = copyConn(conn)
		b.s.enqueue(bs, "business_connection", telego.Update{BusinessConnection: &out})
		b.s.signal()
		return nil
	})
	return out, err
}

func copyConn(c *telego.BusinessConnection) telego.BusinessConnection {
	out := *c
	if c.Rights != nil {
		r := *c.Rights
		out.Rights = &r
	}
	return out
}

// DisconnectBusiness is the owner disconnecting the bot: a
// business_connection update with is_enabled false; replies through the
// connection fail from then on.
func (b *Bot) DisconnectBusiness(connID string) error {
	return b.do(func(bs *botState) error {
		conn := bs.conns[connID]
		if conn == nil {
			return ErrNoConnection
		}
		changed := *conn
		changed.IsEnabled = false
		changed.Date = b.s.now().Unix()
		bs.conns[connID] = &changed // replaced, never changed in place: queued updates keep their copy
		out := copyConn(&changed)
		b.s.enqueue(bs, "business_connection", telego.Update{BusinessConnection: &out})
		b.s.signal()
		return nil
	})
}

// BusinessMessage is customer writing text to the business account behind
// connID: a business_message update in the customer's chat (chat id = the
// customer's id).
func (b *Bot) BusinessMessage(connID string, customer telego.User, text string) (telego.Message, error) {
	var out telego.Message
	err := b.do(func(bs *botState) error {
		if err := checkUser(customer); err != nil {
			return err
		}
		conn := bs.conns[connID]
		if conn == nil {
			return ErrNoConnection
		}
		if !conn.IsEnabled {
			return ErrConnectionOff
		}
		b.s.users[customer.ID] = customer
		cs := bs.openChat(chatKey{conn: connID, id: customer.ID}, privateChat(customer), customer)
		cs.started = true
		user := customer
		m := telego.Message{From: &user, Chat: cs.chat, Date: b.s.now().Unix(), Text: text, BusinessConnectionID: connID}
		out = cs.add(m, false, "", b.s.opts.MaxMessagesPerChat).m
		b.s.enqueue(bs, "business_message", telego.Update{BusinessMessage: &out})
		b.s.signal()
		return nil
	})
	return out, err
}

// EditBusinessMessage is the customer editing their message messageID in
// chat chatID of connID: an edited_business_message update.
func (b *Bot) EditBusinessMessage(connID string, chatID int64, messageID int, text string) (telego.Message, error) {
	var out telego.Message
	err := b.do(func(bs *botState) error {
		if bs.conns[connID] == nil {
			return ErrNoConnection
		}
		cs := bs.chat(chatKey{conn: connID, id: chatID})
		if cs == nil {
			return ErrNoChat
		}
		ms := cs.byID[messageID]
		if ms == nil || ms.deleted {
			return ErrNoMessage
		}
		if ms.fromBot {
			return ErrNotCustomer
		}
		ms.m.Text = text
		ms.m.EditDate = b.s.now().Unix()
		out = ms.m
		b.s.enqueue(bs, "edited_business_message", telego.Update{EditedBusinessMessage: &out})
		b.s.signal()
		return nil
	})
	return out, err
}

// DeleteBusinessMessages is messages of chat chatID being deleted in the
// business account behind connID: a deleted_business_messages update.
func (b *Bot) DeleteBusinessMessages(connID string, chatID int64, messageIDs ...int) error {
	return b.do(func(bs *botState) error {
		if bs.conns[connID] == nil {
			return ErrNoConnection
		}
		cs := bs.chat(chatKey{conn: connID, id: chatID})
		if cs == nil {
			return ErrNoChat
		}
		for _, id := range messageIDs {
			if ms := cs.byID[id]; ms == nil || ms.deleted {
				return fmt.Errorf("%w: %d", ErrNoMessage, id)
			}
		}
		for _, id := range messageIDs {
			cs.byID[id].deleted = true
		}
		b.s.enqueue(bs, "deleted_business_messages", telego.Update{DeletedBusinessMessages: &telego.BusinessMessagesDeleted{
			BusinessConnectionID: connID, Chat: cs.chat, MessageIDs: append([]int(nil), messageIDs...),
		}})
		b.s.signal()
		return nil
	})
}
