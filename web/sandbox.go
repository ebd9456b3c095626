package web

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gorilla/mux"
	"github.com/mymmrac/telego"

	"switchyard/httpjson"
	"switchyard/mask"
	"switchyard/telegram/fakebot"
)

// Sandbox is the built-in fake Telegram Bot API that bots without a real
// token talk to. The console shows its chats as the Telegram users see them
// and lets an operator (or a demo script, through the admin API) act as
// those users: /start with a code or a telegramConnect payload, press an
// inline button, write to the bot or to a connected business account, block
// the bot.
type Sandbox struct {
	// Server is the fake Bot API the sandboxed bots are pointed at.
	Server *fakebot.Server
	// OnboardingToken is the onboarding bot's token on the fake; empty when
	// that bot uses the real Telegram (or does not run).
	OnboardingToken string
	// ChatToken is the chat platform's bot (Telegram Business) on the fake;
	// empty when it uses the real Telegram (or does not run).
	ChatToken string
}

// The sandbox's bots, as the forms and the API name them.
const (
	sandboxOnboardingBot = "onboarding"
	sandboxChatBot       = "chat"
)

// defaultBusinessOwner connects the chat bot to a business account when a
// customer writes and no connection exists yet.
var defaultBusinessOwner = telego.User{ID: 100000, FirstName: "Sandbox", LastName: "Shop", Username: "sandbox_shop"}

// bot returns the handle of the named sandbox bot.
func (sb *Sandbox) bot(name string) (*fakebot.Bot, error) {
	token := sb.OnboardingToken
	if name == sandboxChatBot {
		token = sb.ChatToken
	} else if name != "" && name != sandboxOnboardingBot {
		return nil, httpjson.BadRequest("bot must be %q or %q", sandboxOnboardingBot, sandboxChatBot)
	}
	if token == "" {
		return nil, httpjson.NotFound("the %s bot is not on the sandbox in this process", nameOr(name, sandboxOnboardingBot))
	}
	return sb.Server.Bot(token), nil
}

func nameOr(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// user is the Telegram user id as the sandbox knows them, or a new one named
// firstName (default "User <id>").
func (sb *Sandbox) user(id int64, firstName string) (telego.User, error) {
	if id <= 0 {
		return telego.User{}, httpjson.BadRequest("a Telegram user id is a positive number")
	}
	firstName = strings.TrimSpace(firstName)
	if firstName != "" {
		return telego.User{ID: id, FirstName: clip(firstName, 64)}, nil
	}
	for _, b := range sb.Server.Bots() {
		for _, c := range b.Chats {
			if c.User.ID == id {
				return c.User, nil
			}
		}
	}
	return telego.User{ID: id, FirstName: "User " + strconv.FormatInt(id, 10)}, nil
}

// sandboxError maps the fake's refusals to HTTP errors.
func sandboxError(err error) error {
	var herr *httpjson.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &herr):
		return err
	case errors.Is(err, fakebot.ErrBadUser), errors.Is(err, fakebot.ErrBadToken):
		return httpjson.BadRequest("%v", err)
	case errors.Is(err, fakebot.ErrNoChat), errors.Is(err, fakebot.ErrNoMessage),
		errors.Is(err, fakebot.ErrNoButton), errors.Is(err, fakebot.ErrNoConnection):
		return httpjson.NotFound("%v", err)
	case errors.Is(err, fakebot.ErrBlocked), errors.Is(err, fakebot.ErrConnectionOff), errors.Is(err, fakebot.ErrNotCustomer):
		return httpjson.Conflict("%v", err)
	}
	return err
}

// start is the user opening the bot with a deep-link payload.
func (sb *Sandbox) start(botName string, u telego.User, payload string) (telego.Message, error) {
	b, err := sb.bot(botName)
	if err != nil {
		return telego.Message{}, err
	}
	m, err := b.Start(u, strings.TrimSpace(payload))
	return m, sandboxError(err)
}

// send is the user writing text to the bot.
func (sb *Sandbox) send(botName string, u telego.User, text string) (telego.Message, error) {
	if strings.TrimSpace(text) == "" {
		return telego.Message{}, httpjson.BadRequest("text is empty")
	}
	b, err := sb.bot(botName)
	if err != nil {
		return telego.Message{}, err
	}
	m, err := b.Send(u, text)
	return m, sandboxError(err)
}

