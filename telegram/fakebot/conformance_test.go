package fakebot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	ta "github.com/mymmrac/telego/telegoapi"

	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

// The shapes below are the Bot API's (https://core.telegram.org/bots/api,
// Bot API 9.4, what telego 1.6.0 implements): every field the fake sends
// must be listed, and every field not marked optional ("name?") must be
// there, with its JSON type. A field the Bot API returns only in getMe is
// listed only in getMeShape, so it fails anywhere else.

// Field types.
const (
	tInt  = "integer"
	tStr  = "string"
	tBool = "boolean"
	tTrue = "True" // a boolean that is always true when present
)

type obj map[string]any // field name → type, obj or arr

type arr struct{ of any }

var (
	userShape = obj{"id": tInt, "is_bot": tBool, "first_name": tStr, "last_name?": tStr, "username?": tStr,
		"language_code?": tStr, "is_premium?": tTrue, "added_to_attachment_menu?": tTrue}
	getMeShape = obj{"id": tInt, "is_bot": tTrue, "first_name": tStr, "last_name?": tStr, "username": tStr,
		"can_join_groups": tBool, "can_read_all_group_messages": tBool, "supports_inline_queries": tBool,
		"can_connect_to_business": tBool, "has_main_web_app": tBool, "has_topics_enabled": tBool,
		"allows_users_to_create_topics": tBool}
	chatShape = obj{"id": tInt, "type": tStr, "title?": tStr, "username?": tStr, "first_name?": tStr, "last_name?": tStr,
		"is_forum?": tTrue, "is_direct_messages?": tTrue}
	entityShape = obj{"type": tStr, "offset": tInt, "length": tInt, "url?": tStr, "user?": userShape, "language?": tStr,
		"custom_emoji_id?": tStr}
	buttonShape = obj{"text": tStr, "url?": tStr, "callback_data?": tStr, "copy_text?": obj{"text": tStr}}
	markupShape = obj{"inline_keyboard": arr{arr{buttonShape}}}
	// messageShape holds the fields of a text message.
	messageShape = obj{"message_id": tInt, "from?": userShape, "sender_business_bot?": userShape, "date": tInt,
		"business_connection_id?": tStr, "chat": chatShape, "edit_date?": tInt, "text?": tStr,
		"entities?": arr{entityShape}, "reply_markup?": markupShape}
	callbackQueryShape = obj{"id": tStr, "from": userShape, "message?": messageShape, "chat_instance": tStr, "data?": tStr}
	updateShape        = obj{"update_id": tInt, "message?": messageShape, "callback_query?": callbackQueryShape}
	webhookInfoShape   = obj{"url": tStr, "has_custom_certificate": tBool, "pending_update_count": tInt, "ip_address?": tStr,
		"last_error_date?": tInt, "last_error_message?": tStr, "last_synchronization_error_date?": tInt,
		"max_connections?": tInt, "allowed_updates?": arr{tStr}}
	chatFullInfoShape = obj{"id": tInt, "type": tStr, "title?": tStr, "username?": tStr, "first_name?": tStr,
		"last_name?": tStr, "is_forum?": tTrue, "accent_color_id": tInt, "max_reaction_count": tInt,
		"accepted_gift_types": obj{"unlimited_gifts": tBool, "limited_gifts": tBool, "unique_gifts": tBool,
			"premium_subscription": tBool, "gifts_from_channels": tBool}}
	rightsShape = func() obj {
		o := obj{}
		for _, r := range []string{"can_reply", "can_read_messages", "can_delete_sent_messages", "can_delete_all_messages",
			"can_edit_name", "can_edit_bio", "can_edit_profile_photo", "can_edit_username", "can_change_gift_settings",
			"can_view_gifts_and_stars", "can_convert_gifts_to_stars", "can_transfer_and_upgrade_gifts",
			"can_transfer_stars", "can_manage_stories"} {
			o[r+"?"] = tTrue
		}
		return o
	}()
	businessConnectionShape = obj{"id": tStr, "user": userShape, "user_chat_id": tInt, "date": tInt, "rights?": rightsShape,
		"is_enabled": tBool}
	botCommandShape = obj{"command": tStr, "description": tStr}
	okShape         = func(result any) obj { return obj{"ok": tTrue, "result": result, "description?": tStr} }
	errorShape      = obj{"ok": tBool, "error_code": tInt, "description": tStr,
		"parameters?": obj{"retry_after?": tInt, "migrate_to_chat_id?": tInt}}
)

