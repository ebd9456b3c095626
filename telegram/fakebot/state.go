package fakebot

import (
	"context"
	"slices"
	"strconv"

	"github.com/mymmrac/telego"

	"switchyard/telegram"
)

// botState is one bot as Telegram holds it. Every field is guarded by the
// server's mutex.
type botState struct {
	token string
	// me is the bot as a User anywhere but getMe (a message's from, a chat
	// member): the common fields only, as Telegram sends them.
	me      telego.User
	profile botProfile // what getMe adds
	revoked bool

	updates      []telego.Update // not yet confirmed (getUpdates) or delivered (webhook)
	nextUpdateID int
	allowed      []string      // allowed_updates; nil means Telegram's default
	wake         chan struct{} // closed and replaced when updates arrive or a poll is superseded
	pollSeq      uint64

	hook webhook

	chats     map[chatKey]*chatState
	chatOrder []chatKey
	conns     map[string]*telego.BusinessConnection
	connOrder []string
	callbacks map[string]*callbackState
	commands  []telego.BotCommand
}

// chatKey names a chat as one bot sees it: business chats are the customer's
// chat with a business account, separate from the customer's chat with the
// bot itself.
type chatKey struct {
	conn string
	id   int64
}

type chatState struct {
	key     chatKey
	chat    telego.Chat
	peer    telego.User // the user on the other side (private and business chats)
	started bool        // the user has written to the bot
	blocked bool        // the user blocked the bot
	nextID  int
	msgs    []*msgState
	byID    map[int]*msgState
}

type msgState struct {
	m               telego.Message
	fromBot         bool
	parseMode       string
	deleted         bool
	callbackAnswers []string
}

type callbackState struct {
	chat     chatKey
	msgID    int
	answered bool
}

type webhook struct {
	url            string
	secret         string
	maxConnections int
	lastErrorDate  int64
	lastErrorMsg   string
	stop           context.CancelFunc // nil when no deliverer runs
}

// bot returns the state of token's bot, creating it on first sight; nil for
// a token the fake does not accept. Call with s.mu held.
func (s *Server) bot(token string) *botState {
	if b := s.bots[token]; b != nil {
		return b
	}
	id, ok := telegram.BotIDFromToken(token)
	if !ok || !s.accepts(id, token) {
		return nil
	}
	idText := strconv.FormatInt(id, 10)
	b := &botState{
		token: token,
		me:    telego.User{ID: id, IsBot: true, FirstName: "Fake Bot " + idText, Username: "fake" + idText + "_bot"},
		// A bot as @BotFather creates it, with Business Mode switched on
		// (the business inbox needs it).
		profile:      botProfile{CanJoinGroups: true, CanConnectToBusiness: true},
		nextUpdateID: max(1, s.opts.FirstUpdateID),
		wake:         make(chan struct{}),
		chats:        make(map[chatKey]*chatState),
		conns:        make(map[string]*telego.BusinessConnection),
		callbacks:    make(map[string]*callbackState),
	}
	s.bots[token] = b
	return b
}

// botProfile holds the User fields that the Bot API returns "only in getMe".
type botProfile struct {
	CanJoinGroups             bool
	CanReadAllGroupMessages   bool
	SupportsInlineQueries     bool
	CanConnectToBusiness      bool
	HasMainWebApp             bool
	HasTopicsEnabled          bool
	AllowsUsersToCreateTopics bool
}

// getMeUser is getMe's result: the bot's User with every getMe-only field
// present, false ones included, as Telegram answers it (telego.User would
// drop the false ones).
type getMeUser struct {
	ID                        int64  `json:"id"`
	IsBot                     bool   `json:"is_bot"`
	FirstName                 string `json:"first_name"`
	LastName                  string `json:"last_name,omitempty"`
	Username                  string `json:"username"`
	CanJoinGroups             bool   `json:"can_join_groups"`
	CanReadAllGroupMessages   bool   `json:"can_read_all_group_messages"`
	SupportsInlineQueries     bool   `json:"supports_inline_queries"`
	CanConnectToBusiness      bool   `json:"can_connect_to_business"`
	HasMainWebApp             bool   `json:"has_main_web_app"`
	HasTopicsEnabled          bool   `json:"has_topics_enabled"`
	AllowsUsersToCreateTopics bool   `json:"allows_users_to_create_topics"`
}

