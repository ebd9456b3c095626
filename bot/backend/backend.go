package backend

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
	"switchyard/bot/contract"
	"switchyard/store"
)

// Opts configure New. Zero values get defaults.
type Opts struct {
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

// Service is the backend side of the bot contract: the outbox, the minimal
// domain it reports on (users, web notifications, connect tokens), and the
// HTTP routes (Routes for the bot, AdminRoutes for operators).
type Service struct {
	db          *store.DB
	outbox      *Outbox
	secret      string
	authLimit   *authlimit.Limiter
	log         *slog.Logger
	botUsername string
	tokenTTL    time.Duration
}

// New returns a Service. A nil DB or an empty secret is a wiring
// mistake and panics.
func New(opts Opts) *Service {
	if opts.DB == nil {
		panic("backend: New needs a DB")
	}
	if opts.Secret == "" {
		panic("backend: New needs BOT_TO_BACKEND_SECRET")
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
	return &Service{
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
func (b *Service) Shutdown() { b.outbox.StopWaiting() }

// Outbox returns the backend's outbox, for code that emits inside its own
// business transactions.
func (b *Service) Outbox() *Outbox { return b.outbox }

// User is a backend account.
type User struct {
	UID                   contract.UID         `json:"uid"`
	Link                  string               `json:"link"`
	Name                  string               `json:"name"`
	TelegramID            *contract.TelegramID `json:"telegramId"`
	PreviewTelegramID     *contract.TelegramID `json:"previewTelegramId"`
	LeaderUID             *contract.UID        `json:"leaderUid"`
	Addr                  *string              `json:"addr"`
	LP1                   bool                 `json:"lp1"`
	LP2                   bool                 `json:"lp2"`
	TimeActive            *time.Time           `json:"timeActive"`
	RegistrationConfirmed bool                 `json:"registrationConfirmed"`
	CreatedAt             time.Time            `json:"createdAt"`
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
		return User{}, contract.ErrUserNotFound
	}
	if err != nil {
		return User{}, fmt.Errorf("read user: %w", err)
	}
	return u, nil
}

// forUpdate ends a select of the row a transaction goes on to decide from
// and change. On PostgreSQL, where write transactions run side by side, it
// locks the row to the commit: a concurrent transaction about the same row
// waits at its own select and then reads what this one committed (READ
// COMMITTED), instead of deciding from the same old row — two registrations
// that each emit, two redemptions of one token that both succeed. The lock
// is "no key update", as the later update of non-key columns takes anyway:
// it excludes its like and writers, not the inserts whose foreign keys only
// share the row (a connect token, a notification). SQLite's single writer
// runs one write transaction at a time already, and has no such clause.
func (b *Service) forUpdate() string {
	if b.db.Postgres() {
		return ` for no key update`
	}
	return ``
}

// lockUser reads the user uid inside tx and locks the row (forUpdate).
func (b *Service) lockUser(ctx context.Context, tx *sql.Tx, uid contract.UID) (User, error) {
	return userBy(ctx, tx, `uid = ?`+b.forUpdate(), uid)
}

// NewUser is the input of CreateUser (POST /admin/api/users).
type NewUser struct {
	Link       string              `json:"link"`
	Name       string              `json:"name"`
	TelegramID contract.TelegramID `json:"telegramId,omitempty"`
	LeaderUID  contract.UID        `json:"leaderUid,omitempty"`
}

var linkPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func (n *NewUser) validate() error {
	n.Link, n.Name = strings.TrimSpace(n.Link), strings.TrimSpace(n.Name)
	if !linkPattern.MatchString(n.Link) {
		return contract.Invalidf("link must be 1 to 64 letters, digits, _ or -")
	}
	if n.Name == "" || utf8.RuneCountInString(n.Name) > 200 || !utf8.ValidString(n.Name) {
		return contract.Invalidf("name must be 1 to 200 characters")
	}
	if n.LeaderUID < 0 {
		return contract.Invalidf("leaderUid must be a positive uid")
	}
	return nil
}

// CreateUser creates an account. A taken link or Telegram id is a conflict;
// an unknown leader is ErrLeaderNotFound.
func (b *Service) CreateUser(ctx context.Context, n NewUser) (User, error) {
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
		// checkFree read before the insert; an account created meanwhile by
		// a concurrent transaction (PostgreSQL) takes the link or Telegram id
		// first: the insert then does nothing, and checkFree, run again, names
		// what was taken.
		var uid contract.UID
		err := tx.QueryRowContext(ctx,
			`insert into users (link, name, telegram_id, leader_uid, created_at) values (?, ?, ?, ?, ?)
			 on conflict do nothing returning uid`,
			n.Link, n.Name, tg, leader, store.TS(b.db.Now())).Scan(&uid)
		if errors.Is(err, sql.ErrNoRows) {
			if err := checkFree(ctx, tx, n.Link, n.TelegramID); err != nil {
				return err
			}
			return errors.New("create user: the link or Telegram id was taken meanwhile")
		}
		if err != nil {
			return fmt.Errorf("create user: %w", err)
		}
		u, err = userBy(ctx, tx, `uid = ?`, uid)
		return err
	})
	return u, err
}

func checkFree(ctx context.Context, tx *sql.Tx, link string, tg contract.TelegramID) error {
	var n int
	if err := tx.QueryRowContext(ctx, `select count(*) from users where link = ?`, link).Scan(&n); err != nil {
		return fmt.Errorf("check link: %w", err)
	}
	if n > 0 {
		return contract.ErrLinkTaken
	}
	if tg == "" {
		return nil
	}
	if err := tx.QueryRowContext(ctx, `select count(*) from users where telegram_id = ?`, string(tg)).Scan(&n); err != nil {
		return fmt.Errorf("check telegram id: %w", err)
	}
	if n > 0 {
		return contract.ErrTelegramTaken
	}
	return nil
}

func leaderErr(err error) error {
	if errors.Is(err, contract.ErrUserNotFound) {
		return contract.ErrLeaderNotFound
	}
	return err
}

// GetUser reads one account.
func (b *Service) GetUser(ctx context.Context, uid contract.UID) (User, error) {
	return userBy(ctx, b.db.Read, `uid = ?`, uid)
}

// ActionResult is what a backend action changed: the account afterwards and
// the events it emitted in the same transaction (none when it changed nothing).
type ActionResult struct {
	User     User               `json:"user"`
	EventIDs []contract.EventID `json:"eventIds"`
}

// action runs fn on the user uid inside one transaction that wakes the
// consumers once it committed, and returns the user as fn left it. fn gets
// the user row locked (lockUser), so the same action twice at once decides
// once from the row as it was and once from the row the first left: the
// second changes nothing and emits nothing.
func (b *Service) action(ctx context.Context, uid contract.UID, fn func(tx *sql.Tx, u User) ([]contract.EventID, error)) (ActionResult, error) {
	var res ActionResult
	err := b.outbox.Tx(ctx, func(tx *sql.Tx) error {
		u, err := b.lockUser(ctx, tx, uid)
		if err != nil {
			return err
		}
		ids, err := fn(tx, u)
		if err != nil {
			return err
		}
		res.EventIDs = append(make([]contract.EventID, 0, len(ids)), ids...)
		res.User, err = userBy(ctx, tx, `uid = ?`, uid)
		return err
	})
	return res, err
}

var addrPattern = regexp.MustCompile(`^[A-Za-z0-9_:+/=-]{1,128}$`)

// ConnectWallet records the user's wallet and emits wallet_connected in the
// same transaction. Connecting the same address again changes nothing.
func (b *Service) ConnectWallet(ctx context.Context, uid contract.UID, addr string) (ActionResult, error) {
	addr = strings.TrimSpace(addr)
	if !addrPattern.MatchString(addr) {
		return ActionResult{}, contract.Invalidf("addr must be 1 to 128 address characters")
	}
	return b.action(ctx, uid, func(tx *sql.Tx, u User) ([]contract.EventID, error) {
		if u.Addr != nil && *u.Addr == addr {
			return nil, nil
		}
		if _, err := tx.ExecContext(ctx, `update users set addr = ? where uid = ?`, addr, uid); err != nil {
			return nil, fmt.Errorf("connect wallet: %w", err)
		}
		id, err := b.outbox.EmitWalletConnectedTx(ctx, tx, u.target(), contract.WalletConnectedPayload{Addr: addr})
		return []contract.EventID{id}, err
	})
}

// registerDecision says what a registration does to an account.
type registerDecision struct {
	Apply bool // false: already registered under this leader, nothing to do
}

// decideRegister: a first registration applies; registering again under the
// same leader is a no-op; under another leader it is ErrAlreadyRegistered;
// a user cannot lead themselves.
func decideRegister(u User, leader *contract.UID) (registerDecision, error) {
	if leader != nil && *leader == u.UID {
		return registerDecision{}, contract.Invalidf("a user cannot be their own leader")
	}
	if !u.RegistrationConfirmed {
		return registerDecision{Apply: true}, nil
	}
	same := (u.LeaderUID == nil && leader == nil) || (u.LeaderUID != nil && leader != nil && *u.LeaderUID == *leader)
	if same {
		return registerDecision{}, nil
	}
	return registerDecision{}, contract.ErrAlreadyRegistered
}

// Register confirms the user's registration under leader (nil: no leader) —
// the on-chain sync's job — and, in the same transaction, emits registered
// for the user and new_partner for the leader.
func (b *Service) Register(ctx context.Context, uid contract.UID, leader *contract.UID) (ActionResult, error) {
	return b.action(ctx, uid, func(tx *sql.Tx, u User) ([]contract.EventID, error) {
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
		p := contract.RegisteredPayload{LeaderUID: leader}
		if lead != nil {
			p.LeaderLink = lead.Link
		}
		id, err := b.outbox.EmitRegisteredTx(ctx, tx, u.target(), p)
		if err != nil || lead == nil {
			return []contract.EventID{id}, err
		}
		partner, err := b.outbox.EmitNewPartnerTx(ctx, tx, lead.target(),
			contract.NewPartnerPayload{PartnerUID: u.UID, PartnerName: u.Name, PartnerLink: u.Link})
		return []contract.EventID{id, partner}, err
	})
}

// ActivateNFT records a status NFT level and emits status_nft_activated in
// the same transaction. A level already active changes nothing.
func (b *Service) ActivateNFT(ctx context.Context, uid contract.UID, level contract.NftLevel) (ActionResult, error) {
	var column string
	switch level {
	case contract.NftLP1:
		column = "lp1"
	case contract.NftLP2:
		column = "lp2"
	default:
		return ActionResult{}, contract.Invalidf("level must be lp1 or lp2, not %q", level)
	}
	return b.action(ctx, uid, func(tx *sql.Tx, u User) ([]contract.EventID, error) {
		if (level == contract.NftLP1 && u.LP1) || (level == contract.NftLP2 && u.LP2) {
			return nil, nil
		}
		if _, err := tx.ExecContext(ctx, `update users set `+column+` = 1 where uid = ?`, uid); err != nil {
			return nil, fmt.Errorf("activate nft: %w", err)
		}
		id, err := b.outbox.EmitStatusNftActivatedTx(ctx, tx, u.target(), contract.StatusNftActivatedPayload{Level: level})
		return []contract.EventID{id}, err
	})
}

// ResolveLeader finds the user whose referral link is code.
func (b *Service) ResolveLeader(ctx context.Context, code string) (contract.Leader, error) {
	code = strings.TrimSpace(code)
	if code == "" {
		return contract.Leader{}, contract.Invalidf("code is required")
	}
	u, err := userBy(ctx, b.db.Read, `link = ?`, code)
	if err != nil {
		return contract.Leader{}, leaderErr(err)
	}
	return contract.Leader{UID: u.UID, Link: u.Link, Name: u.Name}, nil
}

// UserState reads the state of the account bound to Telegram id tg.
func (b *Service) UserState(ctx context.Context, tg contract.TelegramID) (contract.UserState, error) {
	u, err := userBy(ctx, b.db.Read, `telegram_id = ?`, string(tg))
	if err != nil {
		return contract.UserState{}, err
	}
	return contract.UserState{
		IsRegistrationConfirmed: u.RegistrationConfirmed,
		LP1:                     u.LP1, LP2: u.LP2,
		Addr: u.Addr, TimeActive: u.TimeActive, OwnLink: u.Link,
	}, nil
}

// CheckAccountByTelegram tells whether Telegram id tg is bound to an account.
func (b *Service) CheckAccountByTelegram(ctx context.Context, tg contract.TelegramID) (contract.AccountCheck, error) {
	u, err := userBy(ctx, b.db.Read, `telegram_id = ?`, string(tg))
	if errors.Is(err, contract.ErrUserNotFound) {
		return contract.AccountCheck{}, nil
	}
	if err != nil {
		return contract.AccountCheck{}, err
	}
	return contract.AccountCheck{Exists: true, UID: &u.UID}, nil
}

// BindTelegram promotes the account's preview_telegram_id to telegram_id
// after the user confirmed in the bot. Binding the id the account already has
// is a no-op; an id bound to another account is ErrTelegramTaken; an account
// bound to another id is ErrAccountBound; an id that is not the account's
// preview is ErrNoPreview.
func (b *Service) BindTelegram(ctx context.Context, uid contract.UID, tg contract.TelegramID) (User, error) {
	var u User
	err := b.db.Tx(ctx, func(tx *sql.Tx) error {
		var err error
		if u, err = b.lockUser(ctx, tx, uid); err != nil {
			return err
		}
		if u.TelegramID != nil {
			if *u.TelegramID == tg {
				return nil
			}
			return contract.ErrAccountBound
		}
		if other, err := userBy(ctx, tx, `telegram_id = ?`, string(tg)); err == nil && other.UID != uid {
			return contract.ErrTelegramTaken
		} else if err != nil && !errors.Is(err, contract.ErrUserNotFound) {
			return err
		}
		if u.PreviewTelegramID == nil || *u.PreviewTelegramID != tg {
			return contract.ErrNoPreview
		}
		if _, err := tx.ExecContext(ctx,
			`update users set telegram_id = ?, preview_telegram_id = null where uid = ?`, string(tg), uid); err != nil {
			if store.IsUniqueViolation(err) {
				return contract.ErrTelegramTaken
			}
			return fmt.Errorf("bind telegram: %w", err)
		}
		u, err = userBy(ctx, tx, `uid = ?`, uid)
		return err
	})
	return u, err
}

var kindPattern = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

func validateNotification(n *contract.NewNotification) error {
	if n.UID == 0 && n.TelegramID == "" {
		return contract.Invalidf("uid or telegramId is required")
	}
	if n.UID < 0 {
		return contract.Invalidf("uid must be positive")
	}
	if !kindPattern.MatchString(n.Kind) {
		return contract.Invalidf("kind must be 1 to 64 of a-z, 0-9, _ . -")
	}
	if strings.TrimSpace(n.Text) == "" || utf8.RuneCountInString(n.Text) > 4096 || !utf8.ValidString(n.Text) {
		return contract.Invalidf("text must be 1 to 4096 characters")
	}
	if len(n.DedupKey) > 200 {
		return contract.Invalidf("dedupKey must be at most 200 bytes")
	}
	return nil
}

const notificationColumns = `id, uid, kind, text, dedup_key, created_at, read_at`

func scanNotification(s scanner) (contract.Notification, error) {
	var (
		n             contract.Notification
		dedup         sql.NullString
		created, read store.Timestamp
	)
	if err := s.Scan(&n.ID, &n.UID, &n.Kind, &n.Text, &dedup, &created, &read); err != nil {
		return contract.Notification{}, err
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
func (b *Service) AddNotification(ctx context.Context, n contract.NewNotification) (note contract.Notification, created bool, err error) {
	if err := validateNotification(&n); err != nil {
		return contract.Notification{}, false, err
	}
	err = b.db.Tx(ctx, func(tx *sql.Tx) error {
		uid := n.UID
		if n.TelegramID != "" {
			u, err := userBy(ctx, tx, `telegram_id = ?`, string(n.TelegramID))
			if err != nil {
				return err
			}
			if uid != 0 && uid != u.UID {
				return contract.Invalidf("uid and telegramId name different accounts")
			}
			uid = u.UID
		} else if _, err := userBy(ctx, tx, `uid = ?`, uid); err != nil {
			return err
		}
		var dedup any
		if n.DedupKey != "" {
			dedup = n.DedupKey
		}
		// The insert is the dedup check: a key stored before — or by a
		// concurrent call, whose commit PostgreSQL waits for — makes it do
		// nothing, and the first notification is read instead.
		note, err = scanNotification(tx.QueryRowContext(ctx,
			`insert into web_notifications (uid, kind, text, dedup_key, created_at) values (?, ?, ?, ?, ?)
			 on conflict (uid, dedup_key) do nothing
			 returning `+notificationColumns,
			uid, n.Kind, n.Text, dedup, store.TS(b.db.Now())))
		if errors.Is(err, sql.ErrNoRows) {
			note, err = scanNotification(tx.QueryRowContext(ctx,
				`select `+notificationColumns+` from web_notifications where uid = ? and dedup_key = ?`, uid, n.DedupKey))
			if err != nil {
				return fmt.Errorf("read notification: %w", err)
			}
			created = false
			return nil
		}
		if err != nil {
			return fmt.Errorf("add notification: %w", err)
		}
		created = true
		return nil
	})
	return note, created, err
}

// ListNotifications lists an account's notifications, newest first (at most 500).
func (b *Service) ListNotifications(ctx context.Context, uid contract.UID) ([]contract.Notification, error) {
	if _, err := b.GetUser(ctx, uid); err != nil {
		return nil, err
	}
	rows, err := b.db.Read.QueryContext(ctx,
		`select `+notificationColumns+` from web_notifications where uid = ? order by id desc limit 500`, uid)
	if err != nil {
		return nil, fmt.Errorf("list notifications: %w", err)
	}
	defer rows.Close()
	list := make([]contract.Notification, 0)
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return nil, fmt.Errorf("list notifications: %w", err)
		}
		list = append(list, n)
	}
	return list, rows.Err()
}

func (b *Service) connectLink(token string, expires time.Time) contract.ConnectLink {
	start := contract.ConnectPayloadPrefix + "-" + token
	return contract.ConnectLink{
		Token:      contract.ConnectPayloadPrefix + "=" + token,
		StartParam: start,
		Link:       "https://t.me/" + b.botUsername + "?start=" + start,
		ExpiresAt:  expires,
	}
}

// MintConnectLink returns the account's unused, unexpired connect token, or
// mints a new one valid for the configured TTL.
func (b *Service) MintConnectLink(ctx context.Context, uid contract.UID) (contract.ConnectLink, error) {
	var link contract.ConnectLink
	err := b.db.Tx(ctx, func(tx *sql.Tx) error {
		// The account's row is locked: two mints at once return one token.
		if _, err := b.lockUser(ctx, tx, uid); err != nil {
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

// RedeemConnect redeems a connect token (the bot's /start payload) for
// Telegram id tg: it records tg as the account's preview_telegram_id and marks
// the token used. Redeeming again with the same tg returns the same answer.
func (b *Service) RedeemConnect(ctx context.Context, payload string, tg contract.TelegramID) (contract.Redemption, error) {
	token, ok := contract.ParseConnectPayload(payload)
	if !ok {
		return contract.Redemption{}, contract.Invalidf("token is not a telegramConnect token")
	}
	var red contract.Redemption
	err := b.db.Tx(ctx, func(tx *sql.Tx) error {
		var (
			uid           contract.UID
			expires, used store.Timestamp
			usedBy        sql.NullString
		)
		// The token's row is locked (forUpdate): of two redemptions at once,
		// the second reads the token as the first left it — used.
		err := tx.QueryRowContext(ctx,
			`select uid, expires_at, used_at, used_by_telegram_id from telegram_connect_tokens where token = ?`+b.forUpdate(),
			token).Scan(&uid, &expires, &used, &usedBy)
		if errors.Is(err, sql.ErrNoRows) {
			return contract.ErrTokenNotFound
		}
		if err != nil {
			return fmt.Errorf("read connect token: %w", err)
		}
		red = contract.Redemption{UID: uid, PreviewTelegramID: tg}
		if !used.IsZero() {
			if usedBy.String == string(tg) {
				return nil
			}
			return contract.ErrTokenUsed
		}
		now := b.db.Now()
		if !expires.After(now) {
			return contract.ErrTokenExpired
		}
		u, err := b.lockUser(ctx, tx, uid)
		if err != nil {
			return err
		}
		if u.TelegramID != nil && *u.TelegramID != tg {
			return contract.ErrAccountBound
		}
		if other, err := userBy(ctx, tx, `telegram_id = ?`, string(tg)); err == nil && other.UID != uid {
			return contract.ErrTelegramTaken
		} else if err != nil && !errors.Is(err, contract.ErrUserNotFound) {
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
