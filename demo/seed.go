package demo

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/mymmrac/telego"
)

// Leader is a leader of the bot flow: a backend account whose link is the
// referral code people arrive at the onboarding bot with.
type Leader struct {
	UID  int64
	Code string
	Name string
	// TelegramID is the leader's bound Telegram account; 0 when they have
	// none, so new partners reach them by web notification.
	TelegramID int64
	// Blocked: the leader blocked the onboarding bot, so new partners reach
	// them by web notification too.
	Blocked bool
}

// Link is a referral link of the identity flow.
type Link struct {
	Slug        string
	OwnerUserID string
	TenantID    string
	Channel     string
}

// Cast is who the demo plays with: what Seed made sure exists, in the
// database and in this process's sandbox.
type Cast struct {
	Leaders []Leader
	Links   []Link
	// BusinessOwnerID is the Telegram Business account connected to the
	// inbox bot; BusinessConnectionID is its connection in the sandbox.
	BusinessOwnerID      int64
	BusinessConnectionID string
}

type seedLeader struct {
	code, first, last string
	tg                int64
	blocked           bool
}

var seedLeaders = []seedLeader{
	{"anna-sokolova", "Анна", "Соколова", 100000001, false},
	{"boris-kuznetsov", "Борис", "Кузнецов", 100000002, false},
	{"vera-morozova", "Вера", "Морозова", 100000003, true},
	{"grigory-pavlov", "Григорий", "Павлов", 0, false},
}

// seedIdentity is an identity user the seed publishes: link owners first,
// then a few investors who came through their links.
type seedIdentity struct {
	key, typ, first, last, phone, referrer string
}

var seedIdentities = []seedIdentity{
	{"owner/irina", "Agent", "Ирина", "Агеева", "+79160000101", ""},
	{"owner/oleg", "DeveloperManager", "Олег", "Строев", "+79160000102", ""},
	{"owner/pavel", "Investor", "Павел", "Инвестьев", "+79160000103", ""},
	{"investor/maria", "Investor", "Мария", "Белова", "+79160000201", "irina-invest"},
	{"investor/dmitry", "Investor", "Дмитрий", "Орлов", "+79160000202", "oleg-novostroyki"},
	{"investor/svetlana", "Investor", "Светлана", "Крылова", "+79160000203", ""},
}

// The tenants the seeded links belong to (two residential projects).
var (
	tenantNorth = stableID("tenant/severny")
	tenantRiver = stableID("tenant/rechnoy")
)

var seedLinks = []Link{
	{"irina-invest", stableID("owner/irina"), tenantNorth, "telegram"},
	{"irina-site", stableID("owner/irina"), tenantRiver, "website"},
	{"oleg-novostroyki", stableID("owner/oleg"), tenantNorth, "whatsapp"},
	{"pavel-friends", stableID("owner/pavel"), tenantRiver, "telegram"},
}

const seedBusinessOwner = 100000050

var seedCustomers = []struct {
	id          int64
	first, last string
	text        string
}{
	{100000201, "Екатерина", "Лебедева", "Здравствуйте! Доставляете букеты в субботу утром?"},
	{100000202, "Николай", "Фёдоров", "Добрый день, можно заказать корзину тюльпанов к 8 марта?"},
	{100000203, "Татьяна", "Егорова", "Подскажите, сколько стоит свадебный букет?"},
}

var seedNewcomers = []struct {
	id          int64
	first, last string
	leader      int // index in seedLeaders
}{
	{100000101, "Елена", "Васильева", 0},
	{100000102, "Игорь", "Смирнов", 1},
}

// seedMu makes Seed calls of one process run one at a time, so a seed at
// start-up and a simulator starting at the same moment do not both connect
// a business account.
var seedMu sync.Mutex