// press is the user pressing the inline button carrying data; messageID zero
// means the latest of the bot's messages with such a button.
func (sb *Sandbox) press(botName string, u telego.User, messageID int, data string) (string, error) {
	if data == "" {
		return "", httpjson.BadRequest("data (the button's callback data) is empty")
	}
	b, err := sb.bot(botName)
	if err != nil {
		return "", err
	}
	if messageID == 0 {
		c, ok := b.Chat(u.ID)
		if !ok {
			return "", sandboxError(fakebot.ErrNoChat)
		}
	find:
		for i := len(c.Messages) - 1; i >= 0; i-- {
			m := c.Messages[i]
			if m.Sender != fakebot.SenderBot || m.Deleted {
				continue
			}
			for _, row := range m.Buttons {
				for _, btn := range row {
					if btn.CallbackData == data {
						messageID = m.ID
						break find
					}
				}
			}
		}
		if messageID == 0 {
			return "", sandboxError(fakebot.ErrNoButton)
		}
	}
	id, err := b.Press(u, messageID, data)
	return id, sandboxError(err)
}

// block is the user blocking (or unblocking) the bot.
func (sb *Sandbox) block(botName string, u telego.User, blocked bool) error {
	b, err := sb.bot(botName)
	if err != nil {
		return err
	}
	if blocked {
		return sandboxError(b.Block(u))
	}
	return sandboxError(b.Unblock(u))
}

// connect is a business account's owner connecting the chat bot, with the
// right to reply.
func (sb *Sandbox) connect(owner telego.User) (telego.BusinessConnection, error) {
	b, err := sb.bot(sandboxChatBot)
	if err != nil {
		return telego.BusinessConnection{}, err
	}
	c, err := b.ConnectBusiness(owner, telego.BusinessBotRights{CanReply: true, CanReadMessages: true})
	return c, sandboxError(err)
}

// businessMessage is a customer writing to the business account behind
// connID; an empty connID means the latest enabled connection, made with
// defaultBusinessOwner when there is none.
func (sb *Sandbox) businessMessage(connID string, customer telego.User, text string) (telego.Message, error) {
	if strings.TrimSpace(text) == "" {
		return telego.Message{}, httpjson.BadRequest("text is empty")
	}
	b, err := sb.bot(sandboxChatBot)
	if err != nil {
		return telego.Message{}, err
	}
	if connID == "" {
		v, err := b.View()
		if err != nil {
			return telego.Message{}, sandboxError(err)
		}
		for _, c := range v.Connections {
			if c.IsEnabled {
				connID = c.ID
			}
		}
		if connID == "" {
			c, err := sb.connect(defaultBusinessOwner)
			if err != nil {
				return telego.Message{}, err
			}
			connID = c.ID
		}
	}
	m, err := b.BusinessMessage(connID, customer, text)
	return m, sandboxError(err)
}

// The console's sandbox page.

// sandboxModel is the Sandbox page: each sandboxed bot with its chats.
type sandboxModel struct {
	Bots        []sandboxBot
	Connections []sandboxConn
	ChatBot     bool
	Onboarding  bool
}

type sandboxBot struct {
	Role     string // sandboxOnboardingBot or sandboxChatBot
	Label    string
	Username string
	Pending  int
	Chats    []sandboxChat
}

type sandboxConn struct {
	ID, Owner string
	Enabled   bool
	CanReply  bool
}

type sandboxChat struct {
	Anchor    string
	Title     string
	UserID    string
	FirstName string
	Business  string // the business connection of a customer's chat
	Private   bool
	Blocked   bool
	Messages  []sandboxMessage
}

type sandboxMessage struct {
	ID      string
	FromBot bool
	Text    string
	At      string
	Edited  bool
	Deleted bool
	Buttons [][]sandboxButton
	Toasts  []string
}

type sandboxButton struct {
	Text string `json:"text"`
	Data string `json:"data,omitempty"`
	URL  string `json:"url,omitempty"`
}

func (sb *Sandbox) model() sandboxModel {
	m := sandboxModel{ChatBot: sb.ChatToken != "", Onboarding: sb.OnboardingToken != ""}
	for _, bt := range []struct {
		role, label, token string
	}{
		{sandboxOnboardingBot, "Onboarding bot", sb.OnboardingToken},
		{sandboxChatBot, "Chat platform bot (Telegram Business)", sb.ChatToken},
	} {
		if bt.token == "" {
			continue
		}
		v, err := sb.Server.Bot(bt.token).View()
		if err != nil {
			continue
		}
		b := sandboxBot{Role: bt.role, Label: bt.label, Username: v.Username, Pending: v.PendingUpdates}
		for _, c := range v.Chats {
			b.Chats = append(b.Chats, toSandboxChat(bt.role, c))
		}
		if bt.role == sandboxChatBot {
			for _, c := range v.Connections {
				owner := strings.TrimSpace(c.User.FirstName + " " + c.User.LastName)
				m.Connections = append(m.Connections, sandboxConn{ID: c.ID, Owner: owner, Enabled: c.IsEnabled,
					CanReply: c.Rights != nil && c.Rights.CanReply})
			}
		}
		m.Bots = append(m.Bots, b)
	}
	return m
}

