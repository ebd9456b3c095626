package fakebot

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mymmrac/telego"
)

// method is one Bot API method the fake implements. Its fn runs with s.mu
// held and must not block.
type method struct {
	name string
	fn   func(s *Server, b *botState, p params) answer
}

// methods are the implemented methods by lower-case name (Telegram matches
// method names case-insensitively). getUpdates waits, so ServeHTTP calls it
// directly.
var methods = func() map[string]method {
	list := []method{
		{"getMe", (*Server).getMe},
		{"getUpdates", nil},
		{"setWebhook", (*Server).setWebhook},
		{"deleteWebhook", (*Server).deleteWebhook},
		{"getWebhookInfo", (*Server).getWebhookInfo},
		{"sendMessage", (*Server).sendMessage},
		{"editMessageText", (*Server).editMessageText},
		{"editMessageReplyMarkup", (*Server).editMessageReplyMarkup},
		{"deleteMessage", (*Server).deleteMessage},
		{"answerCallbackQuery", (*Server).answerCallbackQuery},
		{"sendChatAction", (*Server).sendChatAction},
		{"getChat", (*Server).getChat},
		{"getBusinessConnection", (*Server).getBusinessConnection},
		{"setMyCommands", (*Server).setMyCommands},
		{"getMyCommands", (*Server).getMyCommands},
		{"deleteMyCommands", (*Server).deleteMyCommands},
	}
	m := make(map[string]method, len(list))
	for _, x := range list {
		m[strings.ToLower(x.name)] = x
	}
	return m
}()

// Methods lists the Bot API methods the fake implements.
func Methods() []string {
	var names []string
	for _, m := range methods {
		names = append(names, m.name)
	}
	slices.Sort(names)
	return names
}

// marshaled turns the result into JSON now, while s.mu is held, so that the
// answer never shares memory with state that changes later.
func (a answer) marshaled() answer {
	if a.err != nil || a.result == nil {
		return a
	}
	if _, ok := a.result.(json.RawMessage); ok {
		return a
	}
	raw, err := json.Marshal(a.result)
	if err != nil {
		panic("fakebot: marshal result: " + err.Error())
	}
	a.result = json.RawMessage(raw)
	return a
}

func (s *Server) getMe(b *botState, _ params) answer { return answer{result: b.getMe()} }

// maxPollWait bounds how long one getUpdates call waits, whatever timeout it
// asks for, so that no caller holds a connection without end.
const maxPollWait = time.Minute

// answerMargin is what a waiting call's connection is held for beyond its
// wait, for the answer.
const answerMargin = 10 * time.Second

// pollWait is how long a getUpdates call with p waits: its timeout in
// seconds, at most maxPollWait.
func pollWait(p params) time.Duration {
	timeout, _, err := p.int64("timeout")
	if err != nil || timeout <= 0 {
		return 0
	}
	return time.Duration(min(timeout, int64(maxPollWait/time.Second))) * time.Second
}

