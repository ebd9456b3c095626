package bot

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"switchyard/authlimit"
	"switchyard/store"
)

// BackendOpts configure NewBackend. Zero values get defaults.
type BackendOpts struct {
	DB *store.DB
	// Secret is BOT_TO_BACKEND_SECRET, shared with the bot. It must not be empty.
	Secret string
	// Logger gets the outbox's dead-letter lines; nil discards.
	Logger *slog.Logger
	// BotUsername is the onboarding bot's @username (without @), used in the
	// t.me deep link of a connect token. Default "switchyard_onboarding_bot".
	BotUsername string
	// ConnectTokenTTL is how long a connect token can be redeemed. Default 24 h.
	ConnectTokenTTL time.Duration
	// PollInterval is the long-poll's fallback look at the table. Default 1 s.
	PollInterval time.Duration
	// AuthLimiter throttles wrong Bearer secrets on the /bot/* contract. Pass
	// the process's one limiter, so every surface counts a client's failures
	// together; nil gets a limiter of this backend's own.
	AuthLimiter *authlimit.Limiter
}

// Backend is the backend side of the bot contract: the outbox, the minimal
// domain it reports on (users, web notifications, connect tokens), and the
// HTTP routes (Routes for the bot, AdminRoutes for operators).
type Backend struct {
	db          *store.DB
	outbox      *Outbox
	secret      string
	authLimit   *authlimit.Limiter
	log         *slog.Logger
	botUsername string
	tokenTTL    time.Duration
}

