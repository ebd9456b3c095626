package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"switchyard/bot"
	"switchyard/mask"
)

// outboxOps is what the console needs of the bot outbox (*bot.Outbox).
type outboxOps interface {
	ListEvents(ctx context.Context, f bot.EventFilter) ([]bot.EventRecord, error)
	GetEvent(ctx context.Context, id bot.EventID) (bot.EventRecord, error)
	Redrive(ctx context.Context, id bot.EventID) (bot.EventRecord, error)
}

// onboardingOps is what the console needs of the onboarding bot (*bot.Onboarding).
type onboardingOps interface {
	ListFunnels(ctx context.Context, f bot.FunnelFilter) ([]bot.Funnel, error)
	GetFunnel(ctx context.Context, tg bot.TelegramID) (bot.Funnel, []bot.FunnelChange, error)
	ListOutgoing(ctx context.Context, f bot.OutgoingFilter) ([]bot.Outgoing, error)
	RedriveOutgoing(ctx context.Context, id int64) (bot.Outgoing, error)
}

// eventsPerPage is how many events the Bot outbox page lists at once.
const eventsPerPage = 50

// maxScanPages bounds how many pages of 500 events a filtered listing reads
// looking for matches, so a rare filter costs at most 5,000 rows per request.
const maxScanPages = 10

// eventQuery is the Bot outbox page's filter, from its query string.
type eventQuery struct {
	State  bot.EventState
	Type   bot.EventType
	User   string // "uid:5", "tg:123", or a bare number matching either
	Before bot.EventID
}

func parseEventQuery(r *http.Request) eventQuery {
	q := r.URL.Query()
	f := eventQuery{
		State: bot.EventState(q.Get("state")),
		Type:  bot.EventType(q.Get("type")),
		User:  strings.TrimSpace(q.Get("user")),
	}
	switch f.State {
	case bot.StatePending, bot.StateRetrying, bot.StateProcessed, bot.StateDead:
	default:
		f.State = ""
	}
	if !f.Type.Valid() {
		f.Type = ""
	}
	if n, err := strconv.ParseInt(q.Get("before"), 10, 64); err == nil && n > 0 {
		f.Before = bot.EventID(n)
	}
	return f
}

func (f eventQuery) filtered() bool { return f.Type != "" || f.User != "" }

func (f eventQuery) href(state bot.EventState, before bot.EventID) string {
	v := url.Values{}
	if state != "" {
		v.Set("state", string(state))
	}
	if f.Type != "" {
		v.Set("type", string(f.Type))
	}
	if f.User != "" {
		v.Set("user", f.User)
	}
	if before > 0 {
		v.Set("before", strconv.FormatInt(int64(before), 10))
	}
	if len(v) == 0 {
		return "/admin/bot"
	}
	return "/admin/bot?" + v.Encode()
}

// matchUser reports whether an event is about the user a filter names.
func matchUser(e bot.EventRecord, user string) bool {
	if user == "" {
		return true
	}
	kind, id, ok := strings.Cut(user, ":")
	if !ok {
		kind, id = "", user
	}
	uidOK := e.MagnetUID != nil && strconv.FormatInt(int64(*e.MagnetUID), 10) == id
	tgOK := e.TelegramID != nil && string(*e.TelegramID) == id
	switch kind {
	case "uid":
		return uidOK
	case "tg":
		return tgOK
	default:
		return uidOK || tgOK
	}
}

// scanEvents lists the events of a filter, newest first, from f.Before down.
// Type and user are not filters of the outbox's list, so it reads pages until
// it has a page of matches or has read maxScanPages; next is where the next
// page starts, zero when there is none.
func (s *Server) scanEvents(ctx context.Context, f eventQuery, want int) (events []bot.EventRecord, next bot.EventID, err error) {
	before := f.Before
	size := want
	if f.filtered() {
		size = bot.BOT_OUTBOX_MAX_PENDING_LIMIT
	}
	for range maxScanPages {
		page, err := s.opts.Outbox.ListEvents(ctx, bot.EventFilter{State: f.State, Limit: size, BeforeID: before})
		if err != nil {
			return nil, 0, err
		}
		for _, e := range page {
			if (f.Type == "" || e.EventType == f.Type) && matchUser(e, f.User) {
				events = append(events, e)
				if len(events) == want {
					return events, e.ID, nil
				}
			}
		}
		if len(page) < size {
			return events, 0, nil
		}
		before = page[len(page)-1].ID
	}
	return events, before, nil
}

