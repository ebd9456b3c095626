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

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/bot/onboarding"
	"switchyard/mask"
	"switchyard/queue"
)

// outboxOps is what the console needs of the bot outbox (*backend.Outbox).
type outboxOps interface {
	ListEvents(ctx context.Context, f backend.EventFilter) ([]backend.EventRecord, error)
	CountEvents(ctx context.Context, f backend.EventFilter, upTo int64) (int64, error)
	RedriveDead(ctx context.Context, f backend.EventFilter, ids []contract.EventID) (int64, error)
	GetEvent(ctx context.Context, id contract.EventID) (backend.EventRecord, error)
	Redrive(ctx context.Context, id contract.EventID) (backend.EventRecord, error)
	CountUnfinished(ctx context.Context) (backend.Counts, error)
	CountHandled(ctx context.Context, from, to time.Time) (int64, error)
	CountDeadLettered(ctx context.Context, from, to time.Time) (int64, error)
}

// funnelOps is what the console needs of the funnel in any process
// (*onboarding.Stats).
type funnelOps interface {
	CountByStage(ctx context.Context) (map[onboarding.Stage]int64, error)
}

// onboardingOps is what the console needs of the onboarding bot (*onboarding.Bot).
type onboardingOps interface {
	ListFunnels(ctx context.Context, f onboarding.FunnelFilter) ([]onboarding.Funnel, error)
	CountFunnels(ctx context.Context, f onboarding.FunnelFilter) (int64, error)
	GetFunnel(ctx context.Context, tg contract.TelegramID) (onboarding.Funnel, []onboarding.FunnelChange, error)
	ListDMs(ctx context.Context, f onboarding.DMFilter) ([]onboarding.DM, error)
	RedriveDM(ctx context.Context, id string) error
	RedriveDMs(ctx context.Context, ids []string) (int64, error)
}

// eventsPerPage is how many events the Bot outbox page lists at once.
const eventsPerPage = perPage

// eventQuery is the Bot outbox page's filter, from its query string.
type eventQuery struct {
	State  backend.EventState
	Type   contract.EventType
	User   string // "uid:5", "tg:123", or a bare number matching either
	Search string // q: an event id, uid or Telegram id, or payload text
}

func parseEventQuery(q url.Values) eventQuery {
	f := eventQuery{
		State:  backend.EventState(q.Get("state")),
		Type:   contract.EventType(q.Get("type")),
		User:   strings.TrimSpace(q.Get("user")),
		Search: strings.TrimSpace(q.Get("q")),
	}
	switch f.State {
	case backend.StatePending, backend.StateRetrying, backend.StateProcessed, backend.StateDead:
	default:
		f.State = ""
	}
	if !f.Type.Valid() {
		f.Type = ""
	}
	if len(f.Search) > maxKeyLen {
		f.Search = strings.ToValidUTF8(f.Search[:maxKeyLen], "")
	}
	return f
}

// fields are the filters of q but its state, as form fields.
func (f eventQuery) fields() []formField {
	var ff []formField
	if f.Type != "" {
		ff = append(ff, formField{"type", string(f.Type)})
	}
	if f.User != "" {
		ff = append(ff, formField{"user", f.User})
	}
	if f.Search != "" {
		ff = append(ff, formField{"q", f.Search})
	}
	return ff
}

// href is the first window of the list of f in state.
func (f eventQuery) href(state backend.EventState) string {
	v := url.Values{}
	if state != "" {
		v.Set("state", string(state))
	}
	for _, ff := range f.fields() {
		v.Set(ff.Name, ff.Value)
	}
	if len(v) == 0 {
		return "/admin/bot"
	}
	return "/admin/bot?" + v.Encode()
}