func toSandboxChat(role string, c fakebot.ChatView) sandboxChat {
	sc := sandboxChat{
		Anchor: "chat-" + role + "-" + strconv.FormatInt(c.ID, 10), Title: c.Title,
		UserID: strconv.FormatInt(c.User.ID, 10), FirstName: c.User.FirstName,
		Business: c.BusinessConnectionID, Private: c.Type == "private", Blocked: c.Blocked,
	}
	if c.BusinessConnectionID != "" {
		sc.Anchor += "-" + c.BusinessConnectionID
	}
	for _, msg := range c.Messages {
		sm := sandboxMessage{
			ID: strconv.Itoa(msg.ID), FromBot: msg.Sender == fakebot.SenderBot, Text: mask.Phones(msg.Text),
			At: when(msg.Date), Edited: !msg.Edited.IsZero(), Deleted: msg.Deleted, Toasts: msg.CallbackAnswers,
		}
		for _, row := range msg.Buttons {
			var r []sandboxButton
			for _, b := range row {
				r = append(r, sandboxButton{Text: b.Text, Data: b.CallbackData, URL: b.URL})
			}
			sm.Buttons = append(sm.Buttons, r)
		}
		sc.Messages = append(sc.Messages, sm)
	}
	return sc
}

func (s *Server) sandboxConsoleRoutes(r *mux.Router) {
	r.HandleFunc("/sandbox", s.sandboxPage).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/sandbox/start", s.sandboxAct(func(sb *Sandbox, r *http.Request, u telego.User) (string, error) {
		payload := r.PostForm.Get("payload")
		if _, err := sb.start(r.PostForm.Get("bot"), u, payload); err != nil {
			return "", err
		}
		return u.FirstName + " sent /start " + payload, nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/send", s.sandboxAct(func(sb *Sandbox, r *http.Request, u telego.User) (string, error) {
		if _, err := sb.send(r.PostForm.Get("bot"), u, r.PostForm.Get("text")); err != nil {
			return "", err
		}
		return u.FirstName + " wrote to the bot.", nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/press", s.sandboxAct(func(sb *Sandbox, r *http.Request, u telego.User) (string, error) {
		msgID, _ := strconv.Atoi(r.PostForm.Get("message"))
		if _, err := sb.press(r.PostForm.Get("bot"), u, msgID, r.PostForm.Get("data")); err != nil {
			return "", err
		}
		return u.FirstName + " pressed the button.", nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/block", s.sandboxAct(func(sb *Sandbox, r *http.Request, u telego.User) (string, error) {
		blocked := r.PostForm.Get("action") != "unblock"
		if err := sb.block(r.PostForm.Get("bot"), u, blocked); err != nil {
			return "", err
		}
		if blocked {
			return u.FirstName + " blocked the bot.", nil
		}
		return u.FirstName + " unblocked the bot.", nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/business-message", s.sandboxAct(func(sb *Sandbox, r *http.Request, u telego.User) (string, error) {
		if _, err := sb.businessMessage(r.PostForm.Get("connection"), u, r.PostForm.Get("text")); err != nil {
			return "", err
		}
		return u.FirstName + " wrote to the business account.", nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/connect", s.sandboxAct(func(sb *Sandbox, r *http.Request, u telego.User) (string, error) {
		c, err := sb.connect(u)
		if err != nil {
			return "", err
		}
		return u.FirstName + " connected the bot to their business account (" + c.ID + ").", nil
	})).Methods(http.MethodPost)
}

func (s *Server) sandboxPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, sandboxPage(s.newPage(w, r, "Sandbox", "sandbox"), s.opts.Sandbox.model()))
}

// sandboxAct wraps a console sandbox action: it reads the form's user
// (fields user and name), runs act, and returns to the sandbox page with
// the outcome.
func (s *Server) sandboxAct(act func(sb *Sandbox, r *http.Request, u telego.User) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.parseForm(w, r, "/admin/sandbox") {
			return
		}
		back := backTo(r, "/admin/sandbox")
		id, _ := strconv.ParseInt(strings.TrimSpace(r.PostForm.Get("user")), 10, 64)
		u, err := s.opts.Sandbox.user(id, r.PostForm.Get("name"))
		if err == nil {
			var text string
			if text, err = act(s.opts.Sandbox, r, u); err == nil {
				s.done(w, r, back, true, text)
				return
			}
		}
		var herr *httpjson.Error
		if errors.As(err, &herr) {
			s.done(w, r, back, false, herr.Message)
			return
		}
		s.actionFailed(w, r, back, err, false)
	}
}

