package onboarding

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/mymmrac/telego"

	"switchyard/bot/contract"
)

// updatePlan is what one Telegram update does: a change to the sender's
// funnel, the replies, and whether the sender can be reached.
type updatePlan struct {
	User        contract.TelegramID // the Telegram user the update came from; "" for none
	Change      *funnelChange
	Replies     []outgoingMessage
	Reachable   bool   // the user wrote to the bot: they can be reached again
	Unreachable string // the user blocked the bot: why
}

// botCommands is the bot's command list (setMyCommands).
var botCommands = []telego.BotCommand{
	{Command: "start", Description: "Начать"},
	{Command: "menu", Description: "Личный кабинет"},
	{Command: "help", Description: "Помощь"},
}

// converse decides what an update does. It calls the backend where the
// conversation needs it (resolving a code, redeeming a connect token,
// binding, the console's gate); every such call is a read or idempotent, so
// handling an update again after a failure is safe. A temporary failure of
// the backend is returned as an error: the update is retried.
func (o *Bot) converse(ctx context.Context, u telego.Update) (updatePlan, error) {
	switch {
	case u.Message != nil:
		return o.onMessage(ctx, *u.Message)
	case u.CallbackQuery != nil:
		return o.onCallback(ctx, *u.CallbackQuery)
	case u.MyChatMember != nil:
		return onMyChatMember(*u.MyChatMember), nil
	}
	return updatePlan{}, nil
}

func tgOf(id int64) contract.TelegramID { return contract.TelegramID(strconv.FormatInt(id, 10)) }

// reply is a message to tg, keyed within its update by key.
func reply(tg contract.TelegramID, key, text string, buttons ...[]button) outgoingMessage {
	return outgoingMessage{Key: key, Method: methodSendMessage, ChatID: tg, Params: outParams{Text: text, Buttons: buttons}}
}

// temporary reports whether a backend call may succeed if tried again: a 5xx
// or 429 answer, or no answer at all.
func temporary(err error) bool {
	var api *APIError
	if errors.As(err, &api) {
		return api.Temporary()
	}
	var invalid *contract.InvalidError
	return !errors.As(err, &invalid)
}

// parseCommand splits "/start@bot payload" into "/start" and "payload".
func parseCommand(text string) (string, string) {
	text = strings.TrimSpace(text)
	if !strings.HasPrefix(text, "/") {
		return "", text
	}
	cmd, arg, _ := strings.Cut(text, " ")
	cmd, _, _ = strings.Cut(cmd, "@")
	return strings.ToLower(cmd), strings.TrimSpace(arg)
}

func (o *Bot) onMessage(ctx context.Context, m telego.Message) (updatePlan, error) {
	if m.Chat.Type != telego.ChatTypePrivate || m.From == nil || m.From.IsBot {
		return updatePlan{}, nil
	}
	tg := tgOf(m.From.ID)
	cmd, arg := parseCommand(m.Text)
	var (
		plan updatePlan
		err  error
	)
	switch cmd {
	case "/start":
		plan, err = o.onStart(ctx, tg, m.From.FirstName, arg)
	case "/menu", "/console", "/cabinet":
		plan, err = o.console(ctx, tg)
	case "/help":
		plan = updatePlan{Replies: []outgoingMessage{reply(tg, "reply", helpText)}}
	default:
		plan = updatePlan{Replies: []outgoingMessage{reply(tg, "reply", unknownText)}}
	}
	plan.User, plan.Reachable = tg, true
	return plan, err
}

// onStart handles /start: a connect token links the account, a referral code
// names the leader, and a bare /start opens the console for a bound account
// or greets a newcomer.
func (o *Bot) onStart(ctx context.Context, tg contract.TelegramID, firstName, payload string) (updatePlan, error) {
	if payload == "" {
		chk, err := o.backend.CheckAccountByTelegram(ctx, tg)
		if err != nil {
			return updatePlan{}, err
		}
		if chk.Exists {
			plan, err := o.console(ctx, tg)
			if plan.Change != nil && plan.Change.Stage < StageStarted {
				plan.Change.Stage = StageStarted
			}
			return plan, err
		}
		return updatePlan{
			Change:  &funnelChange{Stage: StageStarted},
			Replies: []outgoingMessage{reply(tg, "reply", greetingText(firstName, ""), introButtons()...)},
		}, nil
	}
	if _, ok := contract.ParseConnectPayload(payload); ok {
		return o.redeem(ctx, tg, payload)
	}
	leader, err := o.backend.ResolveLeader(ctx, payload)
	switch {
	case err == nil:
		return updatePlan{
			Change:  &funnelChange{Stage: StageLeaderResolved, Leader: &leader},
			Replies: []outgoingMessage{reply(tg, "reply", greetingText(firstName, leader.Name), introButtons()...)},
		}, nil
	case temporary(err):
		return updatePlan{}, err
	default: // unknown or malformed code
		return updatePlan{
			Change:  &funnelChange{Stage: StageStarted},
			Replies: []outgoingMessage{reply(tg, "reply", unknownCodeText(payload), introButtons()...)},
		}, nil
	}
}

