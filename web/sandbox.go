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
	"switchyard/telegram/sandbox"
)

// The console's Sandbox page: the chats of the built-in fake Telegram as its
// users see them, and forms that act as those users. The sandbox itself and
// its JSON admin API are package telegram/sandbox.

// sandboxOps is what the Sandbox page needs of the sandbox
// (*sandbox.Sandbox). Its errors for bad input are *httpjson.Error, whose
// message the page shows.
type sandboxOps interface {
	Bots() []sandbox.Bot
	Window(bot string, w fakebot.Window) (fakebot.ChatPage, error)
	Chat(bot, connID string, chatID int64, before, n int) (fakebot.ChatView, error)
	User(id int64, firstName string) (telego.User, error)
	Start(bot string, u telego.User, payload string) (telego.Message, error)
	Send(bot string, u telego.User, text string) (telego.Message, error)
	Press(bot string, u telego.User, messageID int, data string) (string, error)
	Block(bot string, u telego.User, blocked bool) error
	Connect(owner telego.User) (telego.BusinessConnection, error)
	BusinessMessage(connID string, customer telego.User, text string) (telego.Message, error)
}

// The Sandbox page shows a window of the sandbox however long it has run (a
// demo of a few minutes makes thousands of chats): each bot's latest chats
// with their latest messages, older ones a link away. Its URL says the
// window — bot and before (a chat's position) page a bot's chats; bot, chat,
// conn and before (a message id) open one chat and page its messages — so
// the live region polls the same window.
const (
	sandboxChatsPerPage    = 10 // chats of a bot on the page
	sandboxMessagesPerChat = 5  // latest messages of each chat in the list
	sandboxMessagesPerPage = 30 // messages of the one chat opened
)

// sandboxModel is the Sandbox page: each sandboxed bot with a window of its
// chats, or one chat opened.
type sandboxModel struct {
	Bots        []sandboxBot
	Connections []sandboxConn
	ChatBot     bool
	Onboarding  bool
	// Open is the one chat the URL opened, of the bot OpenRole; Bots then
	// hold no chats.
	Open     *sandboxChat
	OpenRole string
	// Missing says why the chat the URL names is not shown.
	Missing string
}

type sandboxBot struct {
	Role     string // sandbox.BotOnboarding or sandbox.BotChat
	Label    string
	Username string
	Pending  int
	Chats    []sandboxChat
	// ChatCount is every chat of the bot; Older the chats before the
	// window, NewerHref and OlderHref the windows next to it ("" at an end).
	ChatCount, Older     int
	NewerHref, OlderHref string
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
	// Back is where the chat's forms return: the page as it is, at the chat.
	Back string
	// MessageCount is every message of the chat; Earlier and Later those
	// before and after the ones shown.
	MessageCount, Earlier, Later int
	// OpenHref opens the chat alone; EarlierHref and LaterHref page its
	// messages there ("" at an end).
	OpenHref, EarlierHref, LaterHref string
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
	Text, Data, URL string
}

// sandboxLabels name the sandbox's bots on the page.
var sandboxLabels = map[string]string{
	sandbox.BotOnboarding: "Onboarding bot",
	sandbox.BotChat:       "Chat platform bot (Telegram Business)",
}

// sandboxQuery is the window a Sandbox page URL asks for.
type sandboxQuery struct {
	self   string // the page's URL
	bot    string // the bot whose chats are paged or whose chat is open
	chat   int64  // the open chat's id; 0 lists chats
	conn   string // the open chat's business connection
	before int    // a chat's position (listing) or a message id (open chat)
}

func parseSandboxQuery(self string, q url.Values) sandboxQuery {
	sq := sandboxQuery{self: self, bot: q.Get("bot"), conn: q.Get("conn")}
	sq.chat, _ = strconv.ParseInt(q.Get("chat"), 10, 64)
	sq.before, _ = strconv.Atoi(q.Get("before"))
	sq.before = max(sq.before, 0)
	return sq
}