// eventRow is one outbox event in a list.
type eventRow struct {
	ID        string
	Href      string
	Type      string
	User      string
	UserHref  string
	State     string
	Attempts  int
	Created   string
	Due       string // the next retry of a retrying event, with how far off
	LastError string
}

func userLabel(uid *bot.UID, tg *bot.TelegramID) string {
	var parts []string
	if uid != nil {
		parts = append(parts, "uid "+strconv.FormatInt(int64(*uid), 10))
	}
	if tg != nil {
		parts = append(parts, "tg "+string(*tg))
	}
	if len(parts) == 0 {
		return "—"
	}
	return strings.Join(parts, " · ")
}

func userHref(uid *bot.UID, tg *bot.TelegramID) string {
	switch {
	case tg != nil:
		return "/admin/bot/users/" + url.PathEscape(string(*tg))
	case uid != nil:
		return "/admin/bot?user=uid:" + strconv.FormatInt(int64(*uid), 10)
	}
	return ""
}

func toEventRow(e bot.EventRecord, now time.Time) eventRow {
	row := eventRow{
		ID: strconv.FormatInt(int64(e.ID), 10), Href: "/admin/bot/events/" + strconv.FormatInt(int64(e.ID), 10),
		Type: string(e.EventType), User: userLabel(e.MagnetUID, e.TelegramID), UserHref: userHref(e.MagnetUID, e.TelegramID),
		State: string(e.State), Attempts: e.Attempts, Created: when(e.CreatedAt),
	}
	if e.State == bot.StateRetrying && e.NextRetryAt != nil {
		row.Due = when(*e.NextRetryAt) + " (" + ago(now, *e.NextRetryAt) + ")"
	}
	if e.LastError != nil {
		row.LastError = clip(mask.Phones(*e.LastError), 120)
	}
	return row
}

// stateTab is one state filter of the Bot outbox page.
type stateTab struct {
	Label, Count, Href string
	Active             bool
	Testid             string
}

// stageRow is one stage of the onboarding funnel.
type stageRow struct {
	Stage int
	Name  string
	Title string
	Count int64
	Href  string
	Width string // the bar's width in percent of the largest stage
}

// outgoingRow is one of the onboarding bot's Telegram calls.
type outgoingRow struct {
	ID        string
	Method    string
	Chat      string
	ChatHref  string
	Status    string
	Attempts  int
	Text      string
	LastError string
	At        string
	Failed    bool
}