// redeem redeems a connect token from /start: the account is linked to this
// Telegram id (awaiting the confirmation the confirm prompt asks for).
func (o *Bot) redeem(ctx context.Context, tg contract.TelegramID, payload string) (updatePlan, error) {
	red, err := o.backend.RedeemConnect(ctx, payload, tg)
	var text string
	switch {
	case err == nil:
		uid := red.UID
		return updatePlan{
			Change: &funnelChange{Stage: StageAccountLinked, UID: &uid, Bind: BindAwaiting},
			Replies: []outgoingMessage{reply(tg, "reply", accountLinkedText,
				[]button{{Text: "Как подключить кошелёк", Data: cbWallet}})},
		}, nil
	case errors.Is(err, contract.ErrTokenExpired):
		text = "Срок действия ссылки истёк. Получите новую ссылку в личном кабинете (кнопка «Привязать Telegram»)."
	case errors.Is(err, contract.ErrTokenUsed):
		text = "Эта ссылка уже использована другим Telegram-аккаунтом. Получите новую в личном кабинете."
	case errors.Is(err, contract.ErrTelegramTaken):
		text = "Этот Telegram уже привязан к другому аккаунту."
	case errors.Is(err, contract.ErrAccountBound):
		text = "Этот аккаунт уже привязан к другому Telegram."
	case temporary(err):
		return updatePlan{}, err
	default: // not found, malformed
		text = "Ссылка привязки недействительна. Откройте её заново из личного кабинета."
	}
	return updatePlan{Change: &funnelChange{Stage: StageStarted}, Replies: []outgoingMessage{reply(tg, "reply", text)}}, nil
}

func (o *Bot) onCallback(ctx context.Context, cq telego.CallbackQuery) (updatePlan, error) {
	tg := tgOf(cq.From.ID)
	chat, msgID := tg, 0
	if cq.Message != nil {
		chat, msgID = tgOf(cq.Message.GetChat().ID), cq.Message.GetMessageID()
	}
	answer := func(text string) outgoingMessage {
		return outgoingMessage{Key: "answer", Method: methodAnswerCallback, ChatID: chat,
			Params: outParams{CallbackQueryID: cq.ID, Text: text}}
	}
	// removeKeyboard takes the buttons off the message pressed, once it has
	// served its purpose.
	removeKeyboard := func() outgoingMessage {
		return outgoingMessage{Key: "keyboard", Method: methodEditReplyMarkup, ChatID: chat, Params: outParams{MessageID: msgID}}
	}
	plan := updatePlan{User: tg, Reachable: true}
	data := cq.Data
	switch {
	case data == cbIntro:
		plan.Change = &funnelChange{Stage: StageIntroduced}
		plan.Replies = []outgoingMessage{answer(""), reply(chat, "reply", introText,
			[]button{{Text: "Зарегистрироваться", Data: cbSignup}})}
	case data == cbSignup:
		f, err := loadFunnel(ctx, o.db.Read, tg, "")
		if err != nil && !errors.Is(err, ErrFunnelNotFound) {
			return updatePlan{}, err
		}
		plan.Change = &funnelChange{Stage: StageSignupRequested}
		msg := reply(chat, "reply", o.signupText(f.LeaderCode))
		if link := o.signupURL(f.LeaderCode); link != "" {
			msg.Params.Buttons = [][]button{{{Text: "Открыть личный кабинет", URL: link}}}
		}
		plan.Replies = []outgoingMessage{answer(""), msg}
	case data == cbWallet:
		plan.Change = &funnelChange{Stage: StageWalletRequested}
		plan.Replies = []outgoingMessage{answer(""), reply(chat, "reply", walletHowToText)}
	case data == cbMenu:
		c, err := o.console(ctx, tg)
		if err != nil {
			return updatePlan{}, err
		}
		plan.Change, plan.Replies = c.Change, append([]outgoingMessage{answer("")}, c.Replies...)
	case strings.HasPrefix(data, cbBind):
		return o.confirmBind(ctx, plan, tg, chat, strings.TrimPrefix(data, cbBind), answer, removeKeyboard)
	case strings.HasPrefix(data, cbNoBind):
		plan.Change = &funnelChange{Bind: BindDeclined}
		plan.Replies = []outgoingMessage{answer("Хорошо, не привязываю"), removeKeyboard(), reply(chat, "reply", bindDeclinedText)}
	default:
		plan.Replies = []outgoingMessage{answer("Эта кнопка больше не работает")}
	}
	return plan, nil
}

