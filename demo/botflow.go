package demo

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/telegram/fakebot"
)

// The onboarding bot's inline buttons, as its users see them (callback data).
const (
	buttonIntro  = "intro"
	buttonSignup = "signup"
	buttonWallet = "wallet"
	buttonMenu   = "menu"
	buttonBind   = "bind:" // + uid
)

// partnerCodeLine ends the "new partner" DM and web notification.
const partnerCodeLine = "Код приглашения партнёра: "

// walletPromptStart begins the bot's confirm prompt after a wallet connects.
const walletPromptStart = "Кошелёк "

type actionAnswer struct {
	EventIDs []int64 `json:"eventIds"`
}

// botJourney is one person's way from a leader's link to an activated NFT:
// the onboarding bot greets them with the leader's name; some leave there;
// the others (sometimes after "how it works") ask to sign up, get an account
// in the cabinet, link their Telegram with the cabinet's connect link,
// connect a wallet and confirm the account in the bot, register — now and
// then under another leader than the one who invited them — and most
// activate an NFT.
func (s *sim) botJourney(ctx context.Context) error {
	tg := s.idBase + s.next()
	first, last := s.person()
	user := telego.User{ID: tg, FirstName: first, LastName: last, LanguageCode: "ru"}
	li := s.intn(len(s.cast.Leaders))

	// t.me/<bot>?start=<leader's code>
	at := s.lastMessage(tg)
	if _, err := s.onboarding.Start(user, s.cast.Leaders[li].Code); err != nil {
		return failed("open the bot with a leader's link", err)
	}
	greeting, err := s.botSays(ctx, tg, at, withButton(buttonSignup), stepTimeout)
	if err != nil {
		return failed("greeting", err)
	}
	if s.chance(0.15) {
		s.mu.Lock()
		s.led.leftEarly++
		s.mu.Unlock()
		return nil
	}
	if err := s.pause(ctx); err != nil {
		return err
	}
	if s.chance(0.5) {
		intro, err := s.pressAndWait(ctx, user, greeting, buttonIntro, withButton(buttonSignup))
		if err != nil {
			return failed("how it works", err)
		}
		greeting = intro
	}
	if _, err := s.pressAndWait(ctx, user, greeting, buttonSignup, anyMessage); err != nil {
		return failed("sign up", err)
	}

	// The web cabinet: an account, then a link that connects Telegram.
	code := "p" + strconv.FormatInt(tg, 10)
	var u userAnswer
	if err := s.c.admin(ctx, http.MethodPost, "/users", newUser{Link: code, Name: first + " " + last}, &u); err != nil {
		return failed("create the account", err)
	}
	var link connectLinkAnswer
	if err := s.c.bot(ctx, http.MethodPost, "/bot/telegram/connect-link", map[string]int64{"uid": u.UID}, &link); err != nil {
		return failed("connect link", err)
	}
	at = s.lastMessage(tg)
	if _, err := s.onboarding.Start(user, link.StartParam); err != nil {
		return failed("open the connect link", err)
	}
	if _, err := s.botSays(ctx, tg, at, withButton(buttonWallet), stepTimeout); err != nil {
		return failed("account found", err)
	}
	if err := s.pause(ctx); err != nil {
		return err
	}

	// The wallet: the bot asks to confirm the account, the user confirms.
	at = s.lastMessage(tg)
	if err := s.action(ctx, u.UID, "wallet", map[string]string{"addr": s.wallet()}); err != nil {
		return failed("connect a wallet", err)
	}
	bu := &botUser{tg: tg, uid: u.UID, code: code, wallet: true}
	bind := buttonBind + strconv.FormatInt(u.UID, 10)
	prompt, err := s.botSays(ctx, tg, at, withButton(bind), stepTimeout)
	if err != nil {
		return failed("confirm prompt", err)
	}
	if err := s.pause(ctx); err != nil {
		return err
	}
	if _, err := s.pressAndWait(ctx, user, prompt, bind, withButton(buttonMenu)); err != nil {
		return failed("confirm the account", err)
	}

	// Registration confirmed on chain, mostly under the inviting leader.
	ri := li
	if s.chance(0.1) {
		ri = (li + 1 + s.intn(len(s.cast.Leaders)-1)) % len(s.cast.Leaders)
	}
	if err := s.action(ctx, u.UID, "register", map[string]int64{"leaderUid": s.cast.Leaders[ri].UID}); err != nil {
		return failed("register", err)
	}
	bu.wantStep = 8
	s.mu.Lock()
	s.led.regs = append(s.led.regs, &registration{partnerCode: code, leader: ri})
	if ri != li {
		s.led.switched++
	}
	s.mu.Unlock()
	if s.chance(0.7) {
		if err := s.pause(ctx); err != nil {
			return err
		}
		if err := s.action(ctx, u.UID, "nft", map[string]string{"level": "lp1"}); err != nil {
			return failed("activate an NFT", err)
		}
		bu.wantStep = 9
		s.mu.Lock()
		s.led.nfts++
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.led.botUsers = append(s.led.botUsers, bu)
	s.mu.Unlock()
	return nil
}

// action is a backend action of the cabinet (wallet, register, nft); the
// outbox events it emitted join the ledger.
func (s *sim) action(ctx context.Context, uid int64, name string, body any) error {
	var ar actionAnswer
	if err := s.c.admin(ctx, http.MethodPost, "/users/"+strconv.FormatInt(uid, 10)+"/"+name, body, &ar); err != nil {
		return err
	}
	s.mu.Lock()
	for _, id := range ar.EventIDs {
		s.led.events = append(s.led.events, &outboxEvent{id: id})
	}
	s.mu.Unlock()
	return nil
}

// pressAndWait presses the button with data under msg and waits for the
// bot's next message that satisfies want.
func (s *sim) pressAndWait(ctx context.Context, user telego.User, msg fakebot.MessageView, data string, want func(fakebot.MessageView) bool) (fakebot.MessageView, error) {
	at := s.lastMessage(user.ID)
	if _, err := s.onboarding.Press(user, msg.ID, data); err != nil {
		return fakebot.MessageView{}, err
	}
	return s.botSays(ctx, user.ID, at, want, stepTimeout)
}

// lastMessage is the id of the newest message in the user's chat with the
// onboarding bot (0 when there is none).
func (s *sim) lastMessage(chat int64) int {
	ch, ok := s.onboarding.Chat(chat)
	if !ok || len(ch.Messages) == 0 {
		return 0
	}
	return ch.Messages[len(ch.Messages)-1].ID
}

// botSays waits until the onboarding bot wrote a message after message
// after in the chat that satisfies want, at most within.
func (s *sim) botSays(ctx context.Context, chat int64, after int, want func(fakebot.MessageView) bool, within time.Duration) (fakebot.MessageView, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var got fakebot.MessageView
	err := s.opts.Sandbox.WaitUntil(wctx, func() bool {
		ch, ok := s.onboarding.Chat(chat)
		if !ok {
			return false
		}
		for _, m := range ch.Messages {
			if m.ID > after && m.Sender == fakebot.SenderBot && want(m) {
				got = m
				return true
			}
		}
		return false
	})
	if err != nil {
		if ctx.Err() != nil {
			return got, ctx.Err()
		}
		return got, errNoAnswer
	}
	s.step()
	return got, nil
}

func anyMessage(fakebot.MessageView) bool { return true }

// withButton matches a message with an inline button carrying data.
func withButton(data string) func(fakebot.MessageView) bool {
	return func(m fakebot.MessageView) bool {
		for _, row := range m.Buttons {
			for _, b := range row {
				if b.CallbackData == data {
					return true
				}
			}
		}
		return false
	}
}

// partnerAnnouncements counts the texts that announce the partner with code.
func partnerAnnouncements(texts []string, code string) int {
	n := 0
	for _, t := range texts {
		if strings.HasSuffix(t, partnerCodeLine+code) {
			n++
		}
	}
	return n
}