func toOutgoingRow(o bot.Outgoing) outgoingRow {
	return outgoingRow{
		ID: strconv.FormatInt(o.ID, 10), Method: o.Method, Chat: string(o.ChatID),
		ChatHref: "/admin/bot/users/" + url.PathEscape(string(o.ChatID)), Status: o.Status, Attempts: o.Attempts,
		Text: clip(mask.Phones(o.Params.Text), 160), LastError: clip(mask.Phones(deref(o.LastError)), 160),
		At: when(o.UpdatedAt), Failed: o.Status == bot.OutgoingFailed,
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// botModel is the Bot outbox page.
type botModel struct {
	Wired       bool
	PerMinute   int64
	Tabs        []stateTab
	Query       eventQuery
	Types       []string
	Events      []eventRow
	Older       string
	Funnel      []stageRow
	FunnelWired bool
	FailedDMs   []outgoingRow
}

func (s *Server) botPage(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(w, r, "Bot outbox", "bot")
	if s.opts.Outbox == nil {
		s.render(w, r, botPage(p, botModel{}))
		return
	}
	ctx := r.Context()
	now := s.opts.DB.Now()
	f := parseEventQuery(r)
	m := botModel{Wired: true, Query: f, FunnelWired: s.opts.Onboarding != nil}
	for _, t := range bot.EventTypes {
		m.Types = append(m.Types, string(t))
	}
	counts, err := s.outboxCounts(ctx)
	if err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	if m.PerMinute, err = s.since(ctx, outboxHandled, now.Add(-time.Minute)); err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	for _, t := range []struct {
		state bot.EventState
		label string
		n     string
	}{
		{"", "All", ""},
		{bot.StatePending, "Pending", count(counts.Pending)},
		{bot.StateRetrying, "Retrying", count(counts.Retrying)},
		{bot.StateProcessed, "Processed", ""},
		{bot.StateDead, "Dead-lettered", count(counts.Dead)},
	} {
		testid := "tab-" + string(t.state)
		if t.state == "" {
			testid = "tab-all"
		}
		m.Tabs = append(m.Tabs, stateTab{Label: t.label, Count: t.n, Href: f.href(t.state, 0), Active: f.State == t.state, Testid: testid})
	}
	events, next, err := s.scanEvents(ctx, f, eventsPerPage)
	if err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	for _, e := range events {
		m.Events = append(m.Events, toEventRow(e, now))
	}
	if next > 0 {
		m.Older = f.href(f.State, next)
	}
	if m.Funnel, err = s.funnelRows(ctx); err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	if s.opts.Onboarding != nil {
		failed, err := s.opts.Onboarding.ListOutgoing(ctx, bot.OutgoingFilter{Status: bot.OutgoingFailed, Limit: 20})
		if err != nil {
			s.failed(w, r, "bot", err)
			return
		}
		for _, o := range failed {
			m.FailedDMs = append(m.FailedDMs, toOutgoingRow(o))
		}
	}
	s.render(w, r, botPage(p, m))
}

// funnelRows counts the funnel's users at each stage the bot knows.
func (s *Server) funnelRows(ctx context.Context) ([]stageRow, error) {
	counts, err := s.funnelStages(ctx)
	if err != nil {
		return nil, err
	}
	var top int64
	for _, n := range counts {
		top = max(top, n)
	}
	var rows []stageRow
	for st := bot.StageStarted; st <= bot.StageNftActivated; st++ {
		n := counts[int(st)]
		width := "0"
		if top > 0 {
			width = strconv.FormatFloat(100*float64(n)/float64(top), 'f', 1, 64)
		}
		rows = append(rows, stageRow{
			Stage: int(st), Name: st.String(), Title: st.Title(), Count: n, Width: width,
			Href: "/admin/bot/funnel?stage=" + strconv.Itoa(int(st)),
		})
	}
	return rows, nil
}

// eventDetail is one event's page.
type eventDetail struct {
	ID          string
	Type        string
	State       string
	User        string
	UserHref    string
	Created     string
	Processed   string
	Attempts    int
	LastAttempt string
	NextRetry   string
	DeadAt      string
	LastError   string
	Payload     string
	CanRedrive  bool
	Self        string
}

func toEventDetail(e bot.EventRecord, now time.Time) eventDetail {
	d := eventDetail{
		ID: strconv.FormatInt(int64(e.ID), 10), Type: string(e.EventType), State: string(e.State),
		User: userLabel(e.MagnetUID, e.TelegramID), UserHref: userHref(e.MagnetUID, e.TelegramID),
		Created: when(e.CreatedAt), Processed: whenPtr(e.ProcessedAt), Attempts: e.Attempts,
		LastAttempt: whenPtr(e.LastAttemptAt), NextRetry: whenPtr(e.NextRetryAt), DeadAt: whenPtr(e.DeadLetteredAt),
		LastError: mask.Phones(deref(e.LastError)), Payload: prettyPayload(e.Payload),
		CanRedrive: e.State == bot.StateDead || e.State == bot.StateRetrying,
	}
	if e.NextRetryAt != nil && e.State == bot.StateRetrying {
		d.NextRetry += " (" + ago(now, *e.NextRetryAt) + ")"
	}
	d.Self = "/admin/bot/events/" + d.ID
	return d
}

func pathInt(r *http.Request, name string) (int64, bool) {
	n, err := strconv.ParseInt(mux.Vars(r)[name], 10, 64)
	return n, err == nil && n > 0
}

func (s *Server) botEvent(w http.ResponseWriter, r *http.Request) {
	id, ok := pathInt(r, "id")
	if !ok || s.opts.Outbox == nil {
		s.problem(w, r, http.StatusNotFound, "bot", "There is no such event.")
		return
	}
	e, err := s.opts.Outbox.GetEvent(r.Context(), bot.EventID(id))
	if errors.Is(err, bot.ErrEventNotFound) {
		s.problem(w, r, http.StatusNotFound, "bot", "There is no event "+strconv.FormatInt(id, 10)+".")
		return
	}
	if err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	d := toEventDetail(e, s.opts.DB.Now())
	s.render(w, r, eventPage(s.newPage(w, r, "Event "+d.ID, "bot"), d))
}

func (s *Server) botRedrive(w http.ResponseWriter, r *http.Request) {
	id, _ := pathInt(r, "id")
	self := "/admin/bot/events/" + strconv.FormatInt(id, 10)
	if !s.parseForm(w, r, self) {
		return
	}
	back := backTo(r, self)
	if s.opts.Outbox == nil {
		s.done(w, r, back, false, "The bot outbox is not wired in this process.")
		return
	}
	if !s.confirmed(w, r, "bot", "Redrive event "+strconv.FormatInt(id, 10)+"? It becomes pending again at once, attempts reset to 0.", "Redrive", back) {
		return
	}
	_, err := s.opts.Outbox.Redrive(r.Context(), bot.EventID(id))
	if err != nil {
		s.actionFailed(w, r, back, err, errors.Is(err, bot.ErrEventNotFound) || errors.Is(err, bot.ErrEventProcessed))
		return
	}
	s.done(w, r, back, true, "Event "+strconv.FormatInt(id, 10)+" redriven: it is pending again.")
}

func (s *Server) botOutgoingRedrive(w http.ResponseWriter, r *http.Request) {
	id, _ := pathInt(r, "id")
	if !s.parseForm(w, r, "/admin/bot") {
		return
	}
	back := backTo(r, "/admin/bot")
	if s.opts.Onboarding == nil {
		s.done(w, r, back, false, "The onboarding bot does not run in this process.")
		return
	}
	if !s.confirmed(w, r, "bot", "Send Telegram call "+strconv.FormatInt(id, 10)+" again? Its attempts reset to 0.", "Send again", back) {
		return
	}
	_, err := s.opts.Onboarding.RedriveOutgoing(r.Context(), id)
	if err != nil {
		s.actionFailed(w, r, back, err, errors.Is(err, bot.ErrOutgoingNotFound) || errors.Is(err, bot.ErrOutgoingNotFailed))
		return
	}
	s.done(w, r, back, true, "Telegram call "+strconv.FormatInt(id, 10)+" is queued again.")
}

// funnelModel is the funnel page: the stages and the users at one of them.
type funnelModel struct {
	Wired  bool
	Stages []stageRow
	Stage  int
	Title  string
	Users  []funnelRow
}

type funnelRow struct {
	TelegramID string
	Href       string
	UID        string
	Stage      string
	Leader     string
	Bind       string
	LeftLeader bool
	Updated    string
}

func uidText(u *bot.UID) string {
	if u == nil {
		return "—"
	}
	return strconv.FormatInt(int64(*u), 10)
}

func toFunnelRow(f bot.Funnel) funnelRow {
	leader := "—"
	if f.LeaderUID != nil {
		leader = "uid " + uidText(f.LeaderUID)
		if f.LeaderCode != "" {
			leader += " (" + f.LeaderCode + ")"
		}
	}
	row := funnelRow{
		TelegramID: string(f.TelegramID), Href: "/admin/bot/users/" + url.PathEscape(string(f.TelegramID)),
		UID: "—", Stage: f.Stage.String(), Leader: leader, Bind: string(f.BindState),
		LeftLeader: f.LeftLeaderAt != nil, Updated: when(f.UpdatedAt),
	}
	if f.UID != nil {
		row.UID = "uid " + uidText(f.UID)
	}
	return row
}

func (s *Server) botFunnel(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	m := funnelModel{Wired: s.opts.Onboarding != nil}
	var err error
	if m.Stages, err = s.funnelRows(ctx); err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	if st, err := strconv.Atoi(r.URL.Query().Get("stage")); err == nil && st >= int(bot.StageStarted) && st <= int(bot.StageNftActivated) {
		m.Stage = st
		m.Title = bot.Stage(st).String() + " — " + bot.Stage(st).Title()
	}
	if m.Wired {
		list, err := s.opts.Onboarding.ListFunnels(ctx, bot.FunnelFilter{Stage: bot.Stage(m.Stage), Limit: 100})
		if err != nil {
			s.failed(w, r, "bot", err)
			return
		}
		for _, f := range list {
			m.Users = append(m.Users, toFunnelRow(f))
		}
	}
	s.render(w, r, funnelPage(s.newPage(w, r, "Onboarding funnel", "bot"), m))
}

// timelineEntry is one thing that happened to a user, in time order.
type timelineEntry struct {
	at     time.Time
	When   string
	Kind   string // "event", "change", "message"
	Text   string
	Detail string
	Href   string
	Bad    bool
}

// userModel is one Telegram user's page: funnel and timeline.
type userModel struct {
	TelegramID string
	HasFunnel  bool
	Funnel     funnelRow
	Timeline   []timelineEntry
}

func (s *Server) botUser(w http.ResponseWriter, r *http.Request) {
	tg := bot.TelegramID(mux.Vars(r)["tg"])
	ctx := r.Context()
	m := userModel{TelegramID: string(tg)}
	var timeline []timelineEntry
	users := []string{"tg:" + string(tg)}
	if s.opts.Onboarding != nil {
		f, hist, err := s.opts.Onboarding.GetFunnel(ctx, tg)
		switch {
		case errors.Is(err, bot.ErrFunnelNotFound):
		case err != nil:
			s.failed(w, r, "bot", err)
			return
		default:
			m.HasFunnel, m.Funnel = true, toFunnelRow(f)
			if f.UID != nil {
				users = append(users, "uid:"+uidText(f.UID))
			}
			for _, h := range hist {
				timeline = append(timeline, timelineEntry{
					at: h.At, Kind: "change",
					Text:   h.Change + ": " + valueText(h.OldValue) + " → " + valueText(h.NewValue),
					Detail: "cause " + h.Cause,
				})
			}
		}
		out, err := s.opts.Onboarding.ListOutgoing(ctx, bot.OutgoingFilter{Limit: bot.BOT_OUTBOX_MAX_PENDING_LIMIT})
		if err != nil {
			s.failed(w, r, "bot", err)
			return
		}
		for _, o := range out {
			if o.ChatID != tg || o.Method != "sendMessage" {
				continue
			}
			e := timelineEntry{at: o.CreatedAt, Kind: "message", Text: clip(mask.Phones(o.Params.Text), 200),
				Detail: o.Status + " after " + countInt(o.Attempts) + " attempt(s)", Bad: o.Status == bot.OutgoingFailed}
			if o.LastError != nil && e.Bad {
				e.Detail += ": " + mask.Phones(*o.LastError)
			}
			timeline = append(timeline, e)
		}
	}
	if s.opts.Outbox != nil {
		seen := map[bot.EventID]bool{}
		for _, u := range users {
			events, _, err := s.scanEvents(ctx, eventQuery{User: u}, eventsPerPage)
			if err != nil {
				s.failed(w, r, "bot", err)
				return
			}
			for _, e := range events {
				if seen[e.ID] {
					continue
				}
				seen[e.ID] = true
				detail := string(e.State)
				if e.Attempts > 0 {
					detail += ", " + countInt(e.Attempts) + " attempt(s)"
				}
				timeline = append(timeline, timelineEntry{
					at: e.CreatedAt, Kind: "event", Text: "outbox event " + string(e.EventType) + " #" + strconv.FormatInt(int64(e.ID), 10),
					Detail: detail, Href: "/admin/bot/events/" + strconv.FormatInt(int64(e.ID), 10), Bad: e.State == bot.StateDead,
				})
			}
		}
	}
	slices.SortStableFunc(timeline, func(a, b timelineEntry) int { return a.at.Compare(b.at) })
	for i := range timeline {
		timeline[i].When = when(timeline[i].at)
	}
	m.Timeline = timeline
	s.render(w, r, userPage(s.newPage(w, r, "Telegram user "+string(tg), "bot"), m))
}

func valueText(v *string) string {
	if v == nil || *v == "" {
		return "—"
	}
	return mask.Phones(*v)
}