// confirmBind is the confirm button of the binding prompt: POST
// /bot/telegram/bind promotes the preview Telegram id of the account.
func (o *Bot) confirmBind(ctx context.Context, plan updatePlan, tg, chat contract.TelegramID, uidText string,
	answer func(string) outgoingMessage, removeKeyboard func() outgoingMessage) (updatePlan, error) {
	n, perr := strconv.ParseInt(uidText, 10, 64)
	if perr != nil || n <= 0 {
		plan.Replies = []outgoingMessage{answer("Эта кнопка больше не работает")}
		return plan, nil
	}
	uid := contract.UID(n)
	_, err := o.backend.BindTelegram(ctx, uid, tg)
	var toast, text string
	switch {
	case err == nil:
		plan.Change = &funnelChange{UID: &uid, Bind: BindBound}
		plan.Replies = []outgoingMessage{answer("Telegram привязан ✅"), removeKeyboard(), reply(chat, "reply", boundText,
			[]button{{Text: "Открыть кабинет", Data: cbMenu}})}
		return plan, nil
	case errors.Is(err, contract.ErrNoPreview):
		toast, text = "Нечего подтверждать", "Эта привязка больше не ждёт подтверждения. Откройте ссылку привязки из личного кабинета ещё раз."
	case errors.Is(err, contract.ErrTelegramTaken):
		toast, text = "Не получилось", "Этот Telegram уже привязан к другому аккаунту."
	case errors.Is(err, contract.ErrAccountBound):
		toast, text = "Не получилось", "Этот аккаунт уже привязан к другому Telegram."
	case errors.Is(err, contract.ErrUserNotFound):
		toast, text = "Не получилось", "Аккаунт не найден."
	case temporary(err):
		return updatePlan{}, err
	default:
		toast, text = "Не получилось", "Не получилось привязать Telegram. Попробуйте ещё раз из личного кабинета."
	}
	plan.Replies = []outgoingMessage{answer(toast), removeKeyboard(), reply(chat, "reply", text)}
	return plan, nil
}

// console is the bot's cabinet, gated as the spec gates it: the Telegram id
// must be bound to an account (GET /auth/check-account-by-telegram) whose
// registration is confirmed (GET /bot/user/state).
func (o *Bot) console(ctx context.Context, tg contract.TelegramID) (updatePlan, error) {
	chk, err := o.backend.CheckAccountByTelegram(ctx, tg)
	if err != nil {
		return updatePlan{}, err
	}
	notBound := updatePlan{Replies: []outgoingMessage{reply(tg, "reply", consoleNotBoundText,
		[]button{{Text: "Как зарегистрироваться", Data: cbSignup}})}}
	if !chk.Exists {
		return notBound, nil
	}
	st, err := o.backend.UserState(ctx, tg)
	if errors.Is(err, contract.ErrUserNotFound) {
		return notBound, nil
	}
	if err != nil {
		return updatePlan{}, err
	}
	change := &funnelChange{UID: chk.UID, Bind: BindBound}
	if !st.IsRegistrationConfirmed {
		return updatePlan{Change: change, Replies: []outgoingMessage{reply(tg, "reply", consoleUnconfirmedText)}}, nil
	}
	f, err := loadFunnel(ctx, o.db.Read, tg, "")
	if err != nil && !errors.Is(err, ErrFunnelNotFound) {
		return updatePlan{}, err
	}
	return updatePlan{Change: change, Replies: []outgoingMessage{reply(tg, "reply", consoleText(f.Stage, st, o.botUsername(ctx)))}}, nil
}

func onMyChatMember(m telego.ChatMemberUpdated) updatePlan {
	if m.Chat.Type != telego.ChatTypePrivate || m.NewChatMember == nil {
		return updatePlan{}
	}
	plan := updatePlan{User: tgOf(m.Chat.ID)}
	switch m.NewChatMember.MemberStatus() {
	case telego.MemberStatusBanned, telego.MemberStatusLeft:
		plan.Unreachable = "the user blocked the bot"
	case telego.MemberStatusMember:
		plan.Reachable = true
	}
	return plan
}

// botUsername is the bot's @username (getMe, remembered); "" when unknown.
func (o *Bot) botUsername(ctx context.Context) string {
	o.usernameMu.Lock()
	defer o.usernameMu.Unlock()
	if o.username == "" {
		if me, err := o.tg.GetMe(ctx); err == nil {
			o.username = me.Username
		}
	}
	return o.username
}

