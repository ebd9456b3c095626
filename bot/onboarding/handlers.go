package onboarding

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"switchyard/bot/contract"
)

// Outcomes of a handled event, kept in the dedup ledger.
const (
	outcomeHandled     = "handled"      // the funnel changed or a call was recorded
	outcomeNoChange    = "no_change"    // nothing to do: replayed data, already at that stage
	outcomeNoRecipient = "no_recipient" // the event names nobody the bot can reach or record
	outcomeIgnored     = "ignored"      // an event type this bot does not know
)

// eventPlan is what one event does: a change to one Telegram user's funnel
// and the calls to record, all in the event's transaction.
type eventPlan struct {
	FunnelUser contract.TelegramID // whose funnel changes; "" for none
	Change     *funnelChange       // nil: the funnel is not touched
	Messages   []outgoingMessage
	Outcome    string
}

// planEvent is the handlers' rule, a pure function of the event, the Telegram
// user it concerns (tg, "" when unknown) and that user's funnel (nil when the
// bot has none). Replaying an event gives the same plan, and applying a plan
// twice changes nothing: stages only grow and calls are keyed by the event.
func planEvent(ev contract.Event, tg contract.TelegramID, f *Funnel) (eventPlan, error) {
	uid := ev.MagnetUID
	if uid == nil && f != nil {
		uid = f.UID
	}
	bind := BindNone
	if f != nil {
		bind = f.BindState
	}
	stage := func(s Stage, ch funnelChange) eventPlan {
		if tg == "" {
			return eventPlan{Outcome: outcomeNoRecipient}
		}
		ch.Stage, ch.UID = s, ev.MagnetUID
		return eventPlan{FunnelUser: tg, Change: &ch, Outcome: outcomeHandled}
	}
	// prompt adds the confirm prompt of the binding unless the user is bound.
	prompt := func(p eventPlan, text string) eventPlan {
		if p.Change == nil || uid == nil || bind == BindBound {
			return p
		}
		p.Change.Bind = BindPrompted
		p.Messages = append(p.Messages, outgoingMessage{
			Key: "prompt", Method: methodSendMessage, ChatID: tg,
			Params: outParams{Text: text, Buttons: bindButtons(*uid)},
		})
		return p
	}

	switch ev.EventType {
	case contract.EventWalletConnected:
		var p contract.WalletConnectedPayload
		if err := decodePayload(ev, &p); err != nil {
			return eventPlan{}, err
		}
		return prompt(stage(StageWalletConnected, funnelChange{}), walletPromptText(p.Addr)), nil

	case contract.EventRegistered:
		var p contract.RegisteredPayload
		if err := decodePayload(ev, &p); err != nil {
			return eventPlan{}, err
		}
		return prompt(stage(StageRegistered, funnelChange{Registered: true, RegisteredLeader: p.LeaderUID}), registeredPromptText), nil

	case contract.EventStatusNftActivated:
		var p contract.StatusNftActivatedPayload
		if err := decodePayload(ev, &p); err != nil {
			return eventPlan{}, err
		}
		return stage(StageNftActivated, funnelChange{}), nil

	case contract.EventNewPartner:
		var p contract.NewPartnerPayload
		if err := decodePayload(ev, &p); err != nil {
			return eventPlan{}, err
		}
		return dmPlan(ev, tg, "dm", "new_partner", newPartnerText(p)), nil

	case contract.EventReactivation:
		return dmPlan(ev, tg, "dm", "reactivation", reactivationText), nil

	case contract.EventStructOvertake:
		return dmPlan(ev, tg, "dm", "struct_overtake", structOvertakeText), nil
	}
	return eventPlan{Outcome: outcomeIgnored}, nil
}

// dmPlan is a direct message to the user an event names, with the web
// cabinet notification as its fallback when Telegram cannot reach them (or
// when the bot has no Telegram id for them at all).
func dmPlan(ev contract.Event, tg contract.TelegramID, key, kind, text string) eventPlan {
	m := outgoingMessage{Key: key, Method: methodSendMessage, ChatID: tg, Params: outParams{Text: text}}
	if ev.MagnetUID != nil {
		m.Fallback = &contract.NewNotification{
			UID: *ev.MagnetUID, Kind: kind, Text: text,
			DedupKey: "bot-event:" + strconv.FormatInt(int64(ev.ID), 10),
		}
	}
	if tg == "" && m.Fallback == nil {
		return eventPlan{Outcome: outcomeNoRecipient}
	}
	return eventPlan{Messages: []outgoingMessage{m}, Outcome: outcomeHandled}
}

// decodePayload reads an event's payload; a missing payload is the zero value.
func decodePayload(ev contract.Event, v any) error {
	p := strings.TrimSpace(string(ev.Payload))
	if p == "" || p == "null" {
		return nil
	}
	if err := json.Unmarshal([]byte(p), v); err != nil {
		return fmt.Errorf("event %d: %s payload: %w", ev.ID, ev.EventType, err)
	}
	return nil
}