func sandboxPageModel(sb sandboxOps, q sandboxQuery) sandboxModel {
	var m sandboxModel
	for _, bt := range sb.Bots() {
		switch bt.Name {
		case sandbox.BotOnboarding:
			m.Onboarding = true
		case sandbox.BotChat:
			m.ChatBot = true
		}
		w := fakebot.Window{Chats: sandboxChatsPerPage, Messages: sandboxMessagesPerChat}
		if q.chat != 0 {
			w.Chats = -1 // the bot's header and connections only
		} else if q.bot == bt.Name {
			w.Before = q.before
		}
		v, err := sb.Window(bt.Name, w)
		if err != nil {
			continue
		}
		b := sandboxBot{Role: bt.Name, Label: sandboxLabels[bt.Name], Username: v.Username, Pending: v.PendingUpdates,
			ChatCount: v.ChatCount, Older: v.Older}
		for _, c := range v.Chats {
			sc := toSandboxChat(bt.Name, c)
			sc.Back = sandboxBack(q.self, sc.Anchor)
			b.Chats = append(b.Chats, sc)
		}
		if n := len(v.Chats); n > 0 {
			if newest := v.Chats[0].Seq; newest < v.ChatCount {
				before := 0 // the newest window
				if newest+sandboxChatsPerPage < v.ChatCount {
					before = newest + sandboxChatsPerPage + 1
				}
				b.NewerHref = sandboxHref(url.Values{"bot": {bt.Name}}, before)
			}
			if oldest := v.Chats[n-1].Seq; oldest > 1 {
				b.OlderHref = sandboxHref(url.Values{"bot": {bt.Name}}, oldest)
			}
		}
		if bt.Name == sandbox.BotChat {
			for _, c := range v.Connections {
				owner := strings.TrimSpace(c.User.FirstName + " " + c.User.LastName)
				m.Connections = append(m.Connections, sandboxConn{ID: c.ID, Owner: owner, Enabled: c.IsEnabled,
					CanReply: c.Rights != nil && c.Rights.CanReply})
			}
		}
		if q.chat != 0 && q.bot == bt.Name {
			c, err := sb.Chat(bt.Name, q.conn, q.chat, q.before, sandboxMessagesPerPage)
			if err != nil {
				m.Missing = "The sandbox has no such chat."
			} else {
				sc := toSandboxChat(bt.Name, c)
				sc.Back = sandboxBack(q.self, sc.Anchor)
				m.Open, m.OpenRole = &sc, bt.Name
			}
		}
		m.Bots = append(m.Bots, b)
	}
	if q.chat != 0 && m.Open == nil && m.Missing == "" {
		m.Missing = "The sandbox has no such bot."
	}
	return m
}

// sandboxHref is the Sandbox page at the window of v, with before when set.
func sandboxHref(v url.Values, before int) string {
	if before > 0 {
		v.Set("before", strconv.Itoa(before))
	}
	return "/admin/sandbox?" + v.Encode()
}

