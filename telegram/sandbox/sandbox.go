// Package sandbox is the process's built-in fake Telegram as its operators
// use it: the fakebot.Server that bots without a real token talk to, with
// the onboarding and chat bots on it, and the actions of the Telegram users
// those bots serve — /start with a code or a telegramConnect payload, press
// an inline button, write to the bot or to a connected business account,
// block the bot. The console's Sandbox page calls the actions; programs
// holding the admin token (the demo, test kits) call them through the JSON
// admin API that AdminRoutes mounts.
//
// Bad input is an *httpjson.Error (400, 404, 409) whose message says what
// is wrong, so the API answers it as it is and the console shows it.
package sandbox

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mymmrac/telego"

	"switchyard/httpjson"
	"switchyard/telegram/fakebot"
)

// The sandbox's bots, as the console's forms and the API name them.
const (
	BotOnboarding = "onboarding"
	BotChat       = "chat"
)

// Opts configure New.
type Opts struct {
	// Server is the fake Bot API the sandboxed bots are pointed at.
	Server *fakebot.Server
	// OnboardingToken is the onboarding bot's token on the fake; empty when
	// that bot uses the real Telegram (or does not run).
	OnboardingToken string
	// ChatToken is the chat platform's bot (Telegram Business) on the fake;
	// empty when it uses the real Telegram (or does not run).
	ChatToken string
}

// Sandbox is the fake Telegram with this process's bots on it.
type Sandbox struct {
	server *fakebot.Server
	bots   []Bot
}

// Bot is one of this process's bots on the sandbox.
type Bot struct {
	// Name is BotOnboarding or BotChat.
	Name string
	// Token is the bot's token on the sandbox, random per database.
	Token string
}

// New returns the sandbox of opts.Server. A nil Server panics.
func New(opts Opts) *Sandbox {
	if opts.Server == nil {
		panic("sandbox: nil Server")
	}
	sb := &Sandbox{server: opts.Server}
	for _, b := range []Bot{{BotOnboarding, opts.OnboardingToken}, {BotChat, opts.ChatToken}} {
		if b.Token != "" {
			sb.bots = append(sb.bots, b)
		}
	}
	return sb
}

// Bots lists the bots on the sandbox, the onboarding bot first.
func (sb *Sandbox) Bots() []Bot { return append([]Bot(nil), sb.bots...) }

// View is what the named bot's users see: its chats and business connections.
func (sb *Sandbox) View(name string) (fakebot.BotView, error) {
	b, err := sb.bot(name)
	if err != nil {
		return fakebot.BotView{}, err
	}
	return b.View()
}

// Window is part of what the named bot's users see: w's chats, newest
// first, each with its latest messages (a page of the console at any size).
func (sb *Sandbox) Window(name string, w fakebot.Window) (fakebot.ChatPage, error) {
	b, err := sb.bot(name)
	if err != nil {
		return fakebot.ChatPage{}, err
	}
	return b.ViewWindow(w)
}

// Chat is one chat of the named bot — the user's private chat, or with
// connID the customer's business chat — with its latest n messages (0: all)
// sent before the message before (0: up to the newest).
func (sb *Sandbox) Chat(name, connID string, chatID int64, before, n int) (fakebot.ChatView, error) {
	b, err := sb.bot(name)
	if err != nil {
		return fakebot.ChatView{}, err
	}
	c, err := b.ChatWindow(connID, chatID, before, n)
	return c, refusal(err)
}

// defaultBusinessOwner connects the chat bot to a business account when a
// customer writes and no connection exists yet.
var defaultBusinessOwner = telego.User{ID: 100000, FirstName: "Sandbox", LastName: "Shop", Username: "sandbox_shop"}

// bot returns the handle of the named sandbox bot ("" is the onboarding bot).
func (sb *Sandbox) bot(name string) (*fakebot.Bot, error) {
	if name == "" {
		name = BotOnboarding
	}
	if name != BotOnboarding && name != BotChat {
		return nil, httpjson.BadRequest("bot must be %q or %q", BotOnboarding, BotChat)
	}
	for _, b := range sb.bots {
		if b.Name == name {
			return sb.server.Bot(b.Token), nil
		}
	}
	return nil, httpjson.NotFound("the %s bot is not on the sandbox in this process", name)
}