// The sandbox's admin API, for programs holding the admin token (the demo):
//
//	GET  /sandbox                               the bots (with their tokens), chats and connections
//	POST /sandbox/users/{id}/start              {"payload","firstName","bot"} → /start <payload>
//	POST /sandbox/users/{id}/messages           {"text","firstName","bot"}    → a message to the bot
//	POST /sandbox/users/{id}/press              {"data","messageId","bot"}    → press an inline button
//	POST /sandbox/users/{id}/block              {"bot"} (body optional)       → block the bot
//	POST /sandbox/users/{id}/unblock            {"bot"} (body optional)       → unblock it
//	POST /sandbox/users/{id}/business-message   {"text","firstName","connectionId"} → a customer's message
//	POST /sandbox/business-connections          {"ownerId","firstName"}       → connect the chat bot
//
// bot is "onboarding" (the default) or "chat"; messageId zero presses the
// latest of the bot's messages carrying the button.
func (s *Server) sandboxAPIRoutes(r *mux.Router) {
	h := func(path string, f httpjson.HandlerFunc, method string) { r.Handle(path, f).Methods(method) }
	h("/sandbox", s.apiSandboxView, http.MethodGet)
	h("/sandbox/users/{id:[0-9]+}/start", s.apiSandboxStart, http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/messages", s.apiSandboxSend, http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/press", s.apiSandboxPress, http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/block", s.apiSandboxBlock(true), http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/unblock", s.apiSandboxBlock(false), http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/business-message", s.apiSandboxBusiness, http.MethodPost)
	h("/sandbox/business-connections", s.apiSandboxConnect, http.MethodPost)
}

// decodeOptional decodes a JSON body when there is one.
func decodeOptional(r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return httpjson.Decode(r, v)
}

func (s *Server) apiUser(r *http.Request, firstName string) (telego.User, error) {
	id, _ := strconv.ParseInt(mux.Vars(r)["id"], 10, 64)
	return s.opts.Sandbox.user(id, firstName)
}

// sandboxMessageJSON is the answer of an action that wrote a message.
type sandboxMessageJSON struct {
	MessageID            int    `json:"messageId"`
	ChatID               int64  `json:"chatId"`
	BusinessConnectionID string `json:"businessConnectionId,omitempty"`
}

func writeSandboxMessage(w http.ResponseWriter, m telego.Message) {
	httpjson.Write(w, http.StatusOK, sandboxMessageJSON{MessageID: m.MessageID, ChatID: m.Chat.ID, BusinessConnectionID: m.BusinessConnectionID})
}

func (s *Server) apiSandboxStart(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Payload   string `json:"payload"`
		FirstName string `json:"firstName"`
		Bot       string `json:"bot"`
	}
	if err := decodeOptional(r, &body); err != nil {
		return err
	}
	u, err := s.apiUser(r, body.FirstName)
	if err != nil {
		return err
	}
	m, err := s.opts.Sandbox.start(body.Bot, u, body.Payload)
	if err != nil {
		return err
	}
	writeSandboxMessage(w, m)
	return nil
}

func (s *Server) apiSandboxSend(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Text      string `json:"text"`
		FirstName string `json:"firstName"`
		Bot       string `json:"bot"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	u, err := s.apiUser(r, body.FirstName)
	if err != nil {
		return err
	}
	m, err := s.opts.Sandbox.send(body.Bot, u, body.Text)
	if err != nil {
		return err
	}
	writeSandboxMessage(w, m)
	return nil
}

func (s *Server) apiSandboxPress(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		MessageID int    `json:"messageId"`
		Data      string `json:"data"`
		Bot       string `json:"bot"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	u, err := s.apiUser(r, "")
	if err != nil {
		return err
	}
	id, err := s.opts.Sandbox.press(body.Bot, u, body.MessageID, body.Data)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"callbackQueryId": id})
	return nil
}

func (s *Server) apiSandboxBlock(blocked bool) httpjson.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var body struct {
			Bot string `json:"bot"`
		}
		if err := decodeOptional(r, &body); err != nil {
			return err
		}
		u, err := s.apiUser(r, "")
		if err != nil {
			return err
		}
		if err := s.opts.Sandbox.block(body.Bot, u, blocked); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