// NewBackend returns a Backend. A nil DB or an empty secret is a wiring
// mistake and panics.
func NewBackend(opts BackendOpts) *Backend {
	if opts.DB == nil {
		panic("bot: NewBackend needs a DB")
	}
	if opts.Secret == "" {
		panic("bot: NewBackend needs BOT_TO_BACKEND_SECRET")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.BotUsername == "" {
		opts.BotUsername = "switchyard_onboarding_bot"
	}
	if opts.ConnectTokenTTL <= 0 {
		opts.ConnectTokenTTL = 24 * time.Hour
	}
	if opts.AuthLimiter == nil {
		opts.AuthLimiter = authlimit.New(authlimit.Opts{Logger: opts.Logger})
	}
	return &Backend{
		db:          opts.DB,
		outbox:      NewOutbox(OutboxOpts{DB: opts.DB, Logger: opts.Logger, PollInterval: opts.PollInterval}),
		secret:      opts.Secret,
		authLimit:   opts.AuthLimiter,
		log:         opts.Logger,
		botUsername: strings.TrimPrefix(opts.BotUsername, "@"),
		tokenTTL:    opts.ConnectTokenTTL,
	}
}

// Shutdown ends the long-polls of GET /bot/events/pending (see
// Outbox.StopWaiting); register it with http.Server.RegisterOnShutdown.
func (b *Backend) Shutdown() { b.outbox.StopWaiting() }

// Outbox returns the backend's outbox, for code that emits inside its own
// business transactions.
func (b *Backend) Outbox() *Outbox { return b.outbox }

// User is a backend account.
type User struct {
	UID                   UID         `json:"uid"`
	Link                  string      `json:"link"`
	Name                  string      `json:"name"`
	TelegramID            *TelegramID `json:"telegramId"`
	PreviewTelegramID     *TelegramID `json:"previewTelegramId"`
	LeaderUID             *UID        `json:"leaderUid"`
	Addr                  *string     `json:"addr"`
	LP1                   bool        `json:"lp1"`
	LP2                   bool        `json:"lp2"`
	TimeActive            *time.Time  `json:"timeActive"`
	RegistrationConfirmed bool        `json:"registrationConfirmed"`
	CreatedAt             time.Time   `json:"createdAt"`
}

// target is who an event about u is for: the user, and the Telegram id the
// bot can reach them at (bound, else the one awaiting confirmation).
func (u User) target() Target {
	t := Target{MagnetUID: u.UID}
	switch {
	case u.TelegramID != nil:
		t.TelegramID = *u.TelegramID
	case u.PreviewTelegramID != nil:
		t.TelegramID = *u.PreviewTelegramID
	}
	return t
}

const userColumns = `uid, link, name, telegram_id, preview_telegram_id, leader_uid, addr, lp1, lp2,
	time_active, registration_confirmed, created_at`

func scanUser(s scanner) (User, error) {
	var (
		u               User
		tg, preview     sql.NullString
		leader          sql.NullInt64
		addr            sql.NullString
		active, created store.Timestamp
		lp1, lp2, reg   int
	)
	err := s.Scan(&u.UID, &u.Link, &u.Name, &tg, &preview, &leader, &addr, &lp1, &lp2, &active, &reg, &created)
	if err != nil {
		return User{}, err
	}
	u.TelegramID, u.PreviewTelegramID, u.LeaderUID = tgPtr(tg), tgPtr(preview), uidPtr(leader)
	if addr.Valid {
		u.Addr = &addr.String
	}
	u.LP1, u.LP2, u.RegistrationConfirmed = lp1 == 1, lp2 == 1, reg == 1
	u.TimeActive, u.CreatedAt = active.Ptr(), created.Time
	return u, nil
}

// userBy reads one user with q (the read pool, or a transaction for
// read-your-writes); where is a constant condition with one parameter.
func userBy(ctx context.Context, q queryRower, where string, arg any) (User, error) {
	u, err := scanUser(q.QueryRowContext(ctx, `select `+userColumns+` from users where `+where, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, ErrUserNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("read user: %w", err)
	}
	return u, nil
}

// NewUser is the input of CreateUser (POST /admin/api/users).
type NewUser struct {
	Link       string     `json:"link"`
	Name       string     `json:"name"`
	TelegramID TelegramID `json:"telegramId,omitempty"`
	LeaderUID  UID        `json:"leaderUid,omitempty"`
}

var linkPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (n *NewUser) validate() error {
	n.Link, n.Name = strings.TrimSpace(n.Link), strings.TrimSpace(n.Name)
	if !linkPattern.MatchString(n.Link) {
		return invalidf("link must be 1 to 64 letters, digits, _ or -")
	}
	if n.Name == "" || utf8.RuneCountInString(n.Name) > 200 || !utf8.ValidString(n.Name) {
		return invalidf("name must be 1 to 200 characters")
	}
	if n.LeaderUID < 0 {
		return invalidf("leaderUid must be a positive uid")
	}
	return nil
}

// CreateUser creates an account. A taken link or Telegram id is a conflict;
// an unknown leader is ErrLeaderNotFound.
func (b *Backend) CreateUser(ctx context.Context, n NewUser) (User, error) {
	if err := n.validate(); err != nil {
		return User{}, err
	}
	var u User
	err := b.db.Tx(ctx, func(tx *sql.Tx) error {
		if err := checkFree(ctx, tx, n.Link, n.TelegramID); err != nil {
			return err
		}
		var leader any
		if n.LeaderUID != 0 {
			if _, err := userBy(ctx, tx, `uid = ?`, n.LeaderUID); err != nil {
				return leaderErr(err)
			}
			leader = int64(n.LeaderUID)
		}
		var tg any
		if n.TelegramID != "" {
			tg = string(n.TelegramID)
		}
		var uid UID
		if err := tx.QueryRowContext(ctx,
			`insert into users (link, name, telegram_id, leader_uid, created_at) values (?, ?, ?, ?, ?) returning uid`,
			n.Link, n.Name, tg, leader, store.TS(b.db.Now())).Scan(&uid); err != nil {
			return fmt.Errorf("create user: %w", err)
		}
		var err error
		u, err = userBy(ctx, tx, `uid = ?`, uid)
		return err
	})
	return u, err
}

func checkFree(ctx context.Context, tx *sql.Tx, link string, tg TelegramID) error {
	var n int
	if err := tx.QueryRowContext(ctx, `select count(*) from users where link = ?`, link).Scan(&n); err != nil {
		return fmt.Errorf("check link: %w", err)
	}
	if n > 0 {
		return ErrLinkTaken
	}
	if tg == "" {
		return nil
	}
	if err := tx.QueryRowContext(ctx, `select count(*) from users where telegram_id = ?`, string(tg)).Scan(&n); err != nil {
		return fmt.Errorf("check telegram id: %w", err)
	}
	if n > 0 {
		return ErrTelegramTaken
	}
	return nil
}

func leaderErr(err error) error {
	if errors.Is(err, ErrUserNotFound) {
		return ErrLeaderNotFound
	}
	return err
}

// GetUser reads one account.
func (b *Backend) GetUser(ctx context.Context, uid UID) (User, error) {
	return userBy(ctx, b.db.Read, `uid = ?`, uid)
}

// ActionResult is what a backend action changed: the account afterwards and
// the events it emitted in the same transaction (none when it changed nothing).
type ActionResult struct {
	User     User      `json:"user"`
	EventIDs []EventID `json:"eventIds"`
}

// action runs fn on the user uid inside one transaction that wakes the
// consumers once it committed, and returns the user as fn left it.
func (b *Backend) action(ctx context.Context, uid UID, fn func(tx *sql.Tx, u User) ([]EventID, error)) (ActionResult, error) {
	var res ActionResult
	err := b.outbox.Tx(ctx, func(tx *sql.Tx) error {
		u, err := userBy(ctx, tx, `uid = ?`, uid)
		if err != nil {
			return err
		}
		ids, err := fn(tx, u)
		if err != nil {
			return err
		}
		res.EventIDs = append(make([]EventID, 0, len(ids)), ids...)
		res.User, err = userBy(ctx, tx, `uid = ?`, uid)
		return err
	})
	return res, err
}

var addrPattern = regexp.MustCompile(`^[A-Za-z0-9_:+/=-]{1,128}$`)

// ConnectWallet records the user's wallet and emits wallet_connected in the
// same transaction. Connecting the same address again changes nothing.
func (b *Backend) ConnectWallet(ctx context.Context, uid UID, addr string) (ActionResult, error) {
	addr = strings.TrimSpace(addr)
	if !addrPattern.MatchString(addr) {
		return ActionResult{}, invalidf("addr must be 1 to 128 address characters")
	}
	return b.action(ctx, uid, func(tx *sql.Tx, u User) ([]EventID, error) {
		if u.Addr != nil && *u.Addr == addr {
			return nil, nil
		}
		if _, err := tx.ExecContext(ctx, `update users set addr = ? where uid = ?`, addr, uid); err != nil {
			return nil, fmt.Errorf("connect wallet: %w", err)
		}
		id, err := b.outbox.EmitWalletConnectedTx(ctx, tx, u.target(), WalletConnectedPayload{Addr: addr})
		return []EventID{id}, err
	})
}

// registerDecision says what a registration does to an account.
type registerDecision struct {
	Apply bool // false: already registered under this leader, nothing to do
}

// decideRegister: a first registration applies; registering again under the
// same leader is a no-op; under another leader it is ErrAlreadyRegistered;
// a user cannot lead themselves.
func decideRegister(u User, leader *UID) (registerDecision, error) {
	if leader != nil && *leader == u.UID {
		return registerDecision{}, invalidf("a user cannot be their own leader")
	}
	if !u.RegistrationConfirmed {
		return registerDecision{Apply: true}, nil
	}
	same := (u.LeaderUID == nil && leader == nil) || (u.LeaderUID != nil && leader != nil && *u.LeaderUID == *leader)
	if same {
		return registerDecision{}, nil
	}
	return registerDecision{}, ErrAlreadyRegistered
}

// Register confirms the user's registration under leader (nil: no leader) —
// the on-chain sync's job — and, in the same transaction, emits registered
// for the user and new_partner for the leader.
func (b *Backend) Register(ctx context.Context, uid UID, leader *UID) (ActionResult, error) {
	return b.action(ctx, uid, func(tx *sql.Tx, u User) ([]EventID, error) {
		d, err := decideRegister(u, leader)
		if err != nil || !d.Apply {
			return nil, err
		}
		var lead *User
		if leader != nil {
			l, err := userBy(ctx, tx, `uid = ?`, *leader)
			if err != nil {
				return nil, leaderErr(err)
			}
			lead = &l
		}
		now := store.TS(b.db.Now())
		if _, err := tx.ExecContext(ctx,
			`update users set registration_confirmed = 1, leader_uid = ?, time_active = coalesce(time_active, ?) where uid = ?`,
			nullUID(leader), now, uid); err != nil {
			return nil, fmt.Errorf("register: %w", err)
		}
		p := RegisteredPayload{LeaderUID: leader}
		if lead != nil {
			p.LeaderLink = lead.Link
		}
		id, err := b.outbox.EmitRegisteredTx(ctx, tx, u.target(), p)
		if err != nil || lead == nil {
			return []EventID{id}, err
		}
		partner, err := b.outbox.EmitNewPartnerTx(ctx, tx, lead.target(),
			NewPartnerPayload{PartnerUID: u.UID, PartnerName: u.Name, PartnerLink: u.Link})
		return []EventID{id, partner}, err
	})
}

// ActivateNFT records a status NFT level and emits status_nft_activated in
// the same transaction. A level already active changes nothing.
func (b *Backend) ActivateNFT(ctx context.Context, uid UID, level NftLevel) (ActionResult, error) {
	var column string
	switch level {
	case NftLP1:
		column = "lp1"
	case NftLP2:
		column = "lp2"
	default:
		return ActionResult{}, invalidf("level must be lp1 or lp2, not %q", level)
	}
	return b.action(ctx, uid, func(tx *sql.Tx, u User) ([]EventID, error) {
		if (level == NftLP1 && u.LP1) || (level == NftLP2 && u.LP2) {
			return nil, nil
		}
		if _, err := tx.ExecContext(ctx, `update users set `+column+` = 1 where uid = ?`, uid); err != nil {
			return nil, fmt.Errorf("activate nft: %w", err)
		}
		id, err := b.outbox.EmitStatusNftActivatedTx(ctx, tx, u.target(), StatusNftActivatedPayload{Level: level})
		return []EventID{id}, err
	})
}

// Leader is the answer of GET /bot/leader/resolve.
type Leader struct {
	UID  UID    `json:"uid"`
	Link string `json:"link"`
	Name string `json:"name"`
}

// ResolveLeader finds the user whose referral link is code.
func (b *Backend) ResolveLeader(ctx context.Context, code string) (Leader, error) {
	code = strings.TrimSpace(code)
	if code == "" {
		return Leader{}, invalidf("code is required")
	}
	u, err := userBy(ctx, b.db.Read, `link = ?`, code)
	if err != nil {
		return Leader{}, leaderErr(err)
	}
	return Leader{UID: u.UID, Link: u.Link, Name: u.Name}, nil
}

// UserState is the answer of GET /bot/user/state: what the bot's console gate needs.
type UserState struct {
	IsRegistrationConfirmed bool       `json:"isRegistrationConfirmed"`
	LP1                     bool       `json:"lp1"`
	LP2                     bool       `json:"lp2"`
	Addr                    *string    `json:"addr"`
	TimeActive              *time.Time `json:"timeActive"`
	OwnLink                 string     `json:"ownLink"`
}

// UserState reads the state of the account bound to Telegram id tg.
func (b *Backend) UserState(ctx context.Context, tg TelegramID) (UserState, error) {
	u, err := userBy(ctx, b.db.Read, `telegram_id = ?`, string(tg))
	if err != nil {
		return UserState{}, err
	}
	return UserState{
		IsRegistrationConfirmed: u.RegistrationConfirmed,
		LP1:                     u.LP1, LP2: u.LP2,
		Addr: u.Addr, TimeActive: u.TimeActive, OwnLink: u.Link,
	}, nil
}

// AccountCheck is the answer of GET /auth/check-account-by-telegram/{id}.
type AccountCheck struct {
	Exists bool `json:"exists"`
	UID    *UID `json:"uid"`
}

// CheckAccountByTelegram tells whether Telegram id tg is bound to an account.
func (b *Backend) CheckAccountByTelegram(ctx context.Context, tg TelegramID) (AccountCheck, error) {
	u, err := userBy(ctx, b.db.Read, `telegram_id = ?`, string(tg))
	if errors.Is(err, ErrUserNotFound) {
		return AccountCheck{}, nil
	}
	if err != nil {
		return AccountCheck{}, err
	}
	return AccountCheck{Exists: true, UID: &u.UID}, nil
}

// BindTelegram promotes the account's preview_telegram_id to telegram_id
// after the user confirmed in the bot. Binding the id the account already has
// is a no-op; an id bound to another account is ErrTelegramTaken; an account
// bound to another id is ErrAccountBound; an id that is not the account's
// preview is ErrNoPreview.
func (b *Backend) BindTelegram(ctx context.Context, uid UID, tg TelegramID) (User, error) {
	var u User
	err := b.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		if u, err = userBy(ctx, tx, `uid = ?`, uid); err != nil {
			return err
		}
		if u.TelegramID != nil {
			if *u.TelegramID == tg {
				return nil
			}
			return ErrAccountBound
		}
		if other, err := userBy(ctx, tx, `telegram_id = ?`, string(tg)); err == nil && other.UID != uid {
			return ErrTelegramTaken
		} else if err != nil && !errors.Is(err, ErrUserNotFound) {
			return err
		}
		if u.PreviewTelegramID == nil || *u.PreviewTelegramID != tg {
			return ErrNoPreview
		}
		if _, err := tx.ExecContext(ctx,
			`update users set telegram_id = ?, preview_telegram_id = null where uid = ?`, string(tg), uid); err != nil {
			if store.IsUniqueViolation(err) {
				return ErrTelegramTaken
			}
			return fmt.Errorf("bind telegram: %w", err)
		}
		u, err = userBy(ctx, tx, `uid = ?`, uid)
		return err
	})
	return u, err
}