func (o *Bot) signupURL(code string) string {
	if o.cabinetURL == "" {
		return ""
	}
	u, err := url.Parse(o.cabinetURL)
	if err != nil {
		return ""
	}
	if code != "" {
		q := u.Query()
		q.Set("ref", code)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

func (o *Bot) signupText(code string) string {
	var b strings.Builder
	b.WriteString("Регистрация проходит в личном кабинете")
	if o.cabinetURL != "" {
		b.WriteString(" (" + o.signupURL(code) + ")")
	}
	b.WriteString(".")
	if code != "" {
		b.WriteString(" Ваш код приглашения: " + code + ".")
	}
	b.WriteString("\n\nКогда аккаунт будет создан, нажмите в кабинете «Привязать Telegram» — ссылка вернёт вас сюда, " +
		"и я продолжу с вами.")
	return b.String()
}

func introButtons() [][]button {
	return [][]button{
		{{Text: "Как это устроено", Data: cbIntro}},
		{{Text: "Зарегистрироваться", Data: cbSignup}},
	}
}

func greetingText(firstName, leaderName string) string {
	var b strings.Builder
	b.WriteString("Здравствуйте")
	if name := strings.TrimSpace(firstName); name != "" {
		b.WriteString(", " + name)
	}
	b.WriteString("! 👋\n\n")
	if leaderName != "" {
		b.WriteString("Вас пригласил(а) " + leaderName + ". ")
	}
	b.WriteString("Я помогу пройти регистрацию: расскажу, как всё устроено, подскажу, где зарегистрироваться, " +
		"попрошу подтвердить привязку Telegram и буду присылать новости вашей структуры.")
	return b.String()
}

func unknownCodeText(code string) string {
	return "Не нашли приглашение с кодом «" + code + "». Проверьте ссылку у пригласившего вас человека — " +
		"или начните без приглашения."
}

func consoleText(stage Stage, st contract.UserState, username string) string {
	yes := func(b bool) string {
		if b {
			return "✅"
		}
		return "—"
	}
	var b strings.Builder
	b.WriteString("📋 Личный кабинет\n\n")
	b.WriteString("Этап: " + stage.Title() + "\n")
	if st.Addr != nil && *st.Addr != "" {
		b.WriteString("Кошелёк: " + shortAddr(*st.Addr) + "\n")
	} else {
		b.WriteString("Кошелёк: не подключён\n")
	}
	b.WriteString("Статусный NFT: LP1 " + yes(st.LP1) + ", LP2 " + yes(st.LP2) + "\n")
	if st.TimeActive != nil {
		b.WriteString("Активен с: " + st.TimeActive.Format("02.01.2006") + "\n")
	}
	if st.OwnLink != "" {
		b.WriteString("\nВаша ссылка для приглашений:\n")
		if username != "" {
			b.WriteString("https://t.me/" + username + "?start=" + st.OwnLink)
		} else {
			b.WriteString("код " + st.OwnLink)
		}
	}
	return b.String()
}

// The conversation's fixed texts.
const (
	helpText = "Я бот онбординга.\n\n" +
		"/start — начать заново\n/menu — личный кабинет\n/help — эта подсказка"
	unknownText = "Я понимаю команды /start, /menu и /help."
	introText   = "Как это устроено:\n\n" +
		"1. Вы регистрируетесь в личном кабинете по приглашению.\n" +
		"2. Привязываете этот Telegram по ссылке из кабинета.\n" +
		"3. Подключаете кошелёк — я попрошу подтвердить привязку.\n" +
		"4. Регистрация подтверждается, и вы попадаете в структуру пригласившего.\n" +
		"5. Активируете статусный NFT.\n\n" +
		"На каждом шаге я подскажу, что дальше."
	accountLinkedText = "Аккаунт найден ✅\n\n" +
		"Следующий шаг — подключите кошелёк в личном кабинете. После этого я попрошу подтвердить, " +
		"что аккаунт ваш, и привяжу к нему этот Telegram."
	walletHowToText = "Чтобы подключить кошелёк, откройте личный кабинет, раздел «Кошелёк», и нажмите «Подключить». " +
		"Как только кошелёк подключится, я напишу сюда."
	boundText = "Готово! Telegram привязан к вашему аккаунту. " +
		"Сюда будут приходить новости вашей структуры; кабинет — по команде /menu."
	bindDeclinedText    = "Понял, не привязываю. Если это ошибка, откройте ссылку привязки из личного кабинета ещё раз."
	consoleNotBoundText = "Кабинет откроется, когда этот Telegram будет привязан к аккаунту. " +
		"Зарегистрируйтесь и нажмите «Привязать Telegram» в личном кабинете."
	consoleUnconfirmedText = "Telegram привязан ✅, но регистрация ещё не подтверждена. Как только она пройдёт, кабинет откроется здесь."
	updateFailedText       = "Не получилось обработать ваше сообщение: сервис временно недоступен. Попробуйте ещё раз чуть позже."
)
