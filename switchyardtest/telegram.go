package switchyardtest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"switchyard/omni"
)

// Bot names one of the instance's two bots on the sandbox.
type Bot string

// The bots.
const (
	// OnboardingBot is the onboarding bot (bot/): /start, buttons, DMs.
	OnboardingBot Bot = "onboarding"
	// ChatBot is the chat platform's business-inbox bot (omni/).
	ChatBot Bot = "chat"
)

// User is a Telegram user on the sandbox: what they do reaches the bots as
// the updates Telegram would send.
type User struct {
	ID        int64
	FirstName string
	app       *App
}

// TelegramUser is the sandbox's Telegram user id, called firstName.
func (a *App) TelegramUser(id int64, firstName string) *User {
	return &User{ID: id, FirstName: firstName, app: a}
}

// TelegramID is the user's id as the /bot/* contract and the backend
// write it.
func (u *User) TelegramID() string { return strconv.FormatInt(u.ID, 10) }

func (u *User) path(action string) string {
	return "/admin/api/sandbox/users/" + strconv.FormatInt(u.ID, 10) + "/" + action
}

// Start opens the onboarding bot: /start with payload (a leader's referral
// code, a telegramConnect=… token, or "").
func (u *User) Start(t T, payload string) {
	t.Helper()
	u.app.Do(t, http.MethodPost, u.path("start"), map[string]string{"payload": payload, "firstName": u.FirstName}, nil)
}

// Write sends text to the onboarding bot.
func (u *User) Write(t T, text string) {
	t.Helper()
	u.app.Do(t, http.MethodPost, u.path("messages"), map[string]string{"text": text, "firstName": u.FirstName}, nil)
}

// Press presses the inline button labelled text (or whose text contains
// it) on the onboarding bot's latest message that has one.
func (u *User) Press(t T, text string) {
	t.Helper()
	msgs := u.Chat(t, OnboardingBot)
	for i := len(msgs) - 1; i >= 0; i-- {
		if b, ok := msgs[i].Button(text); ok && b.Data != "" {
			u.app.Do(t, http.MethodPost, u.path("press"), map[string]any{"data": b.Data, "messageId": msgs[i].ID}, nil)
			return
		}
	}
	t.Fatalf("switchyardtest: user %d has no button %q from the onboarding bot; the chat: %s", u.ID, text, Transcript(msgs))
}

// Block blocks the onboarding bot: its messages to the user fail with 403.
func (u *User) Block(t T) {
	t.Helper()
	u.app.Do(t, http.MethodPost, u.path("block"), map[string]string{"bot": string(OnboardingBot)}, nil)
}

// Unblock unblocks the onboarding bot.
func (u *User) Unblock(t T) {
	t.Helper()
	u.app.Do(t, http.MethodPost, u.path("unblock"), map[string]string{"bot": string(OnboardingBot)}, nil)
}

// Connection is a business account connected to the chat bot: its
// customers' messages reach the chat platform's inbox.
type Connection struct {
	ID       string `json:"id"`
	OwnerID  int64  `json:"ownerId"`
	Enabled  bool   `json:"enabled"`
	CanReply bool   `json:"canReply"`
}

// ConnectBusiness connects owner's business account to the chat bot, with
// the right to reply, and returns once the chat platform has applied the
// connection: a customer's message written then is answered at once (one
// taken before its connection waits for it).
func (a *App) ConnectBusiness(t T, owner *User) Connection {
	t.Helper()
	var c Connection
	a.Do(t, http.MethodPost, "/admin/api/sandbox/business-connections", map[string]any{"ownerId": owner.ID, "firstName": owner.FirstName}, &c)
	a.WaitFor(t, inboxSettled())
	return c
}

// inboxSettled holds once the chat bot's updates are all delivered to the
// instance (the sandbox has none pending for its webhook) and the chat
// platform has applied every one it took (receiver.flow has none ready or
// in hand).
func inboxSettled() Condition {
	return Condition{
		What: "the chat bot's updates delivered and applied",
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			var info struct {
				Result struct {
					URL     string `json:"url"`
					Pending int    `json:"pending_update_count"`
				} `json:"result"`
			}
			if err := a.Get(ctx, "/sandbox/telegram/bot"+a.SandboxBotTokens.Chat+"/getWebhookInfo", &info); err != nil {
				return false, "", err
			}
			if info.Result.URL == "" || info.Result.Pending > 0 {
				return false, fmt.Sprintf("webhook %q, %d updates pending", info.Result.URL, info.Result.Pending), nil
			}
			q, err := a.queue(ctx, omni.QueueReceiverFlow)
			if err != nil {
				return false, "", err
			}
			return q.Ready+q.InFlight == 0, fmt.Sprintf("%s: %d ready, %d in hand", omni.QueueReceiverFlow, q.Ready, q.InFlight), nil
		},
	}
}

