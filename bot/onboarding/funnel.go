package onboarding

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"switchyard/bot/contract"
	"switchyard/store"
)

// Stage is how far a Telegram user got through onboarding. It only grows:
// every write applies the larger of the stored and the new stage, so a late
// or replayed event never moves a user back.
type Stage int

// The onboarding stages. 1–6 are the conversation's steps before the
// backend's events; 7–9 are the spec's (WalletConnected, Registered,
// NftActivated).
const (
	StageNone Stage = 0
	// StageStarted: the user pressed Start (/start) in the bot.
	StageStarted Stage = 1
	// StageLeaderResolved: the user arrived with a referral code that
	// resolved to a leader (GET /bot/leader/resolve).
	StageLeaderResolved Stage = 2
	// StageIntroduced: the user read how onboarding works ("Как это устроено").
	StageIntroduced Stage = 3
	// StageSignupRequested: the user asked for the sign-up step and got the
	// web cabinet's address with their leader's code.
	StageSignupRequested Stage = 4
	// StageAccountLinked: the user came back through the cabinet's
	// telegramConnect link; the bot knows their account (preview Telegram id).
	StageAccountLinked Stage = 5
	// StageWalletRequested: the user asked how to connect a wallet.
	StageWalletRequested Stage = 6
	// StageWalletConnected: wallet_connected arrived.
	StageWalletConnected Stage = 7
	// StageRegistered: registered arrived.
	StageRegistered Stage = 8
	// StageNftActivated: status_nft_activated arrived.
	StageNftActivated Stage = 9
)

var stageNames = [...]string{
	"none", "started", "leader_resolved", "introduced", "signup_requested",
	"account_linked", "wallet_requested", "wallet_connected", "registered", "nft_activated",
}

var stageTitles = [...]string{
	"—", "бот запущен", "пригласивший найден", "знакомство", "регистрация начата",
	"аккаунт найден", "подключение кошелька", "кошелёк подключён", "регистрация подтверждена", "статусный NFT активирован",
}

// String is the stage's stable name, e.g. "wallet_connected".
func (s Stage) String() string {
	if s < 0 || int(s) >= len(stageNames) {
		return "stage_" + strconv.Itoa(int(s))
	}
	return stageNames[s]
}

// StageNamed is the stage whose String is name.
func StageNamed(name string) (Stage, bool) {
	i := slices.Index(stageNames[:], name)
	return Stage(i), i >= 0
}

// Title is the stage as the bot names it to the user.
func (s Stage) Title() string {
	if s < 0 || int(s) >= len(stageTitles) {
		return s.String()
	}
	return stageTitles[s]
}

// BindState is where the binding of a Telegram id to the account stands, as
// the bot saw it.
type BindState string

// The binding states. Bound is final.
const (
	BindNone BindState = "none"
	// BindAwaiting: a connect token was redeemed; the binding waits for the
	// user's confirmation.
	BindAwaiting BindState = "awaiting"
	// BindPrompted: the bot showed the confirm prompt.
	BindPrompted BindState = "prompted"
	// BindBound: POST /bot/telegram/bind succeeded (or the account was bound already).
	BindBound BindState = "bound"
	// BindDeclined: the user answered "not my account".
	BindDeclined BindState = "declined"
)

// nextBind is the binding state after want is asked for: bound never changes,
// and the empty want keeps cur.
func nextBind(cur, want BindState) BindState {
	if cur == BindBound || want == "" {
		return cur
	}
	return want
}

// Funnel is one Telegram user's onboarding as the bot records it.
type Funnel struct {
	TelegramID contract.TelegramID `json:"telegramId"`
	// UID is the backend account, once known (connect token, or an event
	// naming both).
	UID   *contract.UID `json:"uid"`
	Stage Stage         `json:"stage"`
	Name  string        `json:"stageName"`
	// LeaderUID, LeaderCode and LeaderName are the leader the user arrived
	// with: the first referral code that resolved.
	LeaderUID  *contract.UID `json:"leaderUid"`
	LeaderCode string        `json:"leaderCode,omitempty"`
	LeaderName string        `json:"leaderName,omitempty"`
	// RegisteredLeaderUID is the leader the registered event named.
	RegisteredLeaderUID *contract.UID `json:"registeredLeaderUid"`
	// LeftLeaderAt is set when the user registered under a leader other than
	// the one they arrived with.
	LeftLeaderAt *time.Time `json:"leftLeaderAt"`
	BindState    BindState  `json:"bindState"`
	CreatedAt    time.Time  `json:"createdAt"`
	UpdatedAt    time.Time  `json:"updatedAt"`
}