// NotificationID identifies a web-cabinet notification.
type NotificationID int64

// NewNotification is the body of POST /bot/notification: the account by uid
// or by bound Telegram id (both: they must agree), a kind, a text, and an
// optional dedup key that makes a repeated write return the first one.
type NewNotification struct {
	UID        UID        `json:"uid,omitempty"`
	TelegramID TelegramID `json:"telegramId,omitempty"`
	Kind       string     `json:"kind"`
	Text       string     `json:"text"`
	DedupKey   string     `json:"dedupKey,omitempty"`
}

// Notification is a stored web-cabinet notification.
type Notification struct {
	ID        NotificationID `json:"id"`
	UID       UID            `json:"uid"`
	Kind      string         `json:"kind"`
	Text      string         `json:"text"`
	DedupKey  *string        `json:"dedupKey"`
	CreatedAt time.Time      `json:"createdAt"`
	ReadAt    *time.Time     `json:"readAt"`
}

var kindPattern = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

func (n *NewNotification) validate() error {
	if n.UID == 0 && n.TelegramID == "" {
		return invalidf("uid or telegramId is required")
	}
	if n.UID < 0 {
		return invalidf("uid must be positive")
	}
	if !kindPattern.MatchString(n.Kind) {
		return invalidf("kind must be 1 to 64 of a-z, 0-9, _ . -")
	}
	if strings.TrimSpace(n.Text) == "" || utf8.RuneCountInString(n.Text) > 4096 || !utf8.ValidString(n.Text) {
		return invalidf("text must be 1 to 4096 characters")
	}
	if len(n.DedupKey) > 200 {
		return invalidf("dedupKey must be at most 200 bytes")
	}
	return nil
}