// WriteToBusiness is the user, as a customer, writing text to the business
// account of c.
func (u *User) WriteToBusiness(t T, c Connection, text string) {
	t.Helper()
	u.app.Do(t, http.MethodPost, u.path("business-message"), map[string]string{"text": text, "firstName": u.FirstName, "connectionId": c.ID}, nil)
}

// Message is one message of a chat on the sandbox.
type Message struct {
	ID      int        `json:"messageId"`
	From    string     `json:"from"` // "user" or "bot"
	Text    string     `json:"text"`
	Buttons [][]Button `json:"buttons,omitempty"`
	Deleted bool       `json:"deleted,omitempty"`
}

// Button is an inline button of a message.
type Button struct {
	Text string `json:"text"`
	Data string `json:"data,omitempty"`
	URL  string `json:"url,omitempty"`
}

// Button is the message's button labelled text, or whose label contains it.
func (m Message) Button(text string) (Button, bool) {
	for _, row := range m.Buttons {
		for _, b := range row {
			if b.Text == text || strings.Contains(b.Text, text) {
				return b, true
			}
		}
	}
	return Button{}, false
}

// Transcript is msgs as lines "bot: …", for a failure message.
func Transcript(msgs []Message) string {
	if len(msgs) == 0 {
		return "(no messages)"
	}
	var b strings.Builder
	for _, m := range msgs {
		fmt.Fprintf(&b, "\n  %s: %q", m.From, m.Text)
	}
	return b.String()
}

// sandboxView is GET /admin/api/sandbox, the fields the kit reads.
type sandboxView struct {
	Bots []struct {
		Bot   Bot `json:"bot"`
		Chats []struct {
			ChatID               int64     `json:"chatId"`
			UserID               int64     `json:"userId"`
			BusinessConnectionID string    `json:"businessConnectionId"`
			Messages             []Message `json:"messages"`
		} `json:"chats"`
	} `json:"bots"`
}

// chat is the user's private chat with bot (a customer's chat with a
// business account for ChatBot).
func (u *User) chat(ctx context.Context, bot Bot) ([]Message, error) {
	var v sandboxView
	if err := u.app.Get(ctx, "/admin/api/sandbox", &v); err != nil {
		return nil, err
	}
	var msgs []Message
	for _, b := range v.Bots {
		if b.Bot != bot {
			continue
		}
		for _, c := range b.Chats {
			if c.UserID == u.ID && c.ChatID == u.ID {
				msgs = append(msgs, c.Messages...)
			}
		}
	}
	return msgs, nil
}

// Chat is what the user's chat with bot holds, oldest first: the user's
// messages and the bot's.
func (u *User) Chat(t T, bot Bot) []Message {
	t.Helper()
	msgs, err := u.chat(t.Context(), bot)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	return msgs
}

// BotSaid holds once the onboarding bot has sent the user a message
// containing text.
func BotSaid(u *User, text string) Condition {
	return botSaid(OnboardingBot, u, text)
}

// CustomerGot holds once the user, as a customer of a business account,
// has a message from it containing text (an operator's reply or the
// automatic acknowledgement).
func CustomerGot(u *User, text string) Condition {
	return botSaid(ChatBot, u, text)
}

func botSaid(bot Bot, u *User, text string) Condition {
	return Condition{
		What: fmt.Sprintf("the %s bot to say %q to user %d", bot, text, u.ID),
		Check: func(ctx context.Context, _ *App) (bool, string, error) {
			msgs, err := u.chat(ctx, bot)
			if err != nil {
				return false, "", err
			}
			for _, m := range msgs {
				if m.From == "bot" && strings.Contains(m.Text, text) {
					return true, "", nil
				}
			}
			return false, "the chat:" + Transcript(msgs), nil
		},
	}
}