// FunnelChange is one entry of a funnel's history.
type FunnelChange struct {
	ID       int64     `json:"id"`
	Cause    string    `json:"cause"`
	Change   string    `json:"change"`
	OldValue *string   `json:"oldValue"`
	NewValue *string   `json:"newValue"`
	At       time.Time `json:"at"`
}

// funnelChange is what a handler asks of a funnel row; zero fields change nothing.
type funnelChange struct {
	Stage Stage         // raise the stage to at least this
	UID   *contract.UID // the account, once known
	// Leader is the leader a referral code resolved to; it is kept only when
	// the user has none yet (the one they arrived with).
	Leader *contract.Leader
	// Registered carries the leader the registered event named (RegisteredLeader,
	// nil for none).
	Registered       bool
	RegisteredLeader *contract.UID
	Bind             BindState
}

// historyEntry is a change applyChange made.
type historyEntry struct {
	change   string
	from, to *string
}

func strPtr(s string) *string { return &s }

func uidText(u *contract.UID) *string {
	if u == nil {
		return nil
	}
	return strPtr(strconv.FormatInt(int64(*u), 10))
}

func sameUID(a, b *contract.UID) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// applyChange is the funnel rule: the stage only grows, the arrival leader is
// the first one, the binding follows nextBind, and a registration under a
// leader other than the arrival leader (none counts as other) marks the user
// as having left, once. It returns the new row and what changed.
func applyChange(cur Funnel, ch funnelChange, now time.Time) (Funnel, []historyEntry) {
	next := cur
	var hist []historyEntry
	if ch.Stage > cur.Stage {
		next.Stage = ch.Stage
		hist = append(hist, historyEntry{"stage", strPtr(cur.Stage.String()), strPtr(ch.Stage.String())})
	}
	if ch.UID != nil && !sameUID(cur.UID, ch.UID) {
		u := *ch.UID
		next.UID = &u
		hist = append(hist, historyEntry{"account", uidText(cur.UID), uidText(ch.UID)})
	}
	if ch.Leader != nil && cur.LeaderUID == nil {
		u := ch.Leader.UID
		next.LeaderUID, next.LeaderCode, next.LeaderName = &u, ch.Leader.Link, ch.Leader.Name
		hist = append(hist, historyEntry{"leader", nil, uidText(&u)})
	}
	if ch.Registered {
		if !sameUID(cur.RegisteredLeaderUID, ch.RegisteredLeader) {
			next.RegisteredLeaderUID = nil
			if ch.RegisteredLeader != nil {
				u := *ch.RegisteredLeader
				next.RegisteredLeaderUID = &u
			}
			hist = append(hist, historyEntry{"registered_leader", uidText(cur.RegisteredLeaderUID), uidText(ch.RegisteredLeader)})
		}
		if next.LeaderUID != nil && !sameUID(next.LeaderUID, ch.RegisteredLeader) && cur.LeftLeaderAt == nil {
			at := now
			next.LeftLeaderAt = &at
			hist = append(hist, historyEntry{"left_leader", uidText(next.LeaderUID), uidText(ch.RegisteredLeader)})
		}
	}
	if b := nextBind(cur.BindState, ch.Bind); b != cur.BindState {
		next.BindState = b
		hist = append(hist, historyEntry{"bind", strPtr(string(cur.BindState)), strPtr(string(b))})
	}
	if len(hist) > 0 {
		next.UpdatedAt = now
	}
	next.Name = next.Stage.String()
	return next, hist
}

const funnelColumns = `telegram_id, uid, stage, leader_uid, leader_code, leader_name, registered_leader_uid,
	left_leader_at, bind_state, created_at, updated_at`

func scanFunnel(s scanner) (Funnel, error) {
	var (
		f                      Funnel
		uid, leader, regLeader sql.NullInt64
		code, name             sql.NullString
		left, created, updated store.Timestamp
		tg                     string
		stage                  int
		bind                   string
	)
	if err := s.Scan(&tg, &uid, &stage, &leader, &code, &name, &regLeader, &left, &bind, &created, &updated); err != nil {
		return Funnel{}, err
	}
	f.TelegramID, f.Stage, f.BindState = contract.TelegramID(tg), Stage(stage), BindState(bind)
	f.UID, f.LeaderUID, f.RegisteredLeaderUID = uidPtr(uid), uidPtr(leader), uidPtr(regLeader)
	f.LeaderCode, f.LeaderName = code.String, name.String
	f.LeftLeaderAt, f.CreatedAt, f.UpdatedAt = left.Ptr(), created.Time, updated.Time
	f.Name = f.Stage.String()
	return f, nil
}