// eventFilter is the outbox's filter of q: a user is "uid:5", "tg:123", or
// a bare number matching either. ok is false for a user no event can match.
func (f eventQuery) eventFilter(limit int) (ef backend.EventFilter, ok bool) {
	ef = backend.EventFilter{State: f.State, Type: f.Type, Limit: limit, Search: f.Search}
	if f.User == "" {
		return ef, true
	}
	kind, id, found := strings.Cut(f.User, ":")
	if !found {
		kind, id = "", f.User
	}
	uid, uidErr := strconv.ParseInt(id, 10, 64)
	tg, tgErr := contract.ParseTelegramID(id)
	switch {
	case kind == "uid" && uidErr == nil && uid > 0:
		ef.MagnetUID = contract.UID(uid)
	case kind == "tg" && tgErr == nil:
		ef.TelegramID = tg
	case kind == "" && uidErr == nil && uid > 0 && tgErr == nil:
		ef.MagnetUID, ef.TelegramID = contract.UID(uid), tg
	case kind == "" && tgErr == nil:
		ef.TelegramID = tg
	default:
		return ef, false
	}
	return ef, true
}

// listEvents lists a window of the events of a filter, in the list's order
// (newest first), and the pager around it; the outbox filters, searches and
// counts itself.
func (s *Server) listEvents(ctx context.Context, f eventQuery, w window, want int, base url.URL) ([]backend.EventRecord, pager, error) {
	ef, ok := f.eventFilter(want + 1)
	if !ok {
		return nil, pager{Total: 0, Offset: 0, Noun: "events"}, nil
	}
	ef.BeforeID, ef.AfterID = contract.EventID(int64Key(w.Before)), contract.EventID(int64Key(w.After))
	events, err := s.opts.Outbox.ListEvents(ctx, ef)
	if err != nil {
		return nil, pager{}, err
	}
	events, newer, older := fitWindow(events, want, w)
	var first, last string
	if len(events) > 0 {
		first, last = strconv.FormatInt(int64(events[0].ID), 10), strconv.FormatInt(int64(events[len(events)-1].ID), 10)
	}
	p := newPager(base, len(events), newer, older, first, last, "events")
	count := func(ctx context.Context, w window, upTo int64) (int64, error) {
		cf := ef
		cf.BeforeID, cf.AfterID = contract.EventID(int64Key(w.Before)), contract.EventID(int64Key(w.After))
		return s.opts.Outbox.CountEvents(ctx, cf, upTo)
	}
	if err := p.place(ctx, count, w, first, last, ef.SearchReadsRows()); err != nil {
		return nil, pager{}, err
	}
	return events, p, nil
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

func userLabel(uid *contract.UID, tg *contract.TelegramID) string {
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

func userHref(uid *contract.UID, tg *contract.TelegramID) string {
	switch {
	case tg != nil:
		return "/admin/bot/users/" + url.PathEscape(string(*tg))
	case uid != nil:
		return "/admin/bot?user=uid:" + strconv.FormatInt(int64(*uid), 10)
	}
	return ""
}

func toEventRow(e backend.EventRecord, now time.Time) eventRow {
	row := eventRow{
		ID: strconv.FormatInt(int64(e.ID), 10), Href: "/admin/bot/events/" + strconv.FormatInt(int64(e.ID), 10),
		Type: string(e.EventType), User: userLabel(e.MagnetUID, e.TelegramID), UserHref: userHref(e.MagnetUID, e.TelegramID),
		State: string(e.State), Attempts: e.Attempts, Created: when(e.CreatedAt),
	}
	if e.State == backend.StateRetrying && e.NextRetryAt != nil {
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

// outgoingRow is one of the onboarding bot's Telegram calls (a DM).
type outgoingRow struct {
	ID        string // the queue message's id: a failed one's is its dead letter's
	Method    string
	Chat      string
	ChatHref  string
	Status    string
	Attempts  int
	Text      string
	LastError string
	At        string
	Failed    bool
	// Redrive is the action that sends a failed DM again (the bot's, which
	// also clears the user's unreachable mark).
	Redrive string
}

func toOutgoingRow(d onboarding.DM) outgoingRow {
	row := outgoingRow{
		ID: d.MessageID, Method: d.Method, Chat: string(d.ChatID),
		ChatHref: "/admin/bot/users/" + url.PathEscape(string(d.ChatID)), Status: string(d.Status), Attempts: d.Attempts,
		Text: clip(mask.Phones(d.Text), 160), LastError: clip(mask.Phones(d.LastError), 160),
		At: when(d.At), Failed: d.Status == onboarding.DMFailed,
	}
	if row.Failed {
		row.Redrive = "/admin/bot/dms/" + url.PathEscape(d.MessageID) + "/redrive"
	}
	return row
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// botModel is the Bot outbox page.
type botModel struct {
	Wired     bool
	PerMinute int64
	Tabs      []stateTab
	Query     eventQuery
	Types     []string
	Events    []eventRow
	Pager     pager
	// Bulk is the redrive of chosen dead letters, on the dead-lettered list.
	Bulk        *bulkModel
	Self        string
	Funnel      []stageRow
	FunnelWired bool
	FailedDMs   []outgoingRow
	// DMBulk sends chosen failed DMs (or all of them) again.
	DMBulk *bulkModel
}

// searchKeep are the filters the search form keeps: the state and the
// others.
func (m botModel) searchKeep() []formField {
	var keep []formField
	if m.Query.State != "" {
		keep = append(keep, formField{"state", string(m.Query.State)})
	}
	for _, f := range m.Query.fields() {
		if f.Name != "q" {
			keep = append(keep, f)
		}
	}
	return keep
}

func (s *Server) botPage(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(w, r, "Bot outbox", "bot")
	if s.opts.Outbox == nil {
		s.render(w, r, botPage(p, botModel{}))
		return
	}
	ctx := r.Context()
	now := s.opts.DB.Now()
	f := parseEventQuery(r.URL.Query())
	m := botModel{Wired: true, Query: f, FunnelWired: s.opts.Onboarding != nil, Self: r.URL.RequestURI()}
	for _, t := range contract.EventTypes {
		m.Types = append(m.Types, string(t))
	}
	counts, err := s.opts.Outbox.CountUnfinished(ctx)
	if err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	if m.PerMinute, err = s.since(ctx, outboxHandled, now.Add(-time.Minute)); err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	for _, t := range []struct {
		state backend.EventState
		label string
		n     string
	}{
		{"", "All", ""},
		{backend.StatePending, "Pending", count(counts.Pending)},
		{backend.StateRetrying, "Retrying", count(counts.Retrying)},
		{backend.StateProcessed, "Processed", ""},
		{backend.StateDead, "Dead-lettered", count(counts.Dead)},
	} {
		testid := "tab-" + string(t.state)
		if t.state == "" {
			testid = "tab-all"
		}
		m.Tabs = append(m.Tabs, stateTab{Label: t.label, Count: t.n, Href: f.href(t.state), Active: f.State == t.state, Testid: testid})
	}
	events, pg, err := s.listEvents(ctx, f, windowOf(r), eventsPerPage, listBase(r))
	if err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	m.Pager = pg
	for _, e := range events {
		m.Events = append(m.Events, toEventRow(e, now))
	}
	if f.State == backend.StateDead {
		m.Bulk = &bulkModel{
			FormID: "bulk-events", Noun: "dead-lettered events", Total: pg.Total,
			Fields:  append(f.fields(), formField{"back", m.Self}),
			Actions: []bulkAction{{Label: "Redrive", Action: "/admin/bot/events/redrive", Testid: "redrive"}},
		}
		if pg.Capped {
			m.Bulk.Total = 0 // "all N matching" needs N
		}
	}
	if m.Funnel, err = s.funnelRows(ctx); err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	if s.opts.Onboarding != nil {
		failed, err := s.opts.Onboarding.ListDMs(ctx, onboarding.DMFilter{Status: onboarding.DMFailed, Limit: perPage})
		if err != nil {
			s.failed(w, r, "bot", err)
			return
		}
		for _, o := range failed {
			m.FailedDMs = append(m.FailedDMs, toOutgoingRow(o))
		}
		if len(failed) > 0 {
			m.DMBulk = &bulkModel{
				FormID: "bulk-dms", Noun: "failed Telegram calls", Total: s.failedDMCount(r, len(failed)),
				Fields:  []formField{{"back", m.Self}},
				Actions: []bulkAction{{Label: "Send again", Action: "/admin/bot/dms/redrive", Testid: "redrive"}},
			}
		}
	}
	s.render(w, r, botPage(p, m))
}

// funnelRows counts the funnel's users at each stage the bot knows.
func (s *Server) funnelRows(ctx context.Context) ([]stageRow, error) {
	counts := map[onboarding.Stage]int64{}
	if s.opts.Funnel != nil {
		var err error
		if counts, err = s.opts.Funnel.CountByStage(ctx); err != nil {
			return nil, err
		}
	}
	var top int64
	for _, n := range counts {
		top = max(top, n)
	}
	var rows []stageRow
	for st := onboarding.StageStarted; st <= onboarding.StageNftActivated; st++ {
		n := counts[st]
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

func toEventDetail(e backend.EventRecord, now time.Time) eventDetail {
	d := eventDetail{
		ID: strconv.FormatInt(int64(e.ID), 10), Type: string(e.EventType), State: string(e.State),
		User: userLabel(e.MagnetUID, e.TelegramID), UserHref: userHref(e.MagnetUID, e.TelegramID),
		Created: when(e.CreatedAt), Processed: whenPtr(e.ProcessedAt), Attempts: e.Attempts,
		LastAttempt: whenPtr(e.LastAttemptAt), NextRetry: whenPtr(e.NextRetryAt), DeadAt: whenPtr(e.DeadLetteredAt),
		LastError: mask.Phones(deref(e.LastError)), Payload: prettyPayload(e.Payload),
		CanRedrive: e.State == backend.StateDead || e.State == backend.StateRetrying,
	}
	if e.NextRetryAt != nil && e.State == backend.StateRetrying {
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
	e, err := s.opts.Outbox.GetEvent(r.Context(), contract.EventID(id))
	if errors.Is(err, contract.ErrEventNotFound) {
		s.problem(w, r, http.StatusNotFound, "bot", "There is no event "+strconv.FormatInt(id, 10)+".")
		return
	}
	if err != nil {
		s.failed(w, r, "bot", err)
		return
	}
	d := toEventDetail(e, s.opts.DB.Now())
	s.render(w, r, eventPage(s.newPage(w, r, "Event "+d.ID, "bot"), d, s.eventAttempts(r, e.ID)))
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
	_, err := s.opts.Outbox.Redrive(r.Context(), contract.EventID(id))
	if err != nil {
		s.actionFailed(w, r, back, err, errors.Is(err, contract.ErrEventNotFound) || errors.Is(err, contract.ErrEventProcessed))
		return
	}
	s.done(w, r, back, true, "Event "+strconv.FormatInt(id, 10)+" redriven: it is pending again.")
}

// botRedriveDead redrives dead-lettered events in bulk: the chosen ones
// (id=…), or every one matching the list's filters (scope=all), after a
// confirmation that states how many.
func (s *Server) botRedriveDead(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r, "/admin/bot?state=dead") {
		return
	}
	back := backTo(r, "/admin/bot?state=dead")
	if s.opts.Outbox == nil {
		s.done(w, r, back, false, "The bot outbox is not wired in this process.")
		return
	}
	chosen, all, ok := bulkScope(r)
	if !ok {
		s.done(w, r, back, false, "No event was chosen.")
		return
	}
	f := parseEventQuery(r.PostForm)
	f.State = backend.StateDead
	ef, match := f.eventFilter(0)
	var ids []contract.EventID
	var question string
	if all {
		n := int64(0)
		if match {
			var err error
			if n, err = s.opts.Outbox.CountEvents(r.Context(), ef, 0); err != nil {
				s.failed(w, r, "bot", err)
				return
			}
		}
		if n == 0 {
			s.done(w, r, back, false, "No dead-lettered event matches.")
			return
		}
		question = "Redrive all " + count(n) + " dead-lettered events matching the list's filters? They become pending again at once, attempts reset to 0."
	} else {
		for _, c := range chosen {
			if id := int64Key(c); id > 0 {
				ids = append(ids, contract.EventID(id))
			}
		}
		if len(ids) == 0 {
			s.done(w, r, back, false, "No event was chosen.")
			return
		}
		question = "Redrive the " + countInt(len(ids)) + " chosen dead-lettered events? They become pending again at once, attempts reset to 0."
		ef, match = backend.EventFilter{}, true
	}
	if !s.confirmed(w, r, "bot", question, "Redrive", back) {
		return
	}
	n := int64(0)
	if match {
		var err error
		if n, err = s.opts.Outbox.RedriveDead(r.Context(), ef, ids); err != nil {
			var invalid *contract.InvalidError
			s.actionFailed(w, r, back, err, errors.As(err, &invalid))
			return
		}
	}
	s.done(w, r, back, n > 0, count(n)+" dead-lettered events redriven: they are pending again.")
}

// failedDMCount is how many DMs failed: the dead letters of the DM queue,
// from the queues' statistics, or the shown ones when those are not wired.
func (s *Server) failedDMCount(r *http.Request, shown int) int64 {
	if st, ok := s.queueStats(r); ok {
		for _, q := range st.Queues {
			if q.Name == onboarding.DMQueue {
				return q.Dead
			}
		}
	}
	return int64(shown)
}

// botRedriveDMs sends failed DMs again in bulk: the chosen ones, or all of
// them, after a confirmation that states how many.
func (s *Server) botRedriveDMs(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r, "/admin/bot") {
		return
	}
	back := backTo(r, "/admin/bot")
	if s.opts.Onboarding == nil {
		s.done(w, r, back, false, "The onboarding bot is not wired in this process.")
		return
	}
	chosen, all, ok := bulkScope(r)
	if !ok {
		s.done(w, r, back, false, "No Telegram call was chosen.")
		return
	}
	question := "Send the " + countInt(len(chosen)) + " chosen failed Telegram calls again? Each user's unreachable mark is cleared."
	if all {
		chosen = nil
		n := s.failedDMCount(r, 0)
		question = "Send all " + count(n) + " failed Telegram calls again (at most 1,000 at once)? Each user's unreachable mark is cleared."
	}
	if !s.confirmed(w, r, "bot", question, "Send again", back) {
		return
	}
	n, err := s.opts.Onboarding.RedriveDMs(r.Context(), chosen)
	if err != nil {
		s.actionFailed(w, r, back, err, false)
		return
	}
	s.done(w, r, back, n > 0, count(n)+" failed Telegram calls sent again: they are queued.")
}

func (s *Server) botDMRedrive(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if !s.parseForm(w, r, "/admin/bot") {
		return
	}
	back := backTo(r, "/admin/bot")
	if s.opts.Onboarding == nil {
		s.done(w, r, back, false, "The onboarding bot is not wired in this process.")
		return
	}
	if !s.confirmed(w, r, "bot", "Send Telegram call "+id+" again?", "Send again", back) {
		return
	}
	if err := s.opts.Onboarding.RedriveDM(r.Context(), id); err != nil {
		s.actionFailed(w, r, back, err, errors.Is(err, queue.ErrNotFound))
		return
	}
	s.done(w, r, back, true, "Telegram call "+id+" sent again: the user's unreachable mark is cleared and it is queued.")
}

// funnelModel is the funnel page: the stages and the users at one of them.
type funnelModel struct {
	Wired  bool
	Stages []stageRow
	Stage  int
	Title  string
	Search string
	Users  []funnelRow
	Pager  pager
}

// keep are the filters the funnel's search keeps.
func (m funnelModel) keep() []formField {
	if m.Stage == 0 {
		return nil
	}
	return []formField{{"stage", strconv.Itoa(m.Stage)}}
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

func uidText(u *contract.UID) string {
	if u == nil {
		return "—"
	}
	return strconv.FormatInt(int64(*u), 10)
}

func toFunnelRow(f onboarding.Funnel) funnelRow {
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
	if st, err := strconv.Atoi(r.URL.Query().Get("stage")); err == nil && st >= int(onboarding.StageStarted) && st <= int(onboarding.StageNftActivated) {
		m.Stage = st
		m.Title = onboarding.Stage(st).String() + " — " + onboarding.Stage(st).Title()
	}
	m.Search = searchTerm(r.URL.Query())
	if m.Wired {
		win := windowOf(r)
		f := onboarding.FunnelFilter{Stage: onboarding.Stage(m.Stage), Search: m.Search, Before: win.Before, After: win.After, Limit: perPage + 1}
		list, err := s.opts.Onboarding.ListFunnels(ctx, f)
		var invalid *contract.InvalidError
		if errors.As(err, &invalid) {
			s.problem(w, r, http.StatusBadRequest, "bot", "That is no place in the funnel: "+err.Error())
			return
		}
		if err != nil {
			s.failed(w, r, "bot", err)
			return
		}
		list, newer, older := fitWindow(list, perPage, win)
		var first, last string
		if len(list) > 0 {
			first, last = list[0].Key(), list[len(list)-1].Key()
		}
		m.Pager = newPager(listBase(r), len(list), newer, older, first, last, "Telegram users")
		count := func(ctx context.Context, w window, _ int64) (int64, error) {
			cf := f
			cf.Before, cf.After = w.Before, w.After
			return s.opts.Onboarding.CountFunnels(ctx, cf)
		}
		if err := m.Pager.place(ctx, count, win, first, last, false); err != nil {
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
	tg := contract.TelegramID(mux.Vars(r)["tg"])
	ctx := r.Context()
	m := userModel{TelegramID: string(tg)}
	var timeline []timelineEntry
	users := []string{"tg:" + string(tg)}
	if s.opts.Onboarding != nil {
		f, hist, err := s.opts.Onboarding.GetFunnel(ctx, tg)
		switch {
		case errors.Is(err, onboarding.ErrFunnelNotFound):
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
		dms, err := s.opts.Onboarding.ListDMs(ctx, onboarding.DMFilter{ChatID: tg, Limit: contract.BOT_OUTBOX_MAX_PENDING_LIMIT})
		if err != nil {
			s.failed(w, r, "bot", err)
			return
		}
		for _, d := range dms {
			if d.Method != "sendMessage" {
				continue
			}
			e := timelineEntry{at: d.At, Kind: "message", Text: clip(mask.Phones(d.Text), 200),
				Detail: string(d.Status) + " after " + countInt(d.Attempts) + " attempt(s)", Bad: d.Status == onboarding.DMFailed}
			if d.LastError != "" && e.Bad {
				e.Detail += ": " + mask.Phones(d.LastError)
			}
			timeline = append(timeline, e)
		}
	}
	if s.opts.Outbox != nil {
		seen := map[contract.EventID]bool{}
		for _, u := range users {
			events, _, err := s.listEvents(ctx, eventQuery{User: u}, window{}, eventsPerPage, url.URL{Path: "/admin/bot"})
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
					Detail: detail, Href: "/admin/bot/events/" + strconv.FormatInt(int64(e.ID), 10), Bad: e.State == backend.StateDead,
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
