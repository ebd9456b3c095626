package switchyardtest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/bot/onboarding"
)

// EventType is an outbox event's type, as the contract spells it.
type EventType = contract.EventType

// The outbox's event types.
const (
	EventWalletConnected    = contract.EventWalletConnected
	EventRegistered         = contract.EventRegistered
	EventNewPartner         = contract.EventNewPartner
	EventStatusNftActivated = contract.EventStatusNftActivated
	EventReactivation       = contract.EventReactivation
	EventStructOvertake     = contract.EventStructOvertake
)

// Account is a backend account (the contract's user, magnet_users), as
// the admin API answers it.
type Account = backend.User

// NewAccount is what CreateAccount creates: Link is the account's referral
// code (what a /start payload names), TelegramID an optional bound
// Telegram id, LeaderUID an optional leader.
type NewAccount struct {
	Link       string       `json:"link"`
	Name       string       `json:"name"`
	TelegramID string       `json:"telegramId,omitempty"`
	LeaderUID  contract.UID `json:"leaderUid,omitempty"`
}

// CreateAccount creates a backend account, as the backend's sign-up does.
func (a *App) CreateAccount(t T, n NewAccount) Account {
	t.Helper()
	var acc Account
	a.Do(t, http.MethodPost, "/admin/api/users", n, &acc)
	return acc
}

// ConnectLink is the /start payload that connects Telegram to the account
// uid (the web cabinet's "connect Telegram" deep link): the user who starts
// the bot with it is the account's, once they confirm.
func (a *App) ConnectLink(t T, uid contract.UID) string {
	t.Helper()
	var l contract.ConnectLink
	a.Do(t, http.MethodPost, "/bot/telegram/connect-link", contract.ConnectLinkRequest{UID: uid}, &l)
	return l.StartParam
}

// Register confirms the account's registration under leaderUID (0: none),
// as the backend does; it emits the registered event and returns the ids
// of the events it emitted.
func (a *App) Register(t T, uid, leaderUID contract.UID) []contract.EventID {
	t.Helper()
	body := map[string]any{"leaderUid": nil}
	if leaderUID != 0 {
		body["leaderUid"] = leaderUID
	}
	var res struct {
		EventIDs []contract.EventID `json:"eventIds"`
	}
	a.Do(t, http.MethodPost, "/admin/api/users/"+uidPath(uid)+"/register", body, &res)
	return res.EventIDs
}

func uidPath(uid contract.UID) string { return strconv.FormatInt(int64(uid), 10) }

// Event is an outbox event as the backend writes it: for the Telegram user
// TelegramID or the account MagnetUID (one of them at least), with a
// payload of the type's shape (any JSON object, or nil).
type Event struct {
	Type       EventType    `json:"eventType"`
	TelegramID string       `json:"telegramId,omitempty"`
	MagnetUID  contract.UID `json:"magnetUid,omitempty"`
	Payload    any          `json:"payload,omitempty"`
}

// EmitEvent writes ev to the outbox as given (the backend's transactional
// emit) and returns its id. The onboarding bot takes it at once.
func (a *App) EmitEvent(t T, ev Event) contract.EventID {
	t.Helper()
	var res backend.EmitResponse
	a.Do(t, http.MethodPost, "/admin/api/bot/events", ev, &res)
	return res.ID
}

// OutboxEvent is an outbox event with its delivery state; its State is
// pending, retrying, processed or dead.
type OutboxEvent = backend.EventRecord

func (a *App) outboxEvent(ctx context.Context, id contract.EventID) (OutboxEvent, error) {
	var ev OutboxEvent
	err := a.Get(ctx, "/admin/api/bot/events/"+strconv.FormatInt(int64(id), 10), &ev)
	return ev, err
}

// OutboxEvent is the event id as the outbox has it now.
func (a *App) OutboxEvent(t T, id contract.EventID) OutboxEvent {
	t.Helper()
	ev, err := a.outboxEvent(t.Context(), id)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	return ev
}

// DescribeEvent is ev in a few words, for a failure message: "event 3
// retrying after 1 attempts, last error …".
func DescribeEvent(ev OutboxEvent) string {
	s := fmt.Sprintf("event %d %s after %d attempts", ev.ID, ev.State, ev.Attempts)
	if ev.LastError != nil {
		s += ", last error " + strconv.Quote(*ev.LastError)
	}
	return s
}