func (s *Server) apiSandboxBusiness(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Text         string `json:"text"`
		FirstName    string `json:"firstName"`
		ConnectionID string `json:"connectionId"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	u, err := s.apiUser(r, body.FirstName)
	if err != nil {
		return err
	}
	m, err := s.opts.Sandbox.businessMessage(body.ConnectionID, u, body.Text)
	if err != nil {
		return err
	}
	writeSandboxMessage(w, m)
	return nil
}

// sandboxConnJSON is a business connection in the sandbox API.
type sandboxConnJSON struct {
	ID       string `json:"id"`
	OwnerID  int64  `json:"ownerId"`
	Enabled  bool   `json:"enabled"`
	CanReply bool   `json:"canReply"`
}

func (s *Server) apiSandboxConnect(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		OwnerID   int64  `json:"ownerId"`
		FirstName string `json:"firstName"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	owner, err := s.opts.Sandbox.user(body.OwnerID, body.FirstName)
	if err != nil {
		return err
	}
	c, err := s.opts.Sandbox.connect(owner)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusCreated, sandboxConnJSON{ID: c.ID, OwnerID: c.User.ID, Enabled: c.IsEnabled,
		CanReply: c.Rights != nil && c.Rights.CanReply})
	return nil
}

// sandboxViewJSON is GET /admin/api/sandbox: what each sandboxed bot's users see.
type sandboxViewJSON struct {
	Bots []sandboxBotJSON `json:"bots"`
}

type sandboxBotJSON struct {
	Bot      string `json:"bot"`
	ID       int64  `json:"id"`
	Username string `json:"username"`
	// Token is the bot's token on the sandbox, random per database: what a
	// program driving the sandbox as the bot (a test kit) calls it with.
	Token       string            `json:"token"`
	Connections []sandboxConnJSON `json:"connections"`
	Chats       []sandboxChatJSON `json:"chats"`
}

type sandboxChatJSON struct {
	ChatID               int64                `json:"chatId"`
	UserID               int64                `json:"userId"`
	Title                string               `json:"title"`
	BusinessConnectionID string               `json:"businessConnectionId,omitempty"`
	Blocked              bool                 `json:"blocked"`
	Messages             []sandboxMessageView `json:"messages"`
}

type sandboxMessageView struct {
	MessageID int               `json:"messageId"`
	From      string            `json:"from"`
	Text      string            `json:"text"`
	Buttons   [][]sandboxButton `json:"buttons,omitempty"`
	Deleted   bool              `json:"deleted,omitempty"`
}

func (s *Server) apiSandboxView(w http.ResponseWriter, r *http.Request) error {
	sb := s.opts.Sandbox
	out := sandboxViewJSON{Bots: []sandboxBotJSON{}}
	for _, bt := range []struct {
		name, token string
	}{{sandboxOnboardingBot, sb.OnboardingToken}, {sandboxChatBot, sb.ChatToken}} {
		if bt.token == "" {
			continue
		}
		v, err := sb.Server.Bot(bt.token).View()
		if err != nil {
			return err
		}
		b := sandboxBotJSON{Bot: bt.name, ID: v.ID, Username: v.Username, Token: bt.token, Connections: []sandboxConnJSON{}, Chats: []sandboxChatJSON{}}
		for _, c := range v.Connections {
			b.Connections = append(b.Connections, sandboxConnJSON{ID: c.ID, OwnerID: c.User.ID, Enabled: c.IsEnabled,
				CanReply: c.Rights != nil && c.Rights.CanReply})
		}
		for _, c := range v.Chats {
			cj := sandboxChatJSON{ChatID: c.ID, UserID: c.User.ID, Title: c.Title, BusinessConnectionID: c.BusinessConnectionID,
				Blocked: c.Blocked, Messages: []sandboxMessageView{}}
			for _, m := range c.Messages {
				mv := sandboxMessageView{MessageID: m.ID, From: string(m.Sender), Text: m.Text, Deleted: m.Deleted}
				for _, row := range m.Buttons {
					var rr []sandboxButton
					for _, btn := range row {
						rr = append(rr, sandboxButton{Text: btn.Text, Data: btn.CallbackData, URL: btn.URL})
					}
					mv.Buttons = append(mv.Buttons, rr)
				}
				cj.Messages = append(cj.Messages, mv)
			}
			b.Chats = append(b.Chats, cj)
		}
		out.Bots = append(out.Bots, b)
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

// sandboxAnchorHref is the sandbox page at one chat.
func sandboxAnchorHref(anchor string) string { return "/admin/sandbox#" + url.PathEscape(anchor) }