// Seed makes sure a sandbox instance has something to show: leaders with
// referral codes (one without Telegram, one who blocked the bot), referral
// link owners with links across two tenants and three channels and a few
// investors who came through them (published on the identity topic), a
// Telegram Business account connected to the inbox bot with a few customer
// messages, and two newcomers who opened the onboarding bot. It adds data
// only where that part of the console is empty, and re-creates what lives in
// the sandbox's memory (the leaders' chats with the bot, the business
// connection) when this process has not yet, so it is safe on every start.
// It waits for nothing the instance does with the data.
func Seed(ctx context.Context, opts Opts) (Cast, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Cast{}, err
	}
	seedMu.Lock()
	defer seedMu.Unlock()
	c := newClient(opts)
	onboarding, inbox := opts.Sandbox.Bot(opts.OnboardingToken), opts.Sandbox.Bot(opts.OmniToken)
	var cast Cast
	added := map[string]int{}

	for _, sl := range seedLeaders {
		nu := newUser{Link: sl.code, Name: sl.first + " " + sl.last}
		if sl.tg != 0 {
			nu.TelegramID = strconv.FormatInt(sl.tg, 10)
		}
		uid, err := c.ensureUser(ctx, nu)
		if err != nil {
			return cast, fmt.Errorf("seed leader %s: %w", sl.code, err)
		}
		cast.Leaders = append(cast.Leaders, Leader{UID: uid, Code: sl.code, Name: nu.Name, TelegramID: sl.tg, Blocked: sl.blocked})
		if sl.tg == 0 {
			continue
		}
		// The leader has used the bot before; the sandbox forgets that on
		// every restart.
		if _, ok := onboarding.Chat(sl.tg); !ok {
			u := telego.User{ID: sl.tg, FirstName: sl.first, LastName: sl.last, LanguageCode: "ru"}
			if _, err := onboarding.Start(u, ""); err != nil {
				return cast, fmt.Errorf("seed leader %s opens the bot: %w", sl.code, err)
			}
			if sl.blocked {
				if err := onboarding.Block(u); err != nil {
					return cast, fmt.Errorf("seed leader %s blocks the bot: %w", sl.code, err)
				}
			}
		}
	}

	for _, l := range seedLinks {
		err := c.admin(ctx, http.MethodPost, "/referral/links", map[string]string{
			"url": l.Slug, "ownerUserId": l.OwnerUserID, "tenantId": l.TenantID, "channel": l.Channel,
		}, nil)
		switch {
		case err == nil:
			added["links"]++
		case codeOf(err) != "slug_taken":
			return cast, fmt.Errorf("seed link %s: %w", l.Slug, err)
		}
		cast.Links = append(cast.Links, l)
	}

	at := time.Now().UTC().Add(-time.Hour)
	for i, si := range seedIdentities {
		id := stableID(si.key)
		var rep replicaAnswer
		err := c.admin(ctx, http.MethodGet, "/referral/replicas/"+id, nil, &rep)
		if err == nil {
			continue
		}
		if statusOf(err) != http.StatusNotFound {
			return cast, fmt.Errorf("seed identity %s: %w", si.key, err)
		}
		ev := identity{
			MessageID: stableID("message/" + si.key), UserID: id, Type: si.typ, Status: "Active",
			First: si.first, Last: si.last, Phone: si.phone, Referrer: si.referrer, Version: 1,
			At: at.Add(time.Duration(i) * time.Minute),
		}
		if err := c.publish(ctx, ev); err != nil {
			return cast, fmt.Errorf("seed identity %s: %w", si.key, err)
		}
		added["identity_events"]++
	}

	cast.BusinessOwnerID = seedBusinessOwner
	view, err := inbox.View()
	if err != nil {
		return cast, fmt.Errorf("seed business account: %w", err)
	}
	for _, bc := range view.Connections {
		if bc.User.ID == seedBusinessOwner && bc.IsEnabled {
			cast.BusinessConnectionID = bc.ID
		}
	}
	if cast.BusinessConnectionID == "" {
		owner := telego.User{ID: seedBusinessOwner, FirstName: "Ольга", LastName: "Ромашкина", LanguageCode: "ru"}
		bc, err := inbox.ConnectBusiness(owner, telego.BusinessBotRights{CanReply: true, CanReadMessages: true})
		if err != nil {
			return cast, fmt.Errorf("seed business account: %w", err)
		}
		cast.BusinessConnectionID = bc.ID
	}

	var ta threadsAnswer
	if err := c.admin(ctx, http.MethodGet, "/omni/threads?limit=1", nil, &ta); err != nil {
		return cast, fmt.Errorf("seed inbox: %w", err)
	}
	if len(ta.Threads) == 0 {
		for _, sc := range seedCustomers {
			u := telego.User{ID: sc.id, FirstName: sc.first, LastName: sc.last, LanguageCode: "ru"}
			if _, err := inbox.BusinessMessage(cast.BusinessConnectionID, u, sc.text); err != nil {
				return cast, fmt.Errorf("seed customer message: %w", err)
			}
			added["customer_messages"]++
		}
	}

	for _, sn := range seedNewcomers {
		if _, ok := onboarding.Chat(sn.id); ok {
			continue
		}
		err := c.admin(ctx, http.MethodGet, "/bot/funnel/"+strconv.FormatInt(sn.id, 10), nil, nil)
		if err == nil {
			continue
		}
		if statusOf(err) != http.StatusNotFound {
			return cast, fmt.Errorf("seed newcomer: %w", err)
		}
		u := telego.User{ID: sn.id, FirstName: sn.first, LastName: sn.last, LanguageCode: "ru"}
		if _, err := onboarding.Start(u, seedLeaders[sn.leader].code); err != nil {
			return cast, fmt.Errorf("seed newcomer: %w", err)
		}
		added["newcomers"]++
	}

	if len(added) > 0 {
		attrs := []any{}
		for _, k := range []string{"links", "identity_events", "customer_messages", "newcomers"} {
			attrs = append(attrs, slog.Int(k, added[k]))
		}
		opts.Logger.Info("demo data seeded", attrs...)
	}
	return cast, nil
}