func (b *botState) getMe() getMeUser {
	p := b.profile
	return getMeUser{
		ID: b.me.ID, IsBot: true, FirstName: b.me.FirstName, LastName: b.me.LastName, Username: b.me.Username,
		CanJoinGroups: p.CanJoinGroups, CanReadAllGroupMessages: p.CanReadAllGroupMessages,
		SupportsInlineQueries: p.SupportsInlineQueries, CanConnectToBusiness: p.CanConnectToBusiness,
		HasMainWebApp: p.HasMainWebApp, HasTopicsEnabled: p.HasTopicsEnabled,
		AllowsUsersToCreateTopics: p.AllowsUsersToCreateTopics,
	}
}

// meWithProfile is the bot's User with the getMe-only fields set, for Go
// callers (Bot.Me) that want what getMe says.
func (b *botState) meWithProfile() telego.User {
	u, p := b.me, b.profile
	u.CanJoinGroups, u.CanReadAllGroupMessages, u.SupportsInlineQueries = p.CanJoinGroups, p.CanReadAllGroupMessages, p.SupportsInlineQueries
	u.CanConnectToBusiness, u.HasMainWebApp = p.CanConnectToBusiness, p.HasMainWebApp
	u.HasTopicsEnabled, u.AllowsUsersToCreateTopics = p.HasTopicsEnabled, p.AllowsUsersToCreateTopics
	return u
}

// wakeUp wakes the bot's long poll and webhook deliverer.
func (b *botState) wakeUp() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// excludedByDefault are the update types Telegram leaves out when
// allowed_updates was never set (or set to an empty list).
var excludedByDefault = []string{"chat_member", "message_reaction", "message_reaction_count"}

func (b *botState) wants(updateType string) bool {
	if b.allowed == nil {
		return !slices.Contains(excludedByDefault, updateType)
	}
	return slices.Contains(b.allowed, updateType)
}

// enqueue gives u the next update_id and queues it for getUpdates or the
// webhook, unless allowed_updates filters its type out. Call with s.mu held.
func (s *Server) enqueue(b *botState, updateType string, u telego.Update) {
	if !b.wants(updateType) {
		return
	}
	u.UpdateID = b.nextUpdateID
	b.nextUpdateID++
	b.updates = append(b.updates, u)
	b.wakeUp()
	s.signal()
}

// chat returns the chat with key, or nil.
func (b *botState) chat(key chatKey) *chatState { return b.chats[key] }

// openChat returns the chat with key, creating it from c and peer.
func (b *botState) openChat(key chatKey, c telego.Chat, peer telego.User) *chatState {
	if cs := b.chats[key]; cs != nil {
		if peer.ID != 0 {
			cs.peer, cs.chat = peer, c
		}
		return cs
	}
	cs := &chatState{key: key, chat: c, peer: peer, nextID: 1, byID: make(map[int]*msgState)}
	b.chats[key] = cs
	b.chatOrder = append(b.chatOrder, key)
	return cs
}

// add appends a message to the chat, giving it the next message id, and
// keeps the chat within limit messages.
func (cs *chatState) add(m telego.Message, fromBot bool, parseMode string, limit int) *msgState {
	m.MessageID = cs.nextID
	cs.nextID++
	ms := &msgState{m: m, fromBot: fromBot, parseMode: parseMode}
	cs.msgs = append(cs.msgs, ms)
	cs.byID[m.MessageID] = ms
	if len(cs.msgs) > limit {
		for _, old := range cs.msgs[:len(cs.msgs)-limit] {
			delete(cs.byID, old.m.MessageID)
		}
		cs.msgs = append(cs.msgs[:0], cs.msgs[len(cs.msgs)-limit:]...)
	}
	return ms
}

func privateChat(u telego.User) telego.Chat {
	return telego.Chat{ID: u.ID, Type: telego.ChatTypePrivate, FirstName: u.FirstName, LastName: u.LastName, Username: u.Username}
}
