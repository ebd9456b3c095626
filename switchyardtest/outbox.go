package switchyardtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"switchyard/bot/contract"
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

// Account is a backend account (the contract's user, magnet_users).
type Account struct {
	UID                   int64   `json:"uid"`
	Link                  string  `json:"link"`
	Name                  string  `json:"name"`
	TelegramID            *string `json:"telegramId"`
	PreviewTelegramID     *string `json:"previewTelegramId"`
	LeaderUID             *int64  `json:"leaderUid"`
	RegistrationConfirmed bool    `json:"registrationConfirmed"`
}

// NewAccount is what CreateAccount creates: Link is the account's referral
// code (what a /start payload names), TelegramID an optional bound
// Telegram id, LeaderUID an optional leader.
type NewAccount struct {
	Link       string `json:"link"`
	Name       string `json:"name"`
	TelegramID string `json:"telegramId,omitempty"`
	LeaderUID  int64  `json:"leaderUid,omitempty"`
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
func (a *App) ConnectLink(t T, uid int64) string {
	t.Helper()
	var l struct {
		StartParam string `json:"startParam"`
	}
	a.Do(t, http.MethodPost, "/bot/telegram/connect-link", map[string]int64{"uid": uid}, &l)
	return l.StartParam
}

// Register confirms the account's registration under leaderUID (0: none),
// as the backend does; it emits the registered event and returns the ids
// of the events it emitted.
func (a *App) Register(t T, uid, leaderUID int64) []int64 {
	t.Helper()
	body := map[string]any{"leaderUid": nil}
	if leaderUID != 0 {
		body["leaderUid"] = leaderUID
	}
	var res struct {
		EventIDs []int64 `json:"eventIds"`
	}
	a.Do(t, http.MethodPost, "/admin/api/users/"+strconv.FormatInt(uid, 10)+"/register", body, &res)
	return res.EventIDs
}

// Event is an outbox event as the backend writes it: for the Telegram user
// TelegramID or the account MagnetUID (one of them at least), with a
// payload of the type's shape (any JSON object, or nil).
type Event struct {
	Type       EventType `json:"eventType"`
	TelegramID string    `json:"telegramId,omitempty"`
	MagnetUID  int64     `json:"magnetUid,omitempty"`
	Payload    any       `json:"payload,omitempty"`
}

// EmitEvent writes ev to the outbox as given (the backend's transactional
// emit) and returns its id. The onboarding bot takes it at once.
func (a *App) EmitEvent(t T, ev Event) int64 {
	t.Helper()
	var res struct {
		ID int64 `json:"id"`
	}
	a.Do(t, http.MethodPost, "/admin/api/bot/events", ev, &res)
	return res.ID
}

// OutboxEvent is an outbox event with its delivery state.
type OutboxEvent struct {
	ID          int64           `json:"id"`
	Type        EventType       `json:"eventType"`
	TelegramID  *string         `json:"telegramId"`
	MagnetUID   *int64          `json:"magnetUid"`
	Payload     json.RawMessage `json:"payload"`
	CreatedAt   time.Time       `json:"createdAt"`
	ProcessedAt *time.Time      `json:"processedAt"`
	Attempts    int             `json:"attempts"`
	ClaimedAt   *time.Time      `json:"claimedAt"`
	LastError   *string         `json:"lastError"`
	NextRetryAt *time.Time      `json:"nextRetryAt"`
	// State is pending, retrying, processed or dead.
	State          string     `json:"state"`
	DeadLetteredAt *time.Time `json:"deadLetteredAt"`
}

func (a *App) outboxEvent(ctx context.Context, id int64) (OutboxEvent, error) {
	var ev OutboxEvent
	err := a.Get(ctx, "/admin/api/bot/events/"+strconv.FormatInt(id, 10), &ev)
	return ev, err
}

// OutboxEvent is the event id as the outbox has it now.
func (a *App) OutboxEvent(t T, id int64) OutboxEvent {
	t.Helper()
	ev, err := a.outboxEvent(t.Context(), id)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	return ev
}

func (ev OutboxEvent) String() string {
	s := fmt.Sprintf("event %d %s after %d attempts", ev.ID, ev.State, ev.Attempts)
	if ev.LastError != nil {
		s += ", last error " + strconv.Quote(*ev.LastError)
	}
	return s
}

// eventIs is a condition on the outbox event id.
func eventIs(id int64, what string, holds func(OutboxEvent) bool) Condition {
	return Condition{
		What: fmt.Sprintf("outbox event %d %s", id, what),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			ev, err := a.outboxEvent(ctx, id)
			if err != nil {
				return notFound(err)
			}
			return holds(ev), ev.String(), nil
		},
	}
}