func (s *Server) getUpdates(ctx context.Context, b *botState, p params) answer {
	offset, _, err := p.int64("offset")
	if err != nil {
		return answer{err: err}
	}
	limit, hasLimit, err := p.int64("limit")
	if err != nil {
		return answer{err: err}
	}
	if !hasLimit || limit < 1 || limit > 100 {
		limit = 100
	}
	timeout, _, err := p.int64("timeout")
	if err != nil {
		return answer{err: err}
	}
	var allowed []string
	if raw := p["allowed_updates"]; raw != "" {
		if json.Unmarshal([]byte(raw), &allowed) != nil {
			return answer{err: badRequest("can't parse allowed updates")}
		}
	}
	timer := time.NewTimer(pollWait(p))
	defer timer.Stop()
	expired := timeout <= 0

	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := p["allowed_updates"]; ok {
		b.allowed = allowedList(allowed)
	}
	b.pollSeq++
	mine := b.pollSeq
	b.wakeUp() // an older poll still waiting now answers 409
	for {
		if b.hook.url != "" {
			return answer{err: &apiError{code: http.StatusConflict,
				description: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"}}
		}
		if b.pollSeq != mine {
			return answer{err: &apiError{code: http.StatusConflict,
				description: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"}}
		}
		if confirm(b, offset) {
			s.signal()
		}
		if len(b.updates) > 0 || expired || s.closed {
			n := min(int64(len(b.updates)), limit)
			return answer{result: append([]telego.Update{}, b.updates[:n]...)}.marshaled()
		}
		wake := b.wake
		s.mu.Unlock()
		select {
		case <-wake:
		case <-timer.C:
			expired = true
		case <-s.ctx.Done():
		case <-ctx.Done():
			s.mu.Lock()
			return answer{err: &apiError{description: "client went away"}}
		}
		s.mu.Lock()
	}
}

// confirm drops the updates an offset confirms: those before a positive
// offset, all but the last -offset for a negative one. It reports whether
// any were dropped.
func confirm(b *botState, offset int64) bool {
	n := len(b.updates)
	switch {
	case offset > 0:
		i := 0
		for i < len(b.updates) && int64(b.updates[i].UpdateID) < offset {
			i++
		}
		b.updates = b.updates[i:]
	case offset < 0 && int64(len(b.updates)) > -offset:
		b.updates = b.updates[int64(len(b.updates))+offset:]
	}
	return len(b.updates) != n
}

// allowedList turns allowed_updates into the bot's filter: an empty list
// means Telegram's default.
func allowedList(list []string) []string {
	if len(list) == 0 {
		return nil
	}
	return slices.Clone(list)
}

func (s *Server) setWebhook(b *botState, p params) answer {
	raw := p["url"]
	if raw == "" {
		return s.deleteWebhook(b, p)
	}
	if !validWebhookURL(raw) {
		return answer{err: badRequest("bad webhook: An HTTPS URL must be provided for webhook")}
	}
	if s.opts.CheckWebhookFunc != nil {
		if err := s.opts.CheckWebhookFunc(b.me.ID, raw); err != nil {
			return answer{err: badRequest("bad webhook: " + err.Error())}
		}
	}
	secret := p["secret_token"]
	if secret != "" && !validSecret(secret) {
		return answer{err: badRequest("secret token contains unallowed characters")}
	}
	maxConn, hasMax, err := p.int64("max_connections")
	if err != nil {
		return answer{err: err}
	}
	if !hasMax {
		maxConn = 40
	}
	if maxConn < 1 || maxConn > 100 {
		return answer{err: badRequest("bad webhook: max_connections must be between 1 and 100")}
	}
	if rawAllowed, ok := p["allowed_updates"]; ok && rawAllowed != "" {
		var allowed []string
		if json.Unmarshal([]byte(rawAllowed), &allowed) != nil {
			return answer{err: badRequest("can't parse allowed updates")}
		}
		b.allowed = allowedList(allowed)
	}
	if p.bool("drop_pending_updates") {
		b.updates = nil
	}
	same := b.hook.url == raw && b.hook.secret == secret
	if b.hook.url != raw {
		b.hook.lastErrorDate, b.hook.lastErrorMsg = 0, ""
	}
	b.hook.url, b.hook.secret, b.hook.maxConnections = raw, secret, int(maxConn)
	if b.hook.stop == nil && !s.closed {
		s.startDeliverer(b)
	}
	b.wakeUp()
	s.signal()
	if same {
		return answer{result: true, description: "Webhook is already set"}
	}
	return answer{result: true, description: "Webhook was set"}
}

func (s *Server) deleteWebhook(b *botState, p params) answer {
	if p.bool("drop_pending_updates") {
		b.updates = nil
	}
	if b.hook.url == "" {
		return answer{result: true, description: "Webhook is already deleted"}
	}
	b.stopWebhook()
	b.hook = webhook{}
	b.wakeUp()
	s.signal()
	return answer{result: true, description: "Webhook was deleted"}
}

func (s *Server) getWebhookInfo(b *botState, _ params) answer {
	info := telego.WebhookInfo{
		URL:                b.hook.url,
		PendingUpdateCount: len(b.updates),
		LastErrorDate:      b.hook.lastErrorDate,
		LastErrorMessage:   b.hook.lastErrorMsg,
		MaxConnections:     b.hook.maxConnections,
	}
	if b.hook.url != "" {
		info.AllowedUpdates = slices.Clone(b.allowed)
	}
	return answer{result: info}
}

// target finds the chat a send or edit addresses (chat_id, and
// business_connection_id for business chats) and checks the bot may write
// there.
func (s *Server) target(b *botState, p params) (*chatState, *telego.BusinessConnection, *apiError) {
	if strings.HasPrefix(p["chat_id"], "@") {
		return nil, nil, badRequest("chat not found")
	}
	chatID, ok, err := p.int64("chat_id")
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, badRequest("chat_id is empty")
	}
	if connID := p["business_connection_id"]; connID != "" {
		conn := b.conns[connID]
		switch {
		case conn == nil:
			// Also what another bot's connection id gets: only the bot the
			// business account connected may speak for it.
			return nil, nil, badRequest("business connection not found")
		case !conn.IsEnabled:
			return nil, nil, badRequest("BUSINESS_CONNECTION_INVALID")
		case conn.Rights == nil || !conn.Rights.CanReply:
			return nil, nil, badRequest("BUSINESS_PEER_INVALID")
		}
		cs := b.chat(chatKey{conn: connID, id: chatID})
		if cs == nil {
			return nil, nil, badRequest("chat not found")
		}
		return cs, conn, nil
	}
	cs := b.chat(chatKey{id: chatID})
	if cs == nil || !cs.started {
		if _, known := s.users[chatID]; known && chatID > 0 {
			return nil, nil, forbidden("bot can't initiate conversation with a user")
		}
		return nil, nil, badRequest("chat not found")
	}
	if cs.blocked {
		return nil, nil, forbidden("bot was blocked by the user")
	}
	return cs, nil, nil
}

// formatted validates a message's text, parse_mode and entities as
// sendMessage and editMessageText do, and returns what Telegram stores: the
// text without markup and its entities (see formatText).
func (s *Server) formatted(p params) (string, []telego.MessageEntity, *apiError) {
	return formatText(p["text"], p["parse_mode"], p["entities"], func(id int64) (telego.User, bool) {
		u, ok := s.users[id]
		return u, ok
	})
}

// inlineMarkup parses reply_markup; only an inline keyboard is kept (other
// markups are accepted and shown as nothing).
func inlineMarkup(p params) (*telego.InlineKeyboardMarkup, *apiError) {
	raw := p["reply_markup"]
	if raw == "" {
		return nil, nil
	}
	var markup struct {
		InlineKeyboard [][]telego.InlineKeyboardButton `json:"inline_keyboard"`
	}
	if json.Unmarshal([]byte(raw), &markup) != nil {
		return nil, badRequest("can't parse reply keyboard markup JSON object")
	}
	if markup.InlineKeyboard == nil {
		return nil, nil
	}
	for _, row := range markup.InlineKeyboard {
		for _, btn := range row {
			if btn.Text == "" {
				return nil, badRequest("BUTTON_TEXT_EMPTY")
			}
			if len(btn.CallbackData) > 64 {
				return nil, badRequest("BUTTON_DATA_INVALID")
			}
			if btn.CallbackData == "" && btn.URL == "" && btn.WebApp == nil && btn.LoginURL == nil &&
				btn.SwitchInlineQuery == nil && btn.SwitchInlineQueryCurrentChat == nil &&
				btn.SwitchInlineQueryChosenChat == nil && btn.CopyText == nil && btn.CallbackGame == nil && !btn.Pay {
				return nil, badRequest("text buttons are unallowed in the inline keyboard")
			}
		}
	}
	return &telego.InlineKeyboardMarkup{InlineKeyboard: markup.InlineKeyboard}, nil
}

// content is what a sent or edited text message shows: its text and
// entities in its parse mode, and its inline keyboard.
func (s *Server) content(p params) (string, []telego.MessageEntity, *telego.InlineKeyboardMarkup, *apiError) {
	text, entities, err := s.formatted(p)
	if err != nil {
		return "", nil, nil, err
	}
	markup, err := inlineMarkup(p)
	if err != nil {
		return "", nil, nil, err
	}
	return text, entities, markup, nil
}

func (s *Server) sendMessage(b *botState, p params) answer {
	cs, conn, err := s.target(b, p)
	if err != nil {
		return answer{err: err}
	}
	text, entities, markup, err := s.content(p)
	if err != nil {
		return answer{err: err}
	}
	// The request is valid: only now do the limits count it.
	if err := s.admit(b, cs.chat.ID); err != nil {
		return answer{err: err}
	}
	me := b.me
	m := telego.Message{From: &me, Chat: cs.chat, Date: s.now().Unix(), Text: text, Entities: entities, ReplyMarkup: markup}
	if conn != nil {
		owner := conn.User
		m.From, m.SenderBusinessBot, m.BusinessConnectionID = &owner, &me, conn.ID
	}
	ms := cs.add(m, true, p["parse_mode"], s.opts.MaxMessagesPerChat)
	s.signal()
	return answer{result: ms.m}
}

// editable finds the bot's message an edit addresses.
func (s *Server) editable(b *botState, p params) (*msgState, *apiError) {
	if p["inline_message_id"] != "" {
		return nil, badRequest("inline messages are not supported by the fake Bot API")
	}
	cs, _, err := s.target(b, p)
	if err != nil {
		return nil, err
	}
	id, ok, err := p.int64("message_id")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badRequest("message identifier is not specified")
	}
	ms := cs.byID[int(id)]
	if ms == nil || ms.deleted {
		return nil, badRequest("message to edit not found")
	}
	if !ms.fromBot {
		return nil, badRequest("message can't be edited")
	}
	return ms, nil
}

const notModified = "message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message"

func (s *Server) editMessageText(b *botState, p params) answer {
	ms, err := s.editable(b, p)
	if err != nil {
		return answer{err: err}
	}
	text, entities, markup, err := s.content(p)
	if err != nil {
		return answer{err: err}
	}
	// Telegram compares what the message would show, not the markup sent.
	if ms.m.Text == text && sameJSON(ms.m.Entities, entities) && sameJSON(ms.m.ReplyMarkup, markup) {
		return answer{err: badRequest(notModified)}
	}
	ms.m.Text, ms.m.Entities, ms.parseMode, ms.m.ReplyMarkup = text, entities, p["parse_mode"], markup
	ms.m.EditDate = s.now().Unix()
	s.signal()
	return answer{result: ms.m}
}

func (s *Server) editMessageReplyMarkup(b *botState, p params) answer {
	ms, err := s.editable(b, p)
	if err != nil {
		return answer{err: err}
	}
	markup, err := inlineMarkup(p)
	if err != nil {
		return answer{err: err}
	}
	if sameJSON(ms.m.ReplyMarkup, markup) {
		return answer{err: badRequest(notModified)}
	}
	ms.m.ReplyMarkup = markup
	ms.m.EditDate = s.now().Unix()
	s.signal()
	return answer{result: ms.m}
}

// sameJSON reports whether a and b are the same to a client.
func sameJSON(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func (s *Server) deleteMessage(b *botState, p params) answer {
	cs, _, err := s.target(b, p)
	if err != nil {
		return answer{err: err}
	}
	id, _, err := p.int64("message_id")
	if err != nil {
		return answer{err: err}
	}
	ms := cs.byID[int(id)]
	if ms == nil || ms.deleted {
		return answer{err: badRequest("message to delete not found")}
	}
	ms.deleted = true
	s.signal()
	return answer{result: true}
}

func (s *Server) answerCallbackQuery(b *botState, p params) answer {
	cb := b.callbacks[p["callback_query_id"]]
	if cb == nil || cb.answered {
		return answer{err: badRequest("query is too old and response timeout expired or query ID is invalid")}
	}
	cb.answered = true
	delete(b.callbacks, p["callback_query_id"]) // answered once; the id is spent
	if text := p["text"]; text != "" {
		if cs := b.chat(cb.chat); cs != nil {
			if ms := cs.byID[cb.msgID]; ms != nil {
				ms.callbackAnswers = append(ms.callbackAnswers, text)
			}
		}
	}
	s.signal()
	return answer{result: true}
}

func (s *Server) sendChatAction(b *botState, p params) answer {
	if _, _, err := s.target(b, p); err != nil {
		return answer{err: err}
	}
	if p["action"] == "" {
		return answer{err: badRequest("action is empty")}
	}
	return answer{result: true}
}

func (s *Server) getChat(b *botState, p params) answer {
	chatID, ok, err := p.int64("chat_id")
	if err != nil {
		return answer{err: err}
	}
	if !ok {
		return answer{err: badRequest("chat_id is empty")}
	}
	if cs := b.chat(chatKey{id: chatID}); cs != nil {
		return answer{result: fullInfo(cs.chat)}
	}
	// A user the bot met only in a business chat is still known to it.
	for _, key := range b.chatOrder {
		if key.id == chatID {
			return answer{result: fullInfo(privateChat(b.chats[key].peer))}
		}
	}
	return answer{err: badRequest("chat not found")}
}

func fullInfo(c telego.Chat) telego.ChatFullInfo {
	return telego.ChatFullInfo{
		ID: c.ID, Type: c.Type, Title: c.Title, Username: c.Username, FirstName: c.FirstName, LastName: c.LastName,
		AccentColorID: int(max(c.ID, -c.ID) % 7), MaxReactionCount: 11,
	}
}

func (s *Server) getBusinessConnection(b *botState, p params) answer {
	conn := b.conns[p["business_connection_id"]]
	if conn == nil {
		return answer{err: badRequest("business connection not found")}
	}
	return answer{result: *conn}
}

func (s *Server) setMyCommands(b *botState, p params) answer {
	var commands []telego.BotCommand
	if json.Unmarshal([]byte(p["commands"]), &commands) != nil {
		return answer{err: badRequest("can't parse commands JSON object")}
	}
	b.commands = commands
	return answer{result: true}
}

func (s *Server) getMyCommands(b *botState, _ params) answer {
	return answer{result: append([]telego.BotCommand{}, b.commands...)}
}

func (s *Server) deleteMyCommands(b *botState, _ params) answer {
	b.commands = nil
	return answer{result: true}
}