// toSandboxChat is a chat of the bot role; its forms return to the page's
// first window until the caller says otherwise (Back).
func toSandboxChat(role string, c fakebot.ChatView) sandboxChat {
	sc := sandboxChat{
		Anchor: "chat-" + role + "-" + strconv.FormatInt(c.ID, 10), Title: c.Title,
		UserID: strconv.FormatInt(c.User.ID, 10), FirstName: c.User.FirstName,
		Business: c.BusinessConnectionID, Private: c.Type == "private", Blocked: c.Blocked,
		MessageCount: c.MessageCount, Earlier: c.Earlier, Later: c.Later,
	}
	if c.BusinessConnectionID != "" {
		sc.Anchor += "-" + c.BusinessConnectionID
	}
	sc.Back = sandboxBack("/admin/sandbox", sc.Anchor)
	at := url.Values{"bot": {role}, "chat": {strconv.FormatInt(c.ID, 10)}}
	if c.BusinessConnectionID != "" {
		at.Set("conn", c.BusinessConnectionID)
	}
	sc.OpenHref = sandboxHref(at, 0)
	if n := len(c.Messages); n > 0 {
		if c.Earlier > 0 {
			sc.EarlierHref = sandboxHref(url.Values{"bot": at["bot"], "chat": at["chat"], "conn": at["conn"]}, c.Messages[0].ID)
		}
		if c.Later > 0 {
			before := 0 // the latest messages
			if c.Later > sandboxMessagesPerPage {
				before = c.Messages[n-1].ID + sandboxMessagesPerPage + 1
			}
			sc.LaterHref = sandboxHref(url.Values{"bot": at["bot"], "chat": at["chat"], "conn": at["conn"]}, before)
		}
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

// sandboxBack is the page self at a chat's anchor: where the chat's forms
// return, so an action on an older chat lands where the operator was.
func sandboxBack(self, anchor string) string {
	if i := strings.IndexByte(self, '#'); i >= 0 {
		self = self[:i]
	}
	if !strings.HasPrefix(self, "/admin/sandbox") {
		self = "/admin/sandbox"
	}
	return self + "#" + url.PathEscape(anchor)
}

func (s *Server) sandboxConsoleRoutes(r *mux.Router) {
	r.HandleFunc("/sandbox", s.sandboxPage).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/sandbox/start", s.sandboxAct(func(sb sandboxOps, r *http.Request, u telego.User) (string, error) {
		payload := r.PostForm.Get("payload")
		if _, err := sb.Start(r.PostForm.Get("bot"), u, payload); err != nil {
			return "", err
		}
		return u.FirstName + " sent /start " + payload, nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/send", s.sandboxAct(func(sb sandboxOps, r *http.Request, u telego.User) (string, error) {
		if _, err := sb.Send(r.PostForm.Get("bot"), u, r.PostForm.Get("text")); err != nil {
			return "", err
		}
		return u.FirstName + " wrote to the bot.", nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/press", s.sandboxAct(func(sb sandboxOps, r *http.Request, u telego.User) (string, error) {
		msgID, _ := strconv.Atoi(r.PostForm.Get("message"))
		if _, err := sb.Press(r.PostForm.Get("bot"), u, msgID, r.PostForm.Get("data")); err != nil {
			return "", err
		}
		return u.FirstName + " pressed the button.", nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/block", s.sandboxAct(func(sb sandboxOps, r *http.Request, u telego.User) (string, error) {
		blocked := r.PostForm.Get("action") != "unblock"
		if err := sb.Block(r.PostForm.Get("bot"), u, blocked); err != nil {
			return "", err
		}
		if blocked {
			return u.FirstName + " blocked the bot.", nil
		}
		return u.FirstName + " unblocked the bot.", nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/business-message", s.sandboxAct(func(sb sandboxOps, r *http.Request, u telego.User) (string, error) {
		if _, err := sb.BusinessMessage(r.PostForm.Get("connection"), u, r.PostForm.Get("text")); err != nil {
			return "", err
		}
		return u.FirstName + " wrote to the business account.", nil
	})).Methods(http.MethodPost)
	r.HandleFunc("/sandbox/connect", s.sandboxAct(func(sb sandboxOps, r *http.Request, u telego.User) (string, error) {
		c, err := sb.Connect(u)
		if err != nil {
			return "", err
		}
		return u.FirstName + " connected the bot to their business account (" + c.ID + ").", nil
	})).Methods(http.MethodPost)
}

func (s *Server) sandboxPage(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(w, r, "Sandbox", "sandbox")
	s.render(w, r, sandboxPage(p, sandboxPageModel(s.opts.Sandbox, parseSandboxQuery(p.Self, r.URL.Query()))))
}

// sandboxAct wraps a console sandbox action: it reads the form's user
// (fields user and name), runs act, and returns to the sandbox page with
// the outcome.
func (s *Server) sandboxAct(act func(sb sandboxOps, r *http.Request, u telego.User) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.parseForm(w, r, "/admin/sandbox") {
			return
		}
		back := backTo(r, "/admin/sandbox")
		id, _ := strconv.ParseInt(strings.TrimSpace(r.PostForm.Get("user")), 10, 64)
		u, err := s.opts.Sandbox.User(id, r.PostForm.Get("name"))
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