// checkShape reports every way v (decoded JSON) differs from shape.
func checkShape(path string, v, shape any) []string {
	switch s := shape.(type) {
	case string:
		ok := false
		switch s {
		case tInt:
			n, isNum := v.(float64)
			ok = isNum && n == math.Trunc(n)
		case tStr:
			_, ok = v.(string)
		case tBool:
			_, ok = v.(bool)
		case tTrue:
			ok = v == true
		}
		if !ok {
			return []string{fmt.Sprintf("%s = %v, want %s", path, v, s)}
		}
		return nil
	case arr:
		list, ok := v.([]any)
		if !ok {
			return []string{fmt.Sprintf("%s = %v, want an array", path, v)}
		}
		var bad []string
		for i, x := range list {
			bad = append(bad, checkShape(fmt.Sprintf("%s[%d]", path, i), x, s.of)...)
		}
		return bad
	case obj:
		m, ok := v.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s = %v, want an object", path, v)}
		}
		var bad []string
		for key, fieldShape := range s {
			name, optional := strings.CutSuffix(key, "?")
			x, present := m[name]
			switch {
			case !present && !optional:
				bad = append(bad, fmt.Sprintf("%s.%s is missing", path, name))
			case present:
				bad = append(bad, checkShape(path+"."+name, x, fieldShape)...)
			}
		}
		for name := range m {
			if _, listed := s[name]; !listed {
				if _, listed := s[name+"?"]; !listed {
					bad = append(bad, fmt.Sprintf("%s.%s is not a field the Bot API sends here", path, name))
				}
			}
		}
		slices.Sort(bad)
		return bad
	}
	panic(fmt.Sprintf("bad shape %T", shape))
}

// confEnv is a fake with one bot whose users and chats the cases prepare.
type confEnv struct {
	t      *testing.T
	fake   *fakebot.Server
	base   string
	botID  int64
	token  string
	fb     *fakebot.Bot
	bot    *telego.Bot // the project's own client
	nextID int64
	hook   string // a webhook that takes every update
}

func newConfEnv(t *testing.T, opts fakebot.Opts, botID int64) *confEnv {
	t.Helper()
	fake, base := start(t, opts)
	token := fakebot.Token(botID)
	bot, err := telegram.NewBot(token, base)
	if err != nil {
		t.Fatal(err)
	}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	t.Cleanup(hook.Close)
	return &confEnv{t: t, fake: fake, base: base, botID: botID, token: token, fb: fake.Bot(token), bot: bot,
		nextID: 7000, hook: hook.URL}
}

// newUser is a user who started the bot.
func (e *confEnv) newUser() telego.User {
	e.t.Helper()
	e.nextID++
	u := telego.User{ID: e.nextID, FirstName: "User", LastName: fmt.Sprint(e.nextID), LanguageCode: "en"}
	if _, err := e.fb.Start(u, ""); err != nil {
		e.t.Fatal(err)
	}
	return u
}

// sent is a message the bot sent to a new user, with a button.
func (e *confEnv) sent() (telego.User, *telego.Message) {
	e.t.Helper()
	u := e.newUser()
	m, err := e.bot.SendMessage(ctxFor(e.t, 5*time.Second), &telego.SendMessageParams{
		ChatID: telego.ChatID{ID: u.ID}, Text: "Pick one", ReplyMarkup: keyboard([]telego.InlineKeyboardButton{button("Yes", "yes")})})
	if err != nil {
		e.t.Fatal(err)
	}
	return u, m
}

