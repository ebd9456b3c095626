package fakebot_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram/fakebot"
)

func TestMessages(t *testing.T) {
	t.Parallel()

	t.Run("a DM with an inline keyboard is pressed, answered and edited as the user sees it", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 30)
		fb := fake.Bot(fakebot.Token(30))
		ctx := ctxFor(t, 5*time.Second)
		if _, err := fb.Start(alice, ""); err != nil {
			t.Fatal(err)
		}
		sent, err := bot.SendMessage(ctx, &telego.SendMessageParams{
			ChatID: telego.ChatID{ID: alice.ID}, Text: "<b>Welcome</b>", ParseMode: telego.ModeHTML,
			ReplyMarkup: keyboard([]telego.InlineKeyboardButton{button("Yes", "ok:yes"), button("No", "ok:no")}),
		})
		if err != nil {
			t.Fatal(err)
		}
		if sent.From.ID != 30 || sent.Chat.ID != alice.ID || sent.ReplyMarkup == nil || sent.MessageID != 2 {
			t.Fatalf("sent = %+v", sent)
		}
		if _, err := fb.Press(alice, sent.MessageID, "ok:maybe"); !errors.Is(err, fakebot.ErrNoButton) {
			t.Fatalf("pressing a button that is not there: %v", err)
		}
		queryID, err := fb.Press(alice, sent.MessageID, "ok:yes")
		if err != nil {
			t.Fatal(err)
		}
		offset := 0
		ups := poll(t, bot, &offset)
		if len(ups) != 2 || ups[1].CallbackQuery == nil {
			t.Fatalf("updates = %+v", ups)
		}
		cq := ups[1].CallbackQuery
		msg, ok := cq.Message.(*telego.Message)
		if cq.ID != queryID || cq.Data != "ok:yes" || cq.From.ID != alice.ID || !ok || msg.MessageID != sent.MessageID {
			t.Fatalf("callback query = %+v", cq)
		}
		if err := bot.AnswerCallbackQuery(ctx, &telego.AnswerCallbackQueryParams{CallbackQueryID: queryID, Text: "Saved"}); err != nil {
			t.Fatal(err)
		}
		err = bot.AnswerCallbackQuery(ctx, &telego.AnswerCallbackQueryParams{CallbackQueryID: queryID})
		wantAPIError(t, err, 400, "Bad Request: query is too old and response timeout expired or query ID is invalid")

		edited, err := bot.EditMessageReplyMarkup(ctx, &telego.EditMessageReplyMarkupParams{
			ChatID: telego.ChatID{ID: alice.ID}, MessageID: sent.MessageID,
		})
		if err != nil {
			t.Fatal(err)
		}
		if edited.ReplyMarkup != nil || edited.EditDate == 0 {
			t.Fatalf("edited = %+v", edited)
		}
		_, err = bot.EditMessageReplyMarkup(ctx, &telego.EditMessageReplyMarkupParams{ChatID: telego.ChatID{ID: alice.ID}, MessageID: sent.MessageID})
		wantAPIError(t, err, 400, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
		if _, err := bot.EditMessageText(ctx, &telego.EditMessageTextParams{
			ChatID: telego.ChatID{ID: alice.ID}, MessageID: sent.MessageID, Text: "Thanks!",
		}); err != nil {
			t.Fatal(err)
		}
		_, err = bot.EditMessageText(ctx, &telego.EditMessageTextParams{ChatID: telego.ChatID{ID: alice.ID}, MessageID: 1, Text: "x"})
		wantAPIError(t, err, 400, "Bad Request: message can't be edited")

		chat, ok := fb.Chat(alice.ID)
		if !ok || len(chat.Messages) != 2 || chat.Title != "Alice" {
			t.Fatalf("chat = %+v", chat)
		}
		dm := chat.Messages[1]
		if chat.Messages[0].Sender != fakebot.SenderUser || chat.Messages[0].Text != "/start" ||
			dm.Sender != fakebot.SenderBot || dm.Text != "Thanks!" || dm.ParseMode != "" || dm.Buttons != nil ||
			dm.Edited.IsZero() || len(dm.CallbackAnswers) != 1 || dm.CallbackAnswers[0] != "Saved" {
			t.Fatalf("the user sees %+v", chat.Messages)
		}
	})

	t.Run("sends to users who cannot receive them fail as Telegram fails them", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 31)
		fb := fake.Bot(fakebot.Token(31))
		ctx := ctxFor(t, 5*time.Second)

		_, err := send(ctx, bot, 999_999, "hi")
		wantAPIError(t, err, 400, "Bad Request: chat not found")

		// Bob is known to Telegram (he wrote to a business account) but never
		// started this bot.
		conn, err := fb.ConnectBusiness(carol, telego.BusinessBotRights{CanReply: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fb.BusinessMessage(conn.ID, bob, "hello shop"); err != nil {
			t.Fatal(err)
		}
		_, err = send(ctx, bot, bob.ID, "hi")
		wantAPIError(t, err, 403, "Forbidden: bot can't initiate conversation with a user")

		if _, err := fb.Start(alice, ""); err != nil {
			t.Fatal(err)
		}
		if err := fb.Block(alice); err != nil {
			t.Fatal(err)
		}
		_, err = send(ctx, bot, alice.ID, "are you there?")
		wantAPIError(t, err, 403, "Forbidden: bot was blocked by the user")
		offset := 0
		ups := poll(t, bot, &offset)
		last := ups[len(ups)-1].MyChatMember
		if last == nil || last.NewChatMember.MemberStatus() != telego.MemberStatusBanned || last.OldChatMember.MemberStatus() != telego.MemberStatusMember || last.From.ID != alice.ID {
			t.Fatalf("my_chat_member = %+v", last)
		}
		if chat, _ := fb.Chat(alice.ID); !chat.Blocked {
			t.Fatal("the read model does not show the block")
		}

		// Writing again unblocks, as Telegram's Restart button does.
		if _, err := fb.Send(alice, "sorry"); err != nil {
			t.Fatal(err)
		}
		if _, err := send(ctx, bot, alice.ID, "welcome back"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("malformed sends are refused with Telegram's descriptions", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 32)
		if _, err := fake.Bot(fakebot.Token(32)).Start(alice, ""); err != nil {
			t.Fatal(err)
		}
		ctx := ctxFor(t, 5*time.Second)
		cases := []struct {
			params *telego.SendMessageParams
			want   string
		}{
			{&telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}}, "Bad Request: message text is empty"},
			{&telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: strings.Repeat("a", 4097)}, "Bad Request: message is too long"},
			{&telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: "x", ParseMode: "BBCode"}, "Bad Request: unsupported parse_mode"},
			{&telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: "x",
				ReplyMarkup: keyboard([]telego.InlineKeyboardButton{button("Go", strings.Repeat("d", 65))})}, "Bad Request: BUTTON_DATA_INVALID"},
			{&telego.SendMessageParams{ChatID: telego.ChatID{ID: alice.ID}, Text: "x",
				ReplyMarkup: keyboard([]telego.InlineKeyboardButton{{Text: "plain"}})}, "Bad Request: text buttons are unallowed in the inline keyboard"},
			{&telego.SendMessageParams{ChatID: telego.ChatID{Username: "@channel"}, Text: "x"}, "Bad Request: chat not found"},
		}
		for _, c := range cases {
			_, err := bot.SendMessage(ctx, c.params)
			wantAPIError(t, err, 400, c.want)
		}
	})

	t.Run("form and multipart bodies are read like JSON", func(t *testing.T) {
		t.Parallel()
		fake, base := start(t, fakebot.Opts{})
		token := fakebot.Token(33)
		if _, err := fake.Bot(token).Start(alice, ""); err != nil {
			t.Fatal(err)
		}
		form := url.Values{"chat_id": {"1001"}, "text": {"via form"}, "reply_markup": {`{"inline_keyboard":[[{"text":"A","callback_data":"a"}]]}`}}
		res, err := http.PostForm(base+"/bot"+token+"/sendMessage", form)
		if err != nil {
			t.Fatal(err)
		}
		var answer struct {
			Ok     bool           `json:"ok"`
			Result telego.Message `json:"result"`
		}
		if err := json.NewDecoder(res.Body).Decode(&answer); err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if !answer.Ok || answer.Result.Text != "via form" || answer.Result.ReplyMarkup == nil {
			t.Fatalf("form answer = %+v", answer)
		}

		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("chat_id", "1001")
		_ = mw.WriteField("text", "via multipart")
		_ = mw.Close()
		res, err = http.Post(base+"/bot"+token+"/SENDMESSAGE", mw.FormDataContentType(), &body)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("multipart status %d", res.StatusCode)
		}
		calls := fake.CallsTo("sendMessage")
		if len(calls) != 2 || calls[1].Params["text"] != "via multipart" || calls[0].Params["reply_markup"] == "" {
			t.Fatalf("calls = %+v", calls)
		}
		var m telego.Message
		if err := calls[0].Decode(&m); err != nil || m.Text != "via form" {
			t.Fatalf("decoded result %+v, %v", m, err)
		}
	})

	t.Run("an unknown method gets Telegram's own 404 and a revoked token 401", func(t *testing.T) {
		t.Parallel()
		fake, base := start(t, fakebot.Opts{})
		token := fakebot.Token(34)
		for _, method := range []string{"sendPigeon", "getMeNow", "sendmessages"} {
			res, err := http.Post(base+"/bot"+token+"/"+method, "application/json", strings.NewReader(`{"chat_id":1}`))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if res.StatusCode != 404 || string(body) != `{"ok":false,"error_code":404,"description":"Not Found"}` {
				t.Fatalf("%s: %d %s", method, res.StatusCode, body)
			}
		}
		fake.Revoke(token)
		_, err := client(t, base, 34).GetMe(ctxFor(t, 5*time.Second))
		wantAPIError(t, err, 401, "Unauthorized")
	})

	t.Run("the fake works mounted under a base path", func(t *testing.T) {
		t.Parallel()
		fake := fakebot.New(fakebot.Opts{BasePath: "/sandbox/telegram/"})
		t.Cleanup(fake.Close)
		mux := http.NewServeMux()
		mux.Handle("/sandbox/telegram/", fake)
		ts := httptest.NewServer(mux)
		t.Cleanup(ts.Close)
		me, err := client(t, ts.URL+"/sandbox/telegram", 35).GetMe(ctxFor(t, 5*time.Second))
		if err != nil || me.ID != 35 {
			t.Fatalf("getMe under a base path: %+v, %v", me, err)
		}
	})

	t.Run("the read model is safe to read while bots and users act", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 36)
		fb := fake.Bot(fakebot.Token(36))
		users := []telego.User{alice, bob, carol}
		for _, u := range users {
			if _, err := fb.Start(u, ""); err != nil {
				t.Fatal(err)
			}
		}
		ctx := ctxFor(t, 10*time.Second)
		var wg sync.WaitGroup
		for _, u := range users {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for range 20 {
					if _, err := send(ctx, bot, u.ID, "msg"); err != nil {
						t.Error(err)
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				for range 20 {
					if _, err := fb.Send(u, "reply"); err != nil {
						t.Error(err)
						return
					}
					_ = fake.Bots()
				}
			}()
		}
		wg.Wait()
		view, err := fb.View()
		if err != nil {
			t.Fatal(err)
		}
		if len(view.Chats) != 3 {
			t.Fatalf("chats = %d", len(view.Chats))
		}
		for _, c := range view.Chats {
			if len(c.Messages) != 41 {
				t.Fatalf("chat %d has %d messages, want 41", c.ID, len(c.Messages))
			}
		}
	})
}