// eventIs is a condition on the outbox event id.
func eventIs(id contract.EventID, what string, holds func(OutboxEvent) bool) Condition {
	return Condition{
		What: fmt.Sprintf("outbox event %d %s", id, what),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			ev, err := a.outboxEvent(ctx, id)
			if err != nil {
				return notFound(err)
			}
			return holds(ev), DescribeEvent(ev), nil
		},
	}
}

// EventProcessed holds once the onboarding bot has handled the event and
// acknowledged it.
func EventProcessed(id contract.EventID) Condition {
	return eventIs(id, "processed", func(ev OutboxEvent) bool { return ev.State == backend.StateProcessed })
}

// EventDead holds once the event is dead-lettered (its tenth failed
// attempt).
func EventDead(id contract.EventID) Condition {
	return eventIs(id, "dead-lettered", func(ev OutboxEvent) bool { return ev.State == backend.StateDead })
}

// EventFailed holds once the event's nth attempt has failed and been
// settled: it is waiting for its next retry (NextRetryAt), or dead.
func EventFailed(id contract.EventID, n int) Condition {
	return eventIs(id, fmt.Sprintf("failed %d times", n), func(ev OutboxEvent) bool {
		return ev.Attempts >= n && ev.ClaimedAt == nil && (ev.State == backend.StateRetrying || ev.State == backend.StateDead)
	})
}

// Funnel is a Telegram user's place in the onboarding funnel: its Stage
// (Name: started, leader_resolved, …, registered, nft_activated) and its
// BindState (none, awaiting, prompted, bound or declined).
type Funnel = onboarding.Funnel

func (a *App) funnel(ctx context.Context, u *User) (Funnel, error) {
	var f struct {
		Funnel Funnel `json:"funnel"`
	}
	err := a.Get(ctx, "/admin/api/bot/funnel/"+u.TelegramID(), &f)
	return f.Funnel, err
}

// Funnel is the user's funnel as the onboarding bot keeps it.
func (a *App) Funnel(t T, u *User) Funnel {
	t.Helper()
	f, err := a.funnel(t.Context(), u)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	return f
}

// FunnelAt holds once the user's funnel is at stage (a stage name, such as
// "registered") or beyond it.
func FunnelAt(u *User, stage string) Condition {
	want, ok := onboarding.StageNamed(stage)
	if !ok {
		return Condition{What: "funnel stage " + stage, Check: func(context.Context, *App) (bool, string, error) {
			return false, "", fmt.Errorf("no funnel stage is called %q", stage)
		}}
	}
	return funnelIs(u, "at stage "+stage+" or beyond", func(f Funnel) bool { return f.Stage >= want })
}

// Bound holds once the user's Telegram is bound to their account.
func Bound(u *User) Condition {
	return funnelIs(u, "bound to an account", func(f Funnel) bool { return f.BindState == onboarding.BindBound })
}

func funnelIs(u *User, what string, holds func(Funnel) bool) Condition {
	return Condition{
		What: fmt.Sprintf("user %d's funnel %s", u.ID, what),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			f, err := a.funnel(ctx, u)
			if err != nil {
				return notFound(err)
			}
			return holds(f), fmt.Sprintf("stage %s, binding %s", f.Name, f.BindState), nil
		},
	}
}

// Notification is a web-cabinet notification of an account: where the
// onboarding bot's message goes when Telegram cannot reach the user (they
// blocked the bot).
type Notification = contract.Notification

func (a *App) notifications(ctx context.Context, uid contract.UID) ([]Notification, error) {
	var res struct {
		Notifications []Notification `json:"notifications"`
	}
	err := a.Get(ctx, "/admin/api/users/"+uidPath(uid)+"/notifications", &res)
	return res.Notifications, err
}

// Notifications are the account's web-cabinet notifications.
func (a *App) Notifications(t T, uid contract.UID) []Notification {
	t.Helper()
	n, err := a.notifications(t.Context(), uid)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	return n
}

// NotifiedOnWeb holds once the account has a web-cabinet notification
// containing text.
func NotifiedOnWeb(uid contract.UID, text string) Condition {
	return Condition{
		What: fmt.Sprintf("a web notification %q for account %d", text, uid),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			ns, err := a.notifications(ctx, uid)
			if err != nil {
				return notFound(err)
			}
			for _, n := range ns {
				if strings.Contains(n.Text, text) {
					return true, "", nil
				}
			}
			return false, fmt.Sprintf("%d notifications", len(ns)), nil
		},
	}
}