// ErrFunnelNotFound is a Telegram user the bot has no funnel for.
const ErrFunnelNotFound = Error("funnel not found")

// forUpdate ends a select of a funnel row that the transaction goes on to
// decide from and change. The outbox consumer and the updates worker change
// one user's funnel from transactions of their own, which on PostgreSQL run
// side by side: there it locks the row to the commit, so that the second
// waits and reads what the first wrote (READ COMMITTED) instead of writing
// back a change decided from the row as it was — the stage moving back, a
// binding undone. SQLite's single writer runs one write transaction at a
// time already, and has no such clause.
func (o *Bot) forUpdate() string {
	if o.db.Postgres() {
		return ` for no key update` // the lock the update takes; nothing references the row
	}
	return ``
}

// loadFunnel reads tg's funnel with q (a transaction or the read pool); lock
// is "" or, inside a transaction that changes the row, forUpdate's clause.
func loadFunnel(ctx context.Context, q queryRower, tg contract.TelegramID, lock string) (Funnel, error) {
	f, err := scanFunnel(q.QueryRowContext(ctx, `select `+funnelColumns+` from bot_funnel where telegram_id = ?`+lock, string(tg)))
	if errors.Is(err, sql.ErrNoRows) {
		return Funnel{}, ErrFunnelNotFound
	}
	if err != nil {
		return Funnel{}, fmt.Errorf("read funnel: %w", err)
	}
	return f, nil
}

// funnelByUID finds the funnel of the Telegram user last linked to uid; lock
// is as loadFunnel's.
func funnelByUID(ctx context.Context, q queryRower, uid contract.UID, lock string) (Funnel, error) {
	f, err := scanFunnel(q.QueryRowContext(ctx,
		`select `+funnelColumns+` from bot_funnel where uid = ? order by updated_at desc limit 1`+lock, int64(uid)))
	if errors.Is(err, sql.ErrNoRows) {
		return Funnel{}, ErrFunnelNotFound
	}
	if err != nil {
		return Funnel{}, fmt.Errorf("read funnel by uid: %w", err)
	}
	return f, nil
}

const (
	funnelInsertSQL = `insert into bot_funnel (telegram_id, stage, bind_state, created_at, updated_at)
		values (?, 0, 'none', ?, ?) on conflict (telegram_id) do nothing`
	funnelUpdateSQL = `update bot_funnel set uid = ?, stage = ?, leader_uid = ?, leader_code = ?, leader_name = ?,
		registered_leader_uid = ?, left_leader_at = ?, bind_state = ?, updated_at = ?
		where telegram_id = ?`
	funnelHistorySQL = `insert into bot_funnel_history (telegram_id, cause, change, old_value, new_value, at)
		values (?, ?, ?, ?, ?, ?)`
)

// applyFunnel applies ch to tg's funnel inside tx (creating the row on first
// sight) and records each change with its cause. It returns the row before
// and after, and whether anything changed. The row is read locked
// (forUpdate), so the change applies to the row as the last committed
// change left it.
func (o *Bot) applyFunnel(ctx context.Context, tx *sql.Tx, now time.Time, tg contract.TelegramID, cause string, ch funnelChange) (before, after Funnel, changed bool, err error) {
	if _, err := tx.ExecContext(ctx, funnelInsertSQL, string(tg), store.TS(now), store.TS(now)); err != nil {
		return Funnel{}, Funnel{}, false, fmt.Errorf("create funnel: %w", err)
	}
	before, err = loadFunnel(ctx, tx, tg, o.forUpdate())
	if err != nil {
		return Funnel{}, Funnel{}, false, err
	}
	after, hist := applyChange(before, ch, now)
	if len(hist) == 0 {
		return before, after, false, nil
	}
	var code, name any
	if after.LeaderUID != nil {
		code, name = after.LeaderCode, after.LeaderName
	}
	var left store.Timestamp
	if after.LeftLeaderAt != nil {
		left = store.TS(*after.LeftLeaderAt)
	}
	if _, err := tx.ExecContext(ctx, funnelUpdateSQL,
		nullUID(after.UID), int(after.Stage), nullUID(after.LeaderUID), code, name,
		nullUID(after.RegisteredLeaderUID), left, string(after.BindState), store.TS(now), string(tg)); err != nil {
		return Funnel{}, Funnel{}, false, fmt.Errorf("update funnel: %w", err)
	}
	for _, h := range hist {
		if _, err := tx.ExecContext(ctx, funnelHistorySQL, string(tg), cause, h.change, h.from, h.to, store.TS(now)); err != nil {
			return Funnel{}, Funnel{}, false, fmt.Errorf("funnel history: %w", err)
		}
	}
	return before, after, true, nil
}