const notificationColumns = `id, uid, kind, text, dedup_key, created_at, read_at`

func scanNotification(s scanner) (Notification, error) {
	var (
		n             Notification
		dedup         sql.NullString
		created, read store.Timestamp
	)
	if err := s.Scan(&n.ID, &n.UID, &n.Kind, &n.Text, &dedup, &created, &read); err != nil {
		return Notification{}, err
	}
	if dedup.Valid {
		n.DedupKey = &dedup.String
	}
	n.CreatedAt, n.ReadAt = created.Time, read.Ptr()
	return n, nil
}

// AddNotification stores a web-cabinet notification — the bot's passive
// fallback when a DM fails. created is false when the dedup key was seen
// before, and the first notification is returned.
func (b *Backend) AddNotification(ctx context.Context, n NewNotification) (note Notification, created bool, err error) {
	if err := n.validate(); err != nil {
		return Notification{}, false, err
	}
	err = b.db.Tx(ctx, func(tx *sql.Tx) error {
		uid := n.UID
		if n.TelegramID != "" {
			u, err := userBy(ctx, tx, `telegram_id = ?`, string(n.TelegramID))
			if err != nil {
				return err
			}
			if uid != 0 && uid != u.UID {
				return invalidf("uid and telegramId name different accounts")
			}
			uid = u.UID
		} else if _, err := userBy(ctx, tx, `uid = ?`, uid); err != nil {
			return err
		}
		var dedup any
		if n.DedupKey != "" {
			dedup = n.DedupKey
			note, err = scanNotification(tx.QueryRowContext(ctx,
				`select `+notificationColumns+` from web_notifications where uid = ? and dedup_key = ?`, uid, n.DedupKey))
			if err == nil {
				return nil
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("read notification: %w", err)
			}
		}
		note, err = scanNotification(tx.QueryRowContext(ctx,
			`insert into web_notifications (uid, kind, text, dedup_key, created_at) values (?, ?, ?, ?, ?)
			 returning `+notificationColumns,
			uid, n.Kind, n.Text, dedup, store.TS(b.db.Now())))
		if err != nil {
			return fmt.Errorf("add notification: %w", err)
		}
		created = true
		return nil
	})
	return note, created, err
}

