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
	View(bot string) (fakebot.BotView, error)
	User(id int64, firstName string) (telego.User, error)
	Start(bot string, u telego.User, payload string) (telego.Message, error)
	Send(bot string, u telego.User, text string) (telego.Message, error)
	Press(bot string, u telego.User, messageID int, data string) (string, error)
	Block(bot string, u telego.User, blocked bool) error
	Connect(owner telego.User) (telego.BusinessConnection, error)
	BusinessMessage(connID string, customer telego.User, text string) (telego.Message, error)
}

// sandboxModel is the Sandbox page: each sandboxed bot with its chats.
type sandboxModel struct {
	Bots        []sandboxBot
	Connections []sandboxConn
	ChatBot     bool
	Onboarding  bool
}

type sandboxBot struct {
	Role     string // sandbox.BotOnboarding or sandbox.BotChat
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
	Text, Data, URL string
}

// sandboxLabels name the sandbox's bots on the page.
var sandboxLabels = map[string]string{
	sandbox.BotOnboarding: "Onboarding bot",
	sandbox.BotChat:       "Chat platform bot (Telegram Business)",
}

func sandboxPageModel(sb sandboxOps) sandboxModel {
	var m sandboxModel
	for _, bt := range sb.Bots() {
		switch bt.Name {
		case sandbox.BotOnboarding:
			m.Onboarding = true
		case sandbox.BotChat:
			m.ChatBot = true
		}
		v, err := sb.View(bt.Name)
		if err != nil {
			continue
		}
		b := sandboxBot{Role: bt.Name, Label: sandboxLabels[bt.Name], Username: v.Username, Pending: v.PendingUpdates}
		for _, c := range v.Chats {
			b.Chats = append(b.Chats, toSandboxChat(bt.Name, c))
		}
		if bt.Name == sandbox.BotChat {
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
	s.render(w, r, sandboxPage(s.newPage(w, r, "Sandbox", "sandbox"), sandboxPageModel(s.opts.Sandbox)))
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

// sandboxAnchorHref is the sandbox page at one chat.
func sandboxAnchorHref(anchor string) string { return "/admin/sandbox#" + url.PathEscape(anchor) }