// FunnelFilter selects funnels for ListFunnels.
type FunnelFilter struct {
	// Stage, when above zero, keeps users at exactly that stage.
	Stage Stage
	// LeftLeader keeps only users who registered under another leader.
	LeftLeader bool
	// Search keeps the users a term finds: a number is a Telegram id or a
	// uid; other text finds no one.
	Search string
	// Before keeps the users after this key (Funnel.Key) in the list's
	// order, changed last first: an older window. After keeps those before
	// it, nearest the key first: a newer window.
	Before, After string
	// Limit caps the answer (default 100, at most 500).
	Limit int
}

// ListFunnels lists a window of funnels, most recently changed first.
func (o *Bot) ListFunnels(ctx context.Context, f FunnelFilter) ([]Funnel, error) {
	q, args, err := f.listSQL()
	if err != nil {
		return nil, err
	}
	rows, err := o.db.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list funnels: %w", err)
	}
	defer rows.Close()
	list := make([]Funnel, 0)
	for rows.Next() {
		fu, err := scanFunnel(rows)
		if err != nil {
			return nil, fmt.Errorf("list funnels: %w", err)
		}
		list = append(list, fu)
	}
	return list, rows.Err()
}

// GetFunnel reads one Telegram user's funnel and its history, oldest change first.
func (o *Bot) GetFunnel(ctx context.Context, tg contract.TelegramID) (Funnel, []FunnelChange, error) {
	f, err := loadFunnel(ctx, o.db.Read, tg, "")
	if err != nil {
		return Funnel{}, nil, err
	}
	rows, err := o.db.Read.QueryContext(ctx,
		`select id, cause, change, old_value, new_value, at from bot_funnel_history
		 where telegram_id = ? order by id limit 1000`, string(tg))
	if err != nil {
		return Funnel{}, nil, fmt.Errorf("funnel history: %w", err)
	}
	defer rows.Close()
	hist := make([]FunnelChange, 0)
	for rows.Next() {
		var (
			c        FunnelChange
			from, to sql.NullString
			at       store.Timestamp
		)
		if err := rows.Scan(&c.ID, &c.Cause, &c.Change, &from, &to, &at); err != nil {
			return Funnel{}, nil, fmt.Errorf("funnel history: %w", err)
		}
		if from.Valid {
			c.OldValue = &from.String
		}
		if to.Valid {
			c.NewValue = &to.String
		}
		c.At = at.Time
		hist = append(hist, c)
	}
	return f, hist, rows.Err()
}

// Stats is the console's read of the funnel that needs no running bot: a
// process without the bot role shows the counts too.
type Stats struct{ db *store.DB }

// NewStats returns the funnel's counts on db. A nil DB is a wiring mistake
// and panics.
func NewStats(db *store.DB) *Stats {
	if db == nil {
		panic("onboarding: NewStats needs a DB")
	}
	return &Stats{db: db}
}

// CountByStage counts the funnel's users at each stage (stages nobody is at
// are absent).
func (s *Stats) CountByStage(ctx context.Context) (map[Stage]int64, error) {
	rows, err := s.db.Read.QueryContext(ctx, `select stage, count(*) from bot_funnel group by stage`)
	if err != nil {
		return nil, fmt.Errorf("funnel by stage: %w", err)
	}
	defer rows.Close()
	out := make(map[Stage]int64)
	for rows.Next() {
		var (
			stage Stage
			n     int64
		)
		if err := rows.Scan(&stage, &n); err != nil {
			return nil, fmt.Errorf("funnel by stage: %w", err)
		}
		out[stage] = n
	}
	return out, rows.Err()
}