// User is the Telegram user id as the sandbox knows them, or a new one
// named firstName (default "User <id>"; at most 64 characters).
func (sb *Sandbox) User(id int64, firstName string) (telego.User, error) {
	if id <= 0 {
		return telego.User{}, httpjson.BadRequest("a Telegram user id is a positive number")
	}
	firstName = strings.TrimSpace(firstName)
	if firstName != "" {
		return telego.User{ID: id, FirstName: clip(firstName, 64)}, nil
	}
	for _, b := range sb.server.Bots() {
		for _, c := range b.Chats {
			if c.User.ID == id {
				return c.User, nil
			}
		}
	}
	return telego.User{ID: id, FirstName: "User " + strconv.FormatInt(id, 10)}, nil
}

// clip shortens s to n runes, the last an ellipsis.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// refusal maps the fake's refusals to HTTP errors.
func refusal(err error) error {
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

// Start is the user opening the bot with a deep-link payload.
func (sb *Sandbox) Start(botName string, u telego.User, payload string) (telego.Message, error) {
	b, err := sb.bot(botName)
	if err != nil {
		return telego.Message{}, err
	}
	m, err := b.Start(u, strings.TrimSpace(payload))
	return m, refusal(err)
}

// Send is the user writing text to the bot.
func (sb *Sandbox) Send(botName string, u telego.User, text string) (telego.Message, error) {
	if strings.TrimSpace(text) == "" {
		return telego.Message{}, httpjson.BadRequest("text is empty")
	}
	b, err := sb.bot(botName)
	if err != nil {
		return telego.Message{}, err
	}
	m, err := b.Send(u, text)
	return m, refusal(err)
}

// Press is the user pressing the inline button carrying data; messageID
// zero means the latest of the bot's messages with such a button. It
// returns the callback query's id.
func (sb *Sandbox) Press(botName string, u telego.User, messageID int, data string) (string, error) {
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
			return "", refusal(fakebot.ErrNoChat)
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
			return "", refusal(fakebot.ErrNoButton)
		}
	}
	id, err := b.Press(u, messageID, data)
	return id, refusal(err)
}

// Block is the user blocking (or, with blocked false, unblocking) the bot.
func (sb *Sandbox) Block(botName string, u telego.User, blocked bool) error {
	b, err := sb.bot(botName)
	if err != nil {
		return err
	}
	if blocked {
		return refusal(b.Block(u))
	}
	return refusal(b.Unblock(u))
}

// Connect is a business account's owner connecting the chat bot, with the
// right to reply.
func (sb *Sandbox) Connect(owner telego.User) (telego.BusinessConnection, error) {
	b, err := sb.bot(BotChat)
	if err != nil {
		return telego.BusinessConnection{}, err
	}
	c, err := b.ConnectBusiness(owner, telego.BusinessBotRights{CanReply: true, CanReadMessages: true})
	return c, refusal(err)
}

// BusinessMessage is a customer writing to the business account behind
// connID; an empty connID means the latest enabled connection, made with a
// default owner when there is none.
func (sb *Sandbox) BusinessMessage(connID string, customer telego.User, text string) (telego.Message, error) {
	if strings.TrimSpace(text) == "" {
		return telego.Message{}, httpjson.BadRequest("text is empty")
	}
	b, err := sb.bot(BotChat)
	if err != nil {
		return telego.Message{}, err
	}
	if connID == "" {
		v, err := b.View()
		if err != nil {
			return telego.Message{}, refusal(err)
		}
		for _, c := range v.Connections {
			if c.IsEnabled {
				connID = c.ID
			}
		}
		if connID == "" {
			c, err := sb.Connect(defaultBusinessOwner)
			if err != nil {
				return telego.Message{}, err
			}
			connID = c.ID
		}
	}
	m, err := b.BusinessMessage(connID, customer, text)
	return m, refusal(err)
}