// ListNotifications lists an account's notifications, newest first (at most 500).
func (b *Backend) ListNotifications(ctx context.Context, uid UID) ([]Notification, error) {
	if _, err := b.GetUser(ctx, uid); err != nil {
		return nil, err
	}
	rows, err := b.db.Read.QueryContext(ctx,
		`select `+notificationColumns+` from web_notifications where uid = ? order by id desc limit 500`, uid)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	defer rows.Close()
	list := make([]Notification, 0)
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return nil, fmt.Errorf("list notifications: %w", err)
		}
		list = append(list, n)
	}
	return list, rows.Err()
}

// ConnectPayloadPrefix starts the bot's /start payload of a connect token.
const ConnectPayloadPrefix = "telegramConnect"

// ConnectLink is the answer of POST /bot/telegram/connect-link.
type ConnectLink struct {
	// Token is "telegramConnect=<uuid>", the spec's one-time token.
	Token string `json:"token"`
	// StartParam is the token as a Telegram /start parameter, which allows only
	// A-Z a-z 0-9 _ -: "telegramConnect-<uuid>".
	StartParam string `json:"startParam"`
	// Link is https://t.me/<bot>?start=<StartParam>.
	Link      string    `json:"link"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// ParseConnectPayload reads a connect token's uuid from the token
// ("telegramConnect=<uuid>"), the /start parameter ("telegramConnect-<uuid>")
// or the bare uuid.
func ParseConnectPayload(s string) (string, bool) {
	s = strings.TrimSpace(s)
	for _, sep := range []string{"=", "-", "_"} {
		if rest, ok := strings.CutPrefix(s, ConnectPayloadPrefix+sep); ok {
			s = rest
			break
		}
	}
	id, err := uuid.Parse(s)
	if err != nil || len(s) != 36 {
		return "", false
	}
	return id.String(), true
}

func (b *Backend) connectLink(token string, expires time.Time) ConnectLink {
	start := ConnectPayloadPrefix + "-" + token
	return ConnectLink{
		Token:      ConnectPayloadPrefix + "=" + token,
		StartParam: start,
		Link:       "https://t.me/" + b.botUsername + "?start=" + start,
		ExpiresAt:  expires,
	}
}

// MintConnectLink returns the account's unused, unexpired connect token, or
// mints a new one valid for the configured TTL.
func (b *Backend) MintConnectLink(ctx context.Context, uid UID) (ConnectLink, error) {
	var link ConnectLink
	err := b.db.Tx(ctx, func(tx *sql.Tx) error {
		if _, err := userBy(ctx, tx, `uid = ?`, uid); err != nil {
			return err
		}
		now := b.db.Now()
		var (
			token   string
			expires store.Timestamp
		)
		err := tx.QueryRowContext(ctx,
			`select token, expires_at from telegram_connect_tokens
			 where uid = ? and used_at is null and expires_at > ? order by expires_at desc limit 1`,
			uid, store.TS(now)).Scan(&token, &expires)
		if err == nil {
			link = b.connectLink(token, expires.Time)
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read connect token: %w", err)
		}
		// The answer carries the expiry as stored: the store keeps microseconds.
		token, expires = uuid.NewString(), store.TS(now.Add(b.tokenTTL).Truncate(time.Microsecond))
		if _, err := tx.ExecContext(ctx,
			`insert into telegram_connect_tokens (token, uid, created_at, expires_at) values (?, ?, ?, ?)`,
			token, uid, store.TS(now), expires); err != nil {
			return fmt.Errorf("mint connect token: %w", err)
		}
		link = b.connectLink(token, expires.Time)
		return nil
	})
	return link, err
}

// Redemption is the answer of redeeming a connect token.
type Redemption struct {
	UID               UID        `json:"uid"`
	PreviewTelegramID TelegramID `json:"previewTelegramId"`
}

// RedeemConnect redeems a connect token (the bot's /start payload) for
// Telegram id tg: it records tg as the account's preview_telegram_id and marks
// the token used. Redeeming again with the same tg returns the same answer.
func (b *Backend) RedeemConnect(ctx context.Context, payload string, tg TelegramID) (Redemption, error) {
	token, ok := ParseConnectPayload(payload)
	if !ok {
		return Redemption{}, invalidf("token is not a telegramConnect token")
	}
	var red Redemption
	err := b.db.Tx(ctx, func(tx *sql.Tx) error {
		var (
			uid           UID
			expires, used store.Timestamp
			usedBy        sql.NullString
		)
		err := tx.QueryRowContext(ctx,
			`select uid, expires_at, used_at, used_by_telegram_id from telegram_connect_tokens where token = ?`,
			token).Scan(&uid, &expires, &used, &usedBy)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrTokenNotFound
		}
		if err != nil {
			return fmt.Errorf("read connect token: %w", err)
		}
		red = Redemption{UID: uid, PreviewTelegramID: tg}
		if !used.IsZero() {
			if usedBy.String == string(tg) {
				return nil
			}
			return ErrTokenUsed
		}
		now := b.db.Now()
		if !expires.After(now) {
			return ErrTokenExpired
		}
		u, err := userBy(ctx, tx, `uid = ?`, uid)
		if err != nil {
			return err
		}
		if u.TelegramID != nil && *u.TelegramID != tg {
			return ErrAccountBound
		}
		if other, err := userBy(ctx, tx, `telegram_id = ?`, string(tg)); err == nil && other.UID != uid {
			return ErrTelegramTaken
		} else if err != nil && !errors.Is(err, ErrUserNotFound) {
			return err
		}
		if u.TelegramID == nil {
			if _, err := tx.ExecContext(ctx,
				`update users set preview_telegram_id = ? where uid = ?`, string(tg), uid); err != nil {
				return fmt.Errorf("redeem connect token: %w", err)
			}
		}
		if _, err := tx.ExecContext(ctx,
			`update telegram_connect_tokens set used_at = ?, used_by_telegram_id = ? where token = ?`,
			store.TS(now), string(tg), token); err != nil {
			return fmt.Errorf("redeem connect token: %w", err)
		}
		return nil
	})
	return red, err
}
