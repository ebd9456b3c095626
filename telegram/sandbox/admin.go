package sandbox

import (
	"net/http"
	"strconv"

	"github.com/gorilla/mux"
	"github.com/mymmrac/telego"

	"switchyard/httpjson"
)

// AdminRoutes registers the sandbox's JSON API on r, the /admin/api
// subrouter, for programs holding the admin token (the demo):
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
func (sb *Sandbox) AdminRoutes(r *mux.Router) {
	h := func(path string, f httpjson.HandlerFunc, method string) { r.Handle(path, f).Methods(method) }
	h("/sandbox", sb.apiView, http.MethodGet)
	h("/sandbox/users/{id:[0-9]+}/start", sb.apiStart, http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/messages", sb.apiSend, http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/press", sb.apiPress, http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/block", sb.apiBlock(true), http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/unblock", sb.apiBlock(false), http.MethodPost)
	h("/sandbox/users/{id:[0-9]+}/business-message", sb.apiBusiness, http.MethodPost)
	h("/sandbox/business-connections", sb.apiConnect, http.MethodPost)
}

// decodeOptional decodes a JSON body when there is one.
func decodeOptional(r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	return httpjson.Decode(r, v)
}

// pathUser is the user the path's {id} names.
func (sb *Sandbox) pathUser(r *http.Request, firstName string) (telego.User, error) {
	id, _ := strconv.ParseInt(mux.Vars(r)["id"], 10, 64)
	return sb.User(id, firstName)
}

// messageJSON is the answer of an action that wrote a message.
type messageJSON struct {
	MessageID            int    `json:"messageId"`
	ChatID               int64  `json:"chatId"`
	BusinessConnectionID string `json:"businessConnectionId,omitempty"`
}

func writeMessage(w http.ResponseWriter, m telego.Message) {
	httpjson.Write(w, http.StatusOK, messageJSON{MessageID: m.MessageID, ChatID: m.Chat.ID, BusinessConnectionID: m.BusinessConnectionID})
}

func (sb *Sandbox) apiStart(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Payload   string `json:"payload"`
		FirstName string `json:"firstName"`
		Bot       string `json:"bot"`
	}
	if err := decodeOptional(r, &body); err != nil {
		return err
	}
	u, err := sb.pathUser(r, body.FirstName)
	if err != nil {
		return err
	}
	m, err := sb.Start(body.Bot, u, body.Payload)
	if err != nil {
		return err
	}
	writeMessage(w, m)
	return nil
}

func (sb *Sandbox) apiSend(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Text      string `json:"text"`
		FirstName string `json:"firstName"`
		Bot       string `json:"bot"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	u, err := sb.pathUser(r, body.FirstName)
	if err != nil {
		return err
	}
	m, err := sb.Send(body.Bot, u, body.Text)
	if err != nil {
		return err
	}
	writeMessage(w, m)
	return nil
}

func (sb *Sandbox) apiPress(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		MessageID int    `json:"messageId"`
		Data      string `json:"data"`
		Bot       string `json:"bot"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	u, err := sb.pathUser(r, "")
	if err != nil {
		return err
	}
	id, err := sb.Press(body.Bot, u, body.MessageID, body.Data)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"callbackQueryId": id})
	return nil
}

func (sb *Sandbox) apiBlock(blocked bool) httpjson.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		var body struct {
			Bot string `json:"bot"`
		}
		if err := decodeOptional(r, &body); err != nil {
			return err
		}
		u, err := sb.pathUser(r, "")
		if err != nil {
			return err
		}
		if err := sb.Block(body.Bot, u, blocked); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

func (sb *Sandbox) apiBusiness(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Text         string `json:"text"`
		FirstName    string `json:"firstName"`
		ConnectionID string `json:"connectionId"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	u, err := sb.pathUser(r, body.FirstName)
	if err != nil {
		return err
	}
	m, err := sb.BusinessMessage(body.ConnectionID, u, body.Text)
	if err != nil {
		return err
	}
	writeMessage(w, m)
	return nil
}

// connJSON is a business connection in the sandbox API.
type connJSON struct {
	ID       string `json:"id"`
	OwnerID  int64  `json:"ownerId"`
	Enabled  bool   `json:"enabled"`
	CanReply bool   `json:"canReply"`
}

func (sb *Sandbox) apiConnect(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		OwnerID   int64  `json:"ownerId"`
		FirstName string `json:"firstName"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	owner, err := sb.User(body.OwnerID, body.FirstName)
	if err != nil {
		return err
	}
	c, err := sb.Connect(owner)
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusCreated, connJSON{ID: c.ID, OwnerID: c.User.ID, Enabled: c.IsEnabled,
		CanReply: c.Rights != nil && c.Rights.CanReply})
	return nil
}

// viewJSON is GET /admin/api/sandbox: what each sandboxed bot's users see.
type viewJSON struct {
	Bots []botJSON `json:"bots"`
}

type botJSON struct {
	Bot      string `json:"bot"`
	ID       int64  `json:"id"`
	Username string `json:"username"`
	// Token is the bot's token on the sandbox, random per database: what a
	// program driving the sandbox as the bot (a test kit) calls it with.
	Token       string     `json:"token"`
	Connections []connJSON `json:"connections"`
	Chats       []chatJSON `json:"chats"`
}

type chatJSON struct {
	ChatID               int64         `json:"chatId"`
	UserID               int64         `json:"userId"`
	Title                string        `json:"title"`
	BusinessConnectionID string        `json:"businessConnectionId,omitempty"`
	Blocked              bool          `json:"blocked"`
	Messages             []messageView `json:"messages"`
}

type messageView struct {
	MessageID int            `json:"messageId"`
	From      string         `json:"from"`
	Text      string         `json:"text"`
	Buttons   [][]buttonJSON `json:"buttons,omitempty"`
	Deleted   bool           `json:"deleted,omitempty"`
}

type buttonJSON struct {
	Text string `json:"text"`
	Data string `json:"data,omitempty"`
	URL  string `json:"url,omitempty"`
}

func (sb *Sandbox) apiView(w http.ResponseWriter, _ *http.Request) error {
	out := viewJSON{Bots: []botJSON{}}
	for _, bt := range sb.bots {
		v, err := sb.server.Bot(bt.Token).View()
		if err != nil {
			return err
		}
		b := botJSON{Bot: bt.Name, ID: v.ID, Username: v.Username, Token: bt.Token, Connections: []connJSON{}, Chats: []chatJSON{}}
		for _, c := range v.Connections {
			b.Connections = append(b.Connections, connJSON{ID: c.ID, OwnerID: c.User.ID, Enabled: c.IsEnabled,
				CanReply: c.Rights != nil && c.Rights.CanReply})
		}
		for _, c := range v.Chats {
			cj := chatJSON{ChatID: c.ID, UserID: c.User.ID, Title: c.Title, BusinessConnectionID: c.BusinessConnectionID,
				Blocked: c.Blocked, Messages: []messageView{}}
			for _, m := range c.Messages {
				mv := messageView{MessageID: m.ID, From: string(m.Sender), Text: m.Text, Deleted: m.Deleted}
				for _, row := range m.Buttons {
					var rr []buttonJSON
					for _, btn := range row {
						rr = append(rr, buttonJSON{Text: btn.Text, Data: btn.CallbackData, URL: btn.URL})
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