// eventResult is what handling one event did, for the logs and metrics
// written after the commit.
type eventResult struct {
	Outcome    string
	Messages   int
	LeftLeader bool
	TelegramID contract.TelegramID
}

// handleEvent applies ev inside tx: it finds the Telegram user the event
// concerns (its Telegram id, else the funnel linked to its uid), plans, and
// applies the funnel change and the outgoing calls. The funnel the plan is
// made from is read locked (forUpdate): the updates worker's change to it
// waits for this transaction, or this one reads what that one committed.
func (o *Bot) handleEvent(ctx context.Context, tx *sql.Tx, ev contract.Event, now time.Time) (eventResult, error) {
	var (
		tg contract.TelegramID
		f  *Funnel
	)
	switch {
	case ev.TelegramID != nil:
		tg = *ev.TelegramID
		fu, err := loadFunnel(ctx, tx, tg, o.forUpdate())
		if err == nil {
			f = &fu
		} else if !errors.Is(err, ErrFunnelNotFound) {
			return eventResult{}, err
		}
	case ev.MagnetUID != nil:
		fu, err := funnelByUID(ctx, tx, *ev.MagnetUID, o.forUpdate())
		if err == nil {
			f, tg = &fu, fu.TelegramID
		} else if !errors.Is(err, ErrFunnelNotFound) {
			return eventResult{}, err
		}
	}
	plan, err := planEvent(ev, tg, f)
	if err != nil {
		return eventResult{}, err
	}
	res := eventResult{Outcome: plan.Outcome, TelegramID: tg}
	cause := "event:" + strconv.FormatInt(int64(ev.ID), 10)
	changed := false
	if plan.Change != nil {
		before, after, fchanged, err := o.applyFunnel(ctx, tx, now, plan.FunnelUser, cause, *plan.Change)
		if err != nil {
			return eventResult{}, err
		}
		changed = fchanged
		res.LeftLeader = before.LeftLeaderAt == nil && after.LeftLeaderAt != nil
	}
	n, err := o.recordDMs(ctx, tx, cause, plan.Messages)
	if err != nil {
		return eventResult{}, err
	}
	res.Messages = n
	if res.Outcome == outcomeHandled && !changed && n == 0 {
		res.Outcome = outcomeNoChange
	}
	return res, nil
}

// The texts of event messages.
const (
	registeredPromptText = "Регистрация подтверждена 🎉\n\n" +
		"Остался один шаг: подтвердите, что это ваш аккаунт, и я привяжу к нему этот Telegram. " +
		"После привязки сюда будут приходить новости вашей структуры."
	reactivationText = "Рады видеть вас снова! 👋\n\n" +
		"Ваш аккаунт снова активен. Откройте /menu, чтобы посмотреть, что изменилось."
	structOvertakeText = "Важно: изменения в вашей структуре.\n\n" +
		"В вашей структуре произошли перестановки. Подробности — в личном кабинете, а краткая сводка — в /menu."
)

func walletPromptText(addr string) string {
	return "Кошелёк " + shortAddr(addr) + " подключён ✅\n\n" +
		"Подтвердите, что это ваш аккаунт, и я привяжу к нему этот Telegram. " +
		"После привязки сюда будут приходить новости вашей структуры."
}

func newPartnerText(p contract.NewPartnerPayload) string {
	name := strings.TrimSpace(p.PartnerName)
	if name == "" {
		return "🎉 Новый партнёр в вашей структуре!"
	}
	text := "🎉 Новый партнёр в вашей структуре: " + name + "!"
	if p.PartnerLink != "" {
		text += "\nКод приглашения партнёра: " + p.PartnerLink
	}
	return text
}

// shortAddr shows the start and the end of a wallet address.
func shortAddr(addr string) string {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return ""
	}
	if utf8.RuneCountInString(addr) <= 12 {
		return addr
	}
	r := []rune(addr)
	return string(r[:6]) + "…" + string(r[len(r)-4:])
}

// Callback data of the bot's inline buttons (at most 64 bytes each).
const (
	cbIntro  = "intro"
	cbSignup = "signup"
	cbWallet = "wallet"
	cbMenu   = "menu"
	cbBind   = "bind:"   // + uid: confirm the binding
	cbNoBind = "nobind:" // + uid: not my account
)

func bindButtons(uid contract.UID) [][]button {
	id := strconv.FormatInt(int64(uid), 10)
	return [][]button{
		{{Text: "✅ Да, это мой аккаунт", Data: cbBind + id}},
		{{Text: "Нет, это не я", Data: cbNoBind + id}},
	}
}