// EventProcessed holds once the onboarding bot has handled the event and
// acknowledged it.
func EventProcessed(id int64) Condition {
	return eventIs(id, "processed", func(ev OutboxEvent) bool { return ev.State == "processed" })
}

// EventDead holds once the event is dead-lettered (its tenth failed
// attempt).
func EventDead(id int64) Condition {
	return eventIs(id, "dead-lettered", func(ev OutboxEvent) bool { return ev.State == "dead" })
}

// EventFailed holds once the event's nth attempt has failed and been
// settled: it is waiting for its next retry (NextRetryAt), or dead.
func EventFailed(id int64, n int) Condition {
	return eventIs(id, fmt.Sprintf("failed %d times", n), func(ev OutboxEvent) bool {
		return ev.Attempts >= n && ev.ClaimedAt == nil && (ev.State == "retrying" || ev.State == "dead")
	})
}

// Funnel is a Telegram user's place in the onboarding funnel.
type Funnel struct {
	TelegramID string `json:"telegramId"`
	UID        *int64 `json:"uid"`
	// StageName is started, leader_resolved, introduced, signup_requested,
	// account_linked, wallet_requested, wallet_connected, registered or
	// nft_activated.
	StageName string `json:"stageName"`
	Stage     int    `json:"stage"`
	LeaderUID *int64 `json:"leaderUid"`
	// BindState is none, awaiting, prompted, bound or declined.
	BindState string `json:"bindState"`
}

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
	want, ok := stages[stage]
	if !ok {
		return Condition{What: "funnel stage " + stage, Check: func(context.Context, *App) (bool, string, error) {
			return false, "", fmt.Errorf("no funnel stage is called %q", stage)
		}}
	}
	return funnelIs(u, "at stage "+stage+" or beyond", func(f Funnel) bool { return f.Stage >= want })
}

// Bound holds once the user's Telegram is bound to their account.
func Bound(u *User) Condition {
	return funnelIs(u, "bound to an account", func(f Funnel) bool { return f.BindState == "bound" })
}

func funnelIs(u *User, what string, holds func(Funnel) bool) Condition {
	return Condition{
		What: fmt.Sprintf("user %d's funnel %s", u.ID, what),
		Check: func(ctx context.Context, a *App) (bool, string, error) {
			f, err := a.funnel(ctx, u)
			if err != nil {
				return notFound(err)
			}
			return holds(f), fmt.Sprintf("stage %s, binding %s", f.StageName, f.BindState), nil
		},
	}
}

// stages are the funnel's stages by name, in order.
var stages = map[string]int{
	"started": 1, "leader_resolved": 2, "introduced": 3, "signup_requested": 4, "account_linked": 5,
	"wallet_requested": 6, "wallet_connected": 7, "registered": 8, "nft_activated": 9,
}

// Notification is a web-cabinet notification of an account: where the
// onboarding bot's message goes when Telegram cannot reach the user (they
// blocked the bot).
type Notification struct {
	ID   int64  `json:"id"`
	Kind string `json:"kind"`
	Text string `json:"text"`
}

func (a *App) notifications(ctx context.Context, uid int64) ([]Notification, error) {
	var res struct {
		Notifications []Notification `json:"notifications"`
	}
	err := a.Get(ctx, "/admin/api/users/"+strconv.FormatInt(uid, 10)+"/notifications", &res)
	return res.Notifications, err
}

// Notifications are the account's web-cabinet notifications.
func (a *App) Notifications(t T, uid int64) []Notification {
	t.Helper()
	n, err := a.notifications(t.Context(), uid)
	if err != nil {
		t.Fatalf("switchyardtest: %v", err)
	}
	return n
}

// NotifiedOnWeb holds once the account has a web-cabinet notification
// containing text.
func NotifiedOnWeb(uid int64, text string) Condition {
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