// raw calls method with params as JSON, as telego does, and returns the
// HTTP status, the decoded body and the body itself.
func (e *confEnv) raw(token, method string, params map[string]any) (int, map[string]any, []byte) {
	e.t.Helper()
	body, _ := json.Marshal(params)
	res, err := http.Post(e.base+"/bot"+token+"/"+method, "application/json", bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		e.t.Fatalf("%s: not JSON: %d %s", method, res.StatusCode, raw)
	}
	return res.StatusCode, m, raw
}

// TestConformance calls each method the project uses, through raw HTTP for
// the exact shape of the answer and through the project's telego client for
// what it decodes, as the Bot API documents both.
func TestConformance(t *testing.T) {
	t.Parallel()

	type success struct {
		method      string
		params      func(e *confEnv) map[string]any
		result      any
		description string // next to the result (the webhook methods)
		// viaTelego makes the same call through the project's client,
		// which must decode the answer.
		viaTelego func(ctx context.Context, e *confEnv) error
	}
	none := func(*confEnv) map[string]any { return map[string]any{} }
	successes := []success{
		{"getMe", none, getMeShape, "", func(ctx context.Context, e *confEnv) error {
			me, err := e.bot.GetMe(ctx)
			if err == nil && (me.ID != e.botID || !me.CanConnectToBusiness || !me.CanJoinGroups || me.SupportsInlineQueries) {
				err = fmt.Errorf("getMe = %+v", me)
			}
			return err
		}},
		{"getUpdates", func(e *confEnv) map[string]any {
			e.newUser()
			return map[string]any{"timeout": 0}
		}, arr{updateShape}, "", func(ctx context.Context, e *confEnv) error {
			u, m := e.sent()
			if _, err := e.fb.Press(u, m.MessageID, "yes"); err != nil {
				return err
			}
			ups, err := e.bot.GetUpdates(ctx, &telego.GetUpdatesParams{})
			if err == nil && (len(ups) == 0 || ups[len(ups)-1].CallbackQuery == nil) {
				err = fmt.Errorf("updates = %+v", ups)
			}
			return err
		}},
		{"sendMessage", func(e *confEnv) map[string]any {
			u := e.newUser()
			return map[string]any{"chat_id": u.ID, "text": "<b>Hi</b> /help", "parse_mode": "HTML",
				"reply_markup": keyboard([]telego.InlineKeyboardButton{button("Yes", "yes")})}
		}, messageShape, "", func(ctx context.Context, e *confEnv) error {
			u := e.newUser()
			m, err := e.bot.SendMessage(ctx, &telego.SendMessageParams{ChatID: telego.ChatID{ID: u.ID}, Text: "*Hi*", ParseMode: "MarkdownV2"})
			if err == nil && (m.Text != "Hi" || len(m.Entities) != 1 || m.From == nil || m.From.CanJoinGroups) {
				err = fmt.Errorf("message %q with %+v from %+v", m.Text, m.Entities, m.From)
			}
			return err
		}},
		{"editMessageText", func(e *confEnv) map[string]any {
			u, m := e.sent()
			return map[string]any{"chat_id": u.ID, "message_id": m.MessageID, "text": "Done"}
		}, messageShape, "", func(ctx context.Context, e *confEnv) error {
			u, m := e.sent()
			edited, err := e.bot.EditMessageText(ctx, &telego.EditMessageTextParams{ChatID: telego.ChatID{ID: u.ID},
				MessageID: m.MessageID, Text: "<i>Done</i>", ParseMode: "HTML"})
			if err == nil && (edited.Text != "Done" || edited.EditDate == 0) {
				err = fmt.Errorf("edited %q, edit date %d", edited.Text, edited.EditDate)
			}
			return err
		}},
		{"editMessageReplyMarkup", func(e *confEnv) map[string]any {
			u, m := e.sent()
			return map[string]any{"chat_id": u.ID, "message_id": m.MessageID}
		}, messageShape, "", func(ctx context.Context, e *confEnv) error {
			u, m := e.sent()
			edited, err := e.bot.EditMessageReplyMarkup(ctx, &telego.EditMessageReplyMarkupParams{ChatID: telego.ChatID{ID: u.ID},
				MessageID: m.MessageID, ReplyMarkup: keyboard([]telego.InlineKeyboardButton{button("No", "no")})})
			if err == nil && edited.ReplyMarkup == nil {
				err = errors.New("the edited message has no keyboard")
			}
			return err
		}},
		{"answerCallbackQuery", func(e *confEnv) map[string]any {
			u, m := e.sent()
			id, err := e.fb.Press(u, m.MessageID, "yes")
			if err != nil {
				e.t.Fatal(err)
			}
			return map[string]any{"callback_query_id": id, "text": "Saved"}
		}, tTrue, "", func(ctx context.Context, e *confEnv) error {
			u, m := e.sent()
			id, err := e.fb.Press(u, m.MessageID, "yes")
			if err != nil {
				return err
			}
			return e.bot.AnswerCallbackQuery(ctx, &telego.AnswerCallbackQueryParams{CallbackQueryID: id})
		}},
		{"sendChatAction", func(e *confEnv) map[string]any {
			return map[string]any{"chat_id": e.newUser().ID, "action": "typing"}
		}, tTrue, "", func(ctx context.Context, e *confEnv) error {
			return e.bot.SendChatAction(ctx, &telego.SendChatActionParams{ChatID: telego.ChatID{ID: e.newUser().ID}, Action: "typing"})
		}},
		{"deleteMessage", func(e *confEnv) map[string]any {
			u, m := e.sent()
			return map[string]any{"chat_id": u.ID, "message_id": m.MessageID}
		}, tTrue, "", func(ctx context.Context, e *confEnv) error {
			u, m := e.sent()
			return e.bot.DeleteMessage(ctx, &telego.DeleteMessageParams{ChatID: telego.ChatID{ID: u.ID}, MessageID: m.MessageID})
		}},
		{"getChat", func(e *confEnv) map[string]any {
			return map[string]any{"chat_id": e.newUser().ID}
		}, chatFullInfoShape, "", func(ctx context.Context, e *confEnv) error {
			u := e.newUser()
			c, err := e.bot.GetChat(ctx, &telego.GetChatParams{ChatID: telego.ChatID{ID: u.ID}})
			if err == nil && (c.ID != u.ID || c.Type != "private") {
				err = fmt.Errorf("chat = %+v", c)
			}
			return err
		}},
		{"getBusinessConnection", func(e *confEnv) map[string]any {
			conn, err := e.fb.ConnectBusiness(telego.User{ID: 900, FirstName: "Shop"}, telego.BusinessBotRights{CanReply: true})
			if err != nil {
				e.t.Fatal(err)
			}
			return map[string]any{"business_connection_id": conn.ID}
		}, businessConnectionShape, "", func(ctx context.Context, e *confEnv) error {
			conn, err := e.fb.ConnectBusiness(telego.User{ID: 901, FirstName: "Shop"}, telego.BusinessBotRights{CanReply: true})
			if err != nil {
				return err
			}
			got, err := e.bot.GetBusinessConnection(ctx, &telego.GetBusinessConnectionParams{BusinessConnectionID: conn.ID})
			if err == nil && (got.ID != conn.ID || got.Rights == nil || !got.Rights.CanReply) {
				err = fmt.Errorf("connection = %+v", got)
			}
			return err
		}},
		{"setMyCommands", func(*confEnv) map[string]any {
			return map[string]any{"commands": []telego.BotCommand{{Command: "start", Description: "Start"}}}
		}, tTrue, "", func(ctx context.Context, e *confEnv) error {
			return e.bot.SetMyCommands(ctx, &telego.SetMyCommandsParams{Commands: []telego.BotCommand{{Command: "help", Description: "Help"}}})
		}},
		{"getMyCommands", none, arr{botCommandShape}, "", func(ctx context.Context, e *confEnv) error {
			_, err := e.bot.GetMyCommands(ctx, nil)
			return err
		}},
		{"deleteMyCommands", none, tTrue, "", func(ctx context.Context, e *confEnv) error {
			return e.bot.DeleteMyCommands(ctx, nil)
		}},
		// The webhook methods last: a webhook set turns getUpdates off.
		{"setWebhook", func(e *confEnv) map[string]any {
			return map[string]any{"url": e.hook, "secret_token": "s3cret", "allowed_updates": []string{"message"}}
		}, tTrue, "Webhook was set", func(ctx context.Context, e *confEnv) error {
			return e.bot.SetWebhook(ctx, &telego.SetWebhookParams{URL: e.hook + "/other", SecretToken: "s3cret"})
		}},
		{"getWebhookInfo", none, webhookInfoShape, "", func(ctx context.Context, e *confEnv) error {
			info, err := e.bot.GetWebhookInfo(ctx)
			if err == nil && (info.URL != e.hook+"/other" || info.MaxConnections != 40) {
				err = fmt.Errorf("info = %+v", info)
			}
			return err
		}},
		{"deleteWebhook", none, tTrue, "Webhook was deleted", func(ctx context.Context, e *confEnv) error {
			if err := e.bot.SetWebhook(ctx, &telego.SetWebhookParams{URL: e.hook}); err != nil {
				return err
			}
			return e.bot.DeleteWebhook(ctx, &telego.DeleteWebhookParams{})
		}},
	}

	t.Run("every method the fake implements has a success case", func(t *testing.T) {
		var covered []string
		for _, c := range successes {
			covered = append(covered, c.method)
		}
		for _, m := range fakebot.Methods() {
			if !slices.Contains(covered, m) {
				t.Errorf("%s has no conformance case", m)
			}
		}
	})

	t.Run("successes", func(t *testing.T) {
		e := newConfEnv(t, fakebot.Opts{}, 90)
		for _, c := range successes {
			t.Run(c.method+" answers the documented shape and telego decodes it", func(t *testing.T) {
				status, body, raw := e.raw(e.token, c.method, c.params(e))
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, raw)
				}
				for _, bad := range checkShape(c.method, body, okShape(c.result)) {
					t.Error(bad)
				}
				if d, _ := body["description"].(string); d != c.description {
					t.Errorf("description = %q, want %q", d, c.description)
				}
				if err := c.viaTelego(ctxFor(t, 5*time.Second), e); err != nil {
					t.Errorf("through telego: %v", err)
				}
			})
		}
	})

	t.Run("a User outside getMe carries none of getMe's fields", func(t *testing.T) {
		e := newConfEnv(t, fakebot.Opts{}, 91)
		u, m := e.sent()
		if err := e.fb.Block(u); err != nil { // my_chat_member names the bot
			t.Fatal(err)
		}
		_, _, raw := e.raw(e.token, "getUpdates", map[string]any{"allowed_updates": []string{"message", "my_chat_member"}})
		for _, field := range []string{"can_join_groups", "can_connect_to_business", "can_read_all_group_messages",
			"supports_inline_queries", "has_main_web_app", "has_topics_enabled", "allows_users_to_create_topics"} {
			if bytes.Contains(raw, []byte(field)) {
				t.Errorf("getUpdates carries %s: %s", field, raw)
			}
		}
		if !bytes.Contains(raw, []byte(`"new_chat_member":{"status":"kicked","user":{"id":91,"is_bot":true,`)) {
			t.Errorf("no my_chat_member naming the bot: %s", raw)
		}
		if m.From == nil || m.From.ID != 91 || m.From.CanJoinGroups || m.From.CanConnectToBusiness {
			t.Errorf("the bot's message is from %+v", m.From)
		}
		_, body, _ := e.raw(e.token, "getMe", nil)
		if r, _ := body["result"].(map[string]any); r["supports_inline_queries"] != false || r["has_main_web_app"] != false {
			t.Errorf("getMe leaves out its false fields: %v", r)
		}
	})

	type failure struct {
		name       string
		method     string
		prepare    func(e *confEnv) (token string, params map[string]any)
		code       int
		desc       string
		retryAfter int
	}
	mine := func(params map[string]any) func(*confEnv) (string, map[string]any) {
		return func(e *confEnv) (string, map[string]any) { return e.token, params }
	}
	blocked := func(method string, params func(u telego.User, m *telego.Message) map[string]any) failure {
		return failure{"403 to a user who blocked the bot", method, func(e *confEnv) (string, map[string]any) {
			u, m := e.sent()
			if err := e.fb.Block(u); err != nil {
				e.t.Fatal(err)
			}
			return e.token, params(u, m)
		}, 403, "Forbidden: bot was blocked by the user", 0}
	}
	failures := []failure{
		{"404 for a method the Bot API does not have", "sendPigeon", mine(map[string]any{"chat_id": 1}), 404, "Not Found", 0},
		{"400 for an empty text", "sendMessage", func(e *confEnv) (string, map[string]any) {
			return e.token, map[string]any{"chat_id": e.newUser().ID, "text": ""}
		}, 400, "Bad Request: message text is empty", 0},
		{"400 for a chat that does not exist", "sendMessage", mine(map[string]any{"chat_id": 123456789, "text": "hi"}),
			400, "Bad Request: chat not found", 0},
		{"400 for markup Telegram cannot parse", "sendMessage", func(e *confEnv) (string, map[string]any) {
			return e.token, map[string]any{"chat_id": e.newUser().ID, "text": "<b>hi", "parse_mode": "HTML"}
		}, 400, `Bad Request: can't parse entities: Can't find end tag corresponding to start tag "b"`, 0},
		blocked("sendMessage", func(u telego.User, _ *telego.Message) map[string]any {
			return map[string]any{"chat_id": u.ID, "text": "hi"}
		}),
		blocked("sendChatAction", func(u telego.User, _ *telego.Message) map[string]any {
			return map[string]any{"chat_id": u.ID, "action": "typing"}
		}),
		blocked("editMessageText", func(u telego.User, m *telego.Message) map[string]any {
			return map[string]any{"chat_id": u.ID, "message_id": m.MessageID, "text": "x"}
		}),
		blocked("editMessageReplyMarkup", func(u telego.User, m *telego.Message) map[string]any {
			return map[string]any{"chat_id": u.ID, "message_id": m.MessageID}
		}),
		{"400 for a message that is not there", "editMessageText", func(e *confEnv) (string, map[string]any) {
			return e.token, map[string]any{"chat_id": e.newUser().ID, "message_id": 999, "text": "x"}
		}, 400, "Bad Request: message to edit not found", 0},
		{"400 for an edit that changes nothing", "editMessageReplyMarkup", func(e *confEnv) (string, map[string]any) {
			u, m := e.sent()
			return e.token, map[string]any{"chat_id": u.ID, "message_id": m.MessageID,
				"reply_markup": keyboard([]telego.InlineKeyboardButton{button("Yes", "yes")})}
		}, 400, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message", 0},
		{"400 for a spent callback query", "answerCallbackQuery", mine(map[string]any{"callback_query_id": "42"}),
			400, "Bad Request: query is too old and response timeout expired or query ID is invalid", 0},
		{"400 for a chat the bot does not know", "getChat", mine(map[string]any{"chat_id": 123456789}),
			400, "Bad Request: chat not found", 0},
		{"400 for a message to delete that is not there", "deleteMessage", func(e *confEnv) (string, map[string]any) {
			return e.token, map[string]any{"chat_id": e.newUser().ID, "message_id": 999}
		}, 400, "Bad Request: message to delete not found", 0},
		{"400 for a webhook that is not an HTTP URL", "setWebhook", mine(map[string]any{"url": "ftp://example.com/hook"}),
			400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook", 0},
		{"409 for getUpdates while a webhook is set", "getUpdates", func(e *confEnv) (string, map[string]any) {
			if status, _, raw := e.raw(e.token, "setWebhook", map[string]any{"url": e.hook}); status != 200 {
				e.t.Fatalf("setWebhook: %s", raw)
			}
			return e.token, map[string]any{}
		}, 409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first", 0},
	}
	// 401 for a wrong token, whatever the method.
	for _, m := range append(fakebot.Methods(), "sendPigeon") {
		failures = append(failures, failure{"401 for a token that is not the bot's", m, func(e *confEnv) (string, map[string]any) {
			return fmt.Sprintf("%d:%s", e.botID, strings.Repeat("x", 35)), map[string]any{}
		}, 401, "Unauthorized", 0})
	}

	// check makes the failing call twice: raw, for the exact answer, and
	// through telego's own caller, which must read the same error.
	check := func(t *testing.T, e *confEnv, c failure) {
		t.Helper()
		token, params := c.prepare(e)
		status, body, raw := e.raw(token, c.method, params)
		for _, bad := range checkShape(c.method, body, errorShape) {
			t.Error(bad)
		}
		if status != c.code || body["ok"] != false || body["error_code"] != float64(c.code) || body["description"] != c.desc {
			t.Errorf("answer %d %s, want %d %q", status, raw, c.code, c.desc)
		}
		p, _ := body["parameters"].(map[string]any)
		if c.retryAfter > 0 && (p == nil || p["retry_after"] != float64(c.retryAfter)) || c.retryAfter == 0 && p != nil {
			t.Errorf("parameters = %v, want retry_after %d", p, c.retryAfter)
		}
		token, params = c.prepare(e)
		reqBody, _ := json.Marshal(params)
		resp, err := ta.DefaultHTTPCaller.Call(ctxFor(t, 5*time.Second), e.base+"/bot"+token+"/"+c.method,
			&ta.RequestData{ContentType: ta.ContentTypeJSON, BodyRaw: reqBody})
		if err != nil {
			t.Fatalf("telego's caller: %v", err)
		}
		if resp.Ok || resp.Error == nil || resp.ErrorCode != c.code || resp.Description != c.desc ||
			c.retryAfter > 0 && (resp.Parameters == nil || resp.Parameters.RetryAfter != c.retryAfter) {
			t.Errorf("telego decodes %s", resp)
		}
	}

	t.Run("errors", func(t *testing.T) {
		e := newConfEnv(t, fakebot.Opts{}, 92)
		for _, c := range failures {
			t.Run(c.method+": "+c.name, func(t *testing.T) { check(t, e, c) })
		}
	})

	t.Run("sendMessage: 429 with parameters.retry_after over Telegram's limits", func(t *testing.T) {
		clock := &manualClock{now: time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)}
		e := newConfEnv(t, fakebot.Opts{Limits: &telegram.Limits{}, LimitSlack: -1, Now: clock.Now}, 93)
		u := e.newUser()
		check(t, e, failure{"429", "sendMessage", func(e *confEnv) (string, map[string]any) {
			for range 3 {
				e.raw(e.token, "sendMessage", map[string]any{"chat_id": u.ID, "text": "burst"})
			}
			return e.token, map[string]any{"chat_id": u.ID, "text": "over"}
		}, 429, "Too Many Requests: retry after 1", 1})
		// And the project's client classifies it as Telegram's 429.
		_, err := send(ctxFor(t, 5*time.Second), e.bot, u.ID, "over again")
		var apiError *ta.Error
		if f := telegram.Classify(err); !errors.As(err, &apiError) || f.Class != telegram.ClassRetryAfter || f.RetryAfter != time.Second {
			t.Fatalf("Classify(%v) = %+v", err, f)
		}
	})
}