func TestBusiness(t *testing.T) {
	t.Parallel()

	t.Run("the connected bot answers a customer on the owner's behalf", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot, other := client(t, url, 40), client(t, url, 41)
		fb := fake.Bot(fakebot.Token(40))
		ctx := ctxFor(t, 5*time.Second)
		conn, err := fb.ConnectBusiness(carol, telego.BusinessBotRights{CanReply: true, CanReadMessages: true})
		if err != nil {
			t.Fatal(err)
		}
		in, err := fb.BusinessMessage(conn.ID, bob, "Do you ship to Tbilisi?")
		if err != nil {
			t.Fatal(err)
		}
		offset := 0
		ups := poll(t, bot, &offset)
		if len(ups) != 2 || ups[0].BusinessConnection == nil || ups[0].BusinessConnection.User.ID != carol.ID ||
			!ups[0].BusinessConnection.IsEnabled || ups[1].BusinessMessage == nil ||
			ups[1].BusinessMessage.BusinessConnectionID != conn.ID || ups[1].BusinessMessage.Chat.ID != bob.ID {
			t.Fatalf("updates = %+v", ups)
		}

		reply, err := bot.SendMessage(ctx, &telego.SendMessageParams{
			BusinessConnectionID: conn.ID, ChatID: telego.ChatID{ID: bob.ID}, Text: "Yes, in 3 days",
		})
		if err != nil {
			t.Fatal(err)
		}
		if reply.BusinessConnectionID != conn.ID || reply.From.ID != carol.ID || reply.SenderBusinessBot == nil || reply.SenderBusinessBot.ID != 40 {
			t.Fatalf("reply = %+v", reply)
		}

		got, err := bot.GetBusinessConnection(ctx, &telego.GetBusinessConnectionParams{BusinessConnectionID: conn.ID})
		if err != nil || got.ID != conn.ID || got.Rights == nil || !got.Rights.CanReply {
			t.Fatalf("getBusinessConnection = %+v, %v", got, err)
		}
		if info, err := bot.GetChat(ctx, &telego.GetChatParams{ChatID: telego.ChatID{ID: bob.ID}}); err != nil || info.FirstName != "Bob" {
			t.Fatalf("getChat = %+v, %v", info, err)
		}

		// Another bot cannot speak through this connection.
		_, err = other.SendMessage(ctx, &telego.SendMessageParams{BusinessConnectionID: conn.ID, ChatID: telego.ChatID{ID: bob.ID}, Text: "me too"})
		wantAPIError(t, err, 400, "Bad Request: business connection not found")

		if _, err := fb.EditBusinessMessage(conn.ID, bob.ID, in.MessageID, "Do you ship to Batumi?"); err != nil {
			t.Fatal(err)
		}
		if err := fb.DeleteBusinessMessages(conn.ID, bob.ID, in.MessageID); err != nil {
			t.Fatal(err)
		}
		ups = poll(t, bot, &offset)
		if len(ups) != 2 || ups[0].EditedBusinessMessage == nil || ups[0].EditedBusinessMessage.Text != "Do you ship to Batumi?" ||
			ups[1].DeletedBusinessMessages == nil || ups[1].DeletedBusinessMessages.MessageIDs[0] != in.MessageID {
			t.Fatalf("updates = %+v", ups)
		}

		view, err := fb.View()
		if err != nil {
			t.Fatal(err)
		}
		chat := view.Chats[0]
		if len(view.Connections) != 1 || chat.BusinessConnectionID != conn.ID || len(chat.Messages) != 2 ||
			!chat.Messages[0].Deleted || chat.Messages[1].Sender != fakebot.SenderBot {
			t.Fatalf("view = %+v", view)
		}

		if err := fb.DisconnectBusiness(conn.ID); err != nil {
			t.Fatal(err)
		}
		_, err = bot.SendMessage(ctx, &telego.SendMessageParams{BusinessConnectionID: conn.ID, ChatID: telego.ChatID{ID: bob.ID}, Text: "still there?"})
		wantAPIError(t, err, 400, "Bad Request: BUSINESS_CONNECTION_INVALID")
	})

	t.Run("a connection without the reply right cannot answer", func(t *testing.T) {
		t.Parallel()
		fake, url := start(t, fakebot.Opts{})
		bot := client(t, url, 42)
		fb := fake.Bot(fakebot.Token(42))
		conn, err := fb.ConnectBusiness(carol, telego.BusinessBotRights{CanReadMessages: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fb.BusinessMessage(conn.ID, bob, "hi"); err != nil {
			t.Fatal(err)
		}
		_, err = bot.SendMessage(ctxFor(t, 5*time.Second), &telego.SendMessageParams{BusinessConnectionID: conn.ID, ChatID: telego.ChatID{ID: bob.ID}, Text: "hello"})
		wantAPIError(t, err, 400, "Bad Request: BUSINESS_PEER_INVALID")
	})
}
