package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"switchyard/mask"
	"switchyard/queue"
	"switchyard/referral"
)

// referralOps is what the console needs of the referral context (*referral.Service).
type referralOps interface {
	CreateLink(ctx context.Context, nl referral.NewLink) (referral.Link, error)
	DeleteLink(ctx context.Context, id referral.LinkID) error
	ListLinks(ctx context.Context, f referral.LinkFilter) ([]referral.Link, error)
	CountLinks(ctx context.Context, f referral.LinkFilter, upTo int64) (int64, error)
	DeleteLinks(ctx context.Context, f referral.LinkFilter, ids []referral.LinkID) (int64, error)
	CountReplicas(ctx context.Context, f referral.ReplicaFilter, upTo int64) (int64, error)
	Replica(ctx context.Context, id referral.UserID) (referral.Replica, error)
	ListBonds(ctx context.Context, f referral.BondFilter) ([]referral.Bond, error)
	ListRegistrations(ctx context.Context, f referral.RegistrationFilter) ([]referral.Registration, error)
	MyReferrer(ctx context.Context, user referral.UserID) (referral.Referrer, error)
	ListReplicas(ctx context.Context, f referral.ReplicaFilter) ([]referral.Replica, error)
	CountBonds(ctx context.Context) (int64, error)
	ConsumedBetween(ctx context.Context, from, to time.Time) (int64, error)
	BondsBetween(ctx context.Context, from, to time.Time) (int64, error)
	LinkLookupsBetween(ctx context.Context, from, to time.Time) (referral.LinkLookups, error)
}

// linkRow is one referral link.
type linkRow struct {
	ID, URL, Owner, OwnerHref, Tenant, Channel, Created string
	Deleted                                             string // when it was deleted; empty while live
}

func referralUserHref(id referral.UserID) string {
	return "/admin/referral/users/" + url.PathEscape(string(id))
}

func toLinkRow(l referral.Link) linkRow {
	row := linkRow{
		ID: string(l.ID), URL: l.URL, Owner: string(l.OwnerUserID), OwnerHref: referralUserHref(l.OwnerUserID),
		Tenant: l.TenantID, Channel: l.Channel, Created: when(l.CreatedAt),
	}
	if !l.DeletedAt.IsZero() {
		row.Deleted = when(l.DeletedAt)
	}
	return row
}

// replicaRow is one user's replica, phone masked.
type replicaRow struct {
	ID, Href, Type, Status, Name, Phone, Registered, Updated string
	Version                                                  int64
	Company                                                  string
}

func toReplicaRow(r referral.Replica) replicaRow {
	name := r.Name.Display()
	if name == "" {
		name = "—"
	}
	company := "—"
	if r.CompanyID != nil {
		company = *r.CompanyID
	}
	return replicaRow{
		ID: string(r.ID), Href: referralUserHref(r.ID), Type: string(r.Type), Status: string(r.Status), Name: name,
		Phone: mask.Phone(r.PhoneNumber), Registered: when(r.RegisteredAt), Updated: when(r.UpdatedAt),
		Version: r.ReplicaVersion, Company: company,
	}
}

// linkForm is the create-link form's values.
type linkForm struct {
	URL, Owner, Tenant, Channel string
	Error                       string
}

// referralModel is the Referral page.
type referralModel struct {
	Wired       bool
	Topic       string
	Group       string
	Consumer    *groupRow
	DLQ         []deadRow
	DLQHref     string
	Links       []linkRow
	ShowDeleted bool
	Replicas    []replicaRow
	Bonds       int64
	Form        linkForm
	// LinkCount and ReplicaCount are how many there are: the page shows
	// the newest of each, and their own pages all of them.
	LinkCount, ReplicaCount int64
}

func (s *Server) referralModel(r *http.Request) (referralModel, error) {
	ctx := r.Context()
	m := referralModel{
		Wired: s.opts.Referral != nil, Topic: referral.TopicIdentityUsers, Group: referral.ConsumerGroup,
		DLQHref:     queueHref(referral.TopicIdentityUsers, referral.ConsumerGroup),
		ShowDeleted: r.URL.Query().Get("deleted") == "1",
		Form:        linkForm{Channel: "web"},
	}
	if st, ok := s.queueStats(r); ok {
		if g, ok := groupOf(st, m.Topic, m.Group); ok {
			m.Consumer = &g
		}
	}
	if s.opts.Queues != nil {
		dead, err := s.opts.Queues.ListDead(ctx, queue.DeadFilter{Queue: m.Topic, Group: m.Group, Limit: 50})
		if err != nil {
			return m, err
		}
		m.DLQ = toDeadRows(dead)
	}
	if !m.Wired {
		return m, nil
	}
	var err error
	if m.Bonds, err = s.opts.Referral.CountBonds(ctx); err != nil {
		return m, err
	}
	links, err := s.opts.Referral.ListLinks(ctx, referral.LinkFilter{IncludeDeleted: m.ShowDeleted, Limit: 20})
	if err != nil {
		return m, err
	}
	if m.LinkCount, err = s.opts.Referral.CountLinks(ctx, referral.LinkFilter{IncludeDeleted: m.ShowDeleted}, 0); err != nil {
		return m, err
	}
	if m.ReplicaCount, err = s.opts.Referral.CountReplicas(ctx, referral.ReplicaFilter{}, 0); err != nil {
		return m, err
	}
	for _, l := range links {
		m.Links = append(m.Links, toLinkRow(l))
	}
	replicas, err := s.opts.Referral.ListReplicas(ctx, referral.ReplicaFilter{Limit: 10})
	if err != nil {
		return m, err
	}
	for _, rep := range replicas {
		m.Replicas = append(m.Replicas, toReplicaRow(rep))
	}
	return m, nil
}

func (s *Server) referralPage(w http.ResponseWriter, r *http.Request) {
	m, err := s.referralModel(r)
	if err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	s.render(w, r, referralPage(s.newPage(w, r, "Referral", "referral"), m))
}

func (s *Server) referralCreateLink(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r, "/admin/referral") {
		return
	}
	if s.opts.Referral == nil {
		s.done(w, r, "/admin/referral", false, "The referral context is not wired in this process.")
		return
	}
	form := linkForm{
		URL: strings.TrimSpace(r.PostForm.Get("url")), Owner: strings.TrimSpace(r.PostForm.Get("owner")),
		Tenant: strings.TrimSpace(r.PostForm.Get("tenant")), Channel: strings.TrimSpace(r.PostForm.Get("channel")),
	}
	l, err := s.opts.Referral.CreateLink(r.Context(), referral.NewLink{
		URL: form.URL, OwnerUserID: referral.UserID(form.Owner), TenantID: form.Tenant, Channel: form.Channel,
	})
	if errors.Is(err, referral.ErrInvalidLink) || errors.Is(err, referral.ErrSlugTaken) {
		// The page again, with what the operator typed and what is wrong with it.
		m, merr := s.referralModel(r)
		if merr != nil {
			s.failed(w, r, "referral", merr)
			return
		}
		form.Error = err.Error()
		m.Form = form
		s.renderStatus(w, r, http.StatusUnprocessableEntity, referralPage(s.newPage(w, r, "Referral", "referral"), m))
		return
	}
	if err != nil {
		s.actionFailed(w, r, "/admin/referral", err, false)
		return
	}
	s.done(w, r, "/admin/referral", true, "Link "+l.URL+" created.")
}

func (s *Server) referralDeleteLink(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	if !s.parseForm(w, r, "/admin/referral") {
		return
	}
	back := backTo(r, "/admin/referral")
	if s.opts.Referral == nil {
		s.done(w, r, back, false, "The referral context is not wired in this process.")
		return
	}
	what := "link " + id
	if u := r.PostForm.Get("url"); u != "" {
		what = "link " + u
	}
	if !s.confirmed(w, r, "referral", "Delete "+what+"? Its slug stops resolving at once (guard G1); bonds made through it stay.", "Delete link", back) {
		return
	}
	err := s.opts.Referral.DeleteLink(r.Context(), referral.LinkID(id))
	if err != nil {
		s.actionFailed(w, r, back, err, errors.Is(err, referral.ErrLinkNotFound))
		return
	}
	s.done(w, r, back, true, "Deleted "+what+".")
}

// linksModel is the page of every referral link, in windows.
type linksModel struct {
	Wired       bool
	Search      string
	ShowDeleted bool
	Links       []linkRow
	Pager       pager
	Bulk        bulkModel
	Self        string
}

// keep are the filters the links' search form keeps.
func (m linksModel) keep() []formField {
	if m.ShowDeleted {
		return []formField{{"deleted", "1"}}
	}
	return nil
}

// linkFilter is the links list's filter in q (a query string or a form).
func linkFilter(q url.Values) referral.LinkFilter {
	return referral.LinkFilter{Search: searchTerm(q), IncludeDeleted: q.Get("deleted") == "1"}
}

func (s *Server) referralLinks(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(w, r, "Referral links", "referral")
	f := linkFilter(r.URL.Query())
	m := linksModel{Wired: s.opts.Referral != nil, Search: f.Search, ShowDeleted: f.IncludeDeleted, Self: r.URL.RequestURI()}
	if !m.Wired {
		s.render(w, r, linksPage(p, m))
		return
	}
	ctx := r.Context()
	win := windowOf(r)
	lf := f
	lf.Before, lf.After, lf.Limit = win.Before, win.After, perPage+1
	links, err := s.opts.Referral.ListLinks(ctx, lf)
	if errors.Is(err, referral.ErrInvalidFilter) {
		s.problem(w, r, http.StatusBadRequest, "referral", "That is no place in the list of links.")
		return
	}
	if err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	links, newer, older := fitWindow(links, perPage, win)
	var first, last string
	if len(links) > 0 {
		first, last = links[0].Key(), links[len(links)-1].Key()
	}
	m.Pager = newPager(listBase(r), len(links), newer, older, first, last, "links")
	count := func(ctx context.Context, w window, upTo int64) (int64, error) {
		cf := f
		cf.Before, cf.After = w.Before, w.After
		return s.opts.Referral.CountLinks(ctx, cf, upTo)
	}
	if err := m.Pager.place(ctx, count, win, first, last, f.SearchReadsRows()); err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	for _, l := range links {
		m.Links = append(m.Links, toLinkRow(l))
	}
	m.Bulk = bulkModel{
		FormID: "bulk-links", Noun: "links", Total: m.Pager.Total,
		Fields:  append(m.keep(), formField{"back", m.Self}),
		Actions: []bulkAction{{Label: "Delete", Action: "/admin/referral/links/delete", Testid: "delete"}},
	}
	if m.Search != "" {
		m.Bulk.Fields = append(m.Bulk.Fields, formField{"q", m.Search})
	}
	if m.Pager.Capped || m.ShowDeleted {
		m.Bulk.Total = 0 // "all N matching" needs N, of live links
	}
	s.render(w, r, linksPage(p, m))
}

// referralDeleteLinks deletes links in bulk: the chosen ones, or every
// live one matching the list's search, after a confirmation that states
// how many.
func (s *Server) referralDeleteLinks(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r, "/admin/referral/links") {
		return
	}
	back := backTo(r, "/admin/referral/links")
	if s.opts.Referral == nil {
		s.done(w, r, back, false, "The referral context is not wired in this process.")
		return
	}
	chosen, all, ok := bulkScope(r)
	if !ok {
		s.done(w, r, back, false, "No link was chosen.")
		return
	}
	f := linkFilter(r.PostForm)
	f.IncludeDeleted = false
	var ids []referral.LinkID
	var question string
	if all {
		n, err := s.opts.Referral.CountLinks(r.Context(), f, 0)
		if err != nil {
			s.failed(w, r, "referral", err)
			return
		}
		if n == 0 {
			s.done(w, r, back, false, "No live link matches.")
			return
		}
		question = "Delete all " + count(n) + " live links matching the list's search? Their slugs stop resolving at once; bonds made through them stay."
	} else {
		for _, id := range chosen {
			ids = append(ids, referral.LinkID(id))
		}
		question = "Delete the " + countInt(len(ids)) + " chosen links? Their slugs stop resolving at once; bonds made through them stay."
		f = referral.LinkFilter{}
	}
	if !s.confirmed(w, r, "referral", question, "Delete links", back) {
		return
	}
	n, err := s.opts.Referral.DeleteLinks(r.Context(), f, ids)
	if err != nil {
		s.actionFailed(w, r, back, err, errors.Is(err, referral.ErrInvalidFilter))
		return
	}
	s.done(w, r, back, n > 0, count(n)+" links deleted.")
}

// replicasModel is the page of every replica, in windows.
type replicasModel struct {
	Wired    bool
	Search   string
	Replicas []replicaRow
	Pager    pager
}

func (s *Server) referralReplicas(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(w, r, "Replicas", "referral")
	m := replicasModel{Wired: s.opts.Referral != nil, Search: searchTerm(r.URL.Query())}
	if !m.Wired {
		s.render(w, r, replicasPage(p, m))
		return
	}
	ctx := r.Context()
	win := windowOf(r)
	f := referral.ReplicaFilter{Search: m.Search, Before: win.Before, After: win.After, Limit: perPage + 1}
	reps, err := s.opts.Referral.ListReplicas(ctx, f)
	if errors.Is(err, referral.ErrInvalidFilter) {
		s.problem(w, r, http.StatusBadRequest, "referral", "That is no place in the list of replicas.")
		return
	}
	if err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	reps, newer, older := fitWindow(reps, perPage, win)
	var first, last string
	if len(reps) > 0 {
		first, last = reps[0].Key(), reps[len(reps)-1].Key()
	}
	m.Pager = newPager(listBase(r), len(reps), newer, older, first, last, "replicas")
	count := func(ctx context.Context, w window, upTo int64) (int64, error) {
		return s.opts.Referral.CountReplicas(ctx, referral.ReplicaFilter{Search: m.Search, Before: w.Before, After: w.After}, upTo)
	}
	if err := m.Pager.place(ctx, count, win, first, last, f.SearchReadsRows()); err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	for _, rep := range reps {
		m.Replicas = append(m.Replicas, toReplicaRow(rep))
	}
	s.render(w, r, replicasPage(p, m))
}

func (s *Server) referralFindUser(w http.ResponseWriter, r *http.Request) {
	id := strings.ToLower(strings.TrimSpace(r.URL.Query().Get("id")))
	if id == "" {
		http.Redirect(w, r, "/admin/referral", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, referralUserHref(referral.UserID(id)), http.StatusSeeOther)
}

// bondRow is one bond.
type bondRow struct {
	ID, Referred, ReferredHref, Referrer, ReferrerHref, Link, Rule, Status, Bound string
}

func toBondRow(b referral.Bond) bondRow {
	return bondRow{
		ID: string(b.ID), Referred: string(b.ReferredUserID), ReferredHref: referralUserHref(b.ReferredUserID),
		Referrer: string(b.ReferrerUserID), ReferrerHref: referralUserHref(b.ReferrerUserID),
		Link: string(b.ReferralLinkID), Rule: string(b.AppliedRule), Status: string(b.Status), Bound: when(b.BoundAt),
	}
}

// journalRow is one registrations journal entry.
type journalRow struct {
	ID, Type, Rule, Link, Referrer, ReferrerHref, Registered, Bond string
	Lead                                                           bool
}

// referralUserModel is one identity user's page.
type referralUserModel struct {
	ID           string
	Wired        bool
	Replica      *replicaRow
	Referrer     string
	ReferrerHref string
	ReferrerName string
	AsReferred   []bondRow
	AsReferrer   []bondRow
	Journal      []journalRow
	Links        []linkRow
}

func (s *Server) referralUser(w http.ResponseWriter, r *http.Request) {
	id := referral.UserID(mux.Vars(r)["id"])
	m := referralUserModel{ID: string(id), Wired: s.opts.Referral != nil}
	p := s.newPage(w, r, "Identity user "+string(id), "referral")
	if !m.Wired {
		s.render(w, r, referralUserPage(p, m))
		return
	}
	ctx := r.Context()
	rep, err := s.opts.Referral.Replica(ctx, id)
	switch {
	case errors.Is(err, referral.ErrReplicaNotFound):
	case err != nil:
		s.failed(w, r, "referral", err)
		return
	default:
		row := toReplicaRow(rep)
		m.Replica = &row
	}
	ref, err := s.opts.Referral.MyReferrer(ctx, id)
	if err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	if ref.HasReferrer {
		m.Referrer, m.ReferrerHref, m.ReferrerName = string(ref.UserID), referralUserHref(ref.UserID), ref.Name
	}
	referred, err := s.opts.Referral.ListBonds(ctx, referral.BondFilter{ReferredUserID: id})
	if err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	for _, b := range referred {
		m.AsReferred = append(m.AsReferred, toBondRow(b))
	}
	referrer, err := s.opts.Referral.ListBonds(ctx, referral.BondFilter{ReferrerUserID: id, Limit: 200})
	if err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	for _, b := range referrer {
		m.AsReferrer = append(m.AsReferrer, toBondRow(b))
	}
	regs, err := s.opts.Referral.ListRegistrations(ctx, referral.RegistrationFilter{ReferredUserID: id})
	if err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	for _, g := range regs {
		m.Journal = append(m.Journal, journalRow{
			ID: string(g.ID), Type: string(g.RegistrationType), Rule: string(g.AppliedRule), Link: g.LinkURL,
			Referrer: string(g.ReferrerUserID), ReferrerHref: referralUserHref(g.ReferrerUserID),
			Registered: when(g.RegisteredAt), Bond: string(g.BondID), Lead: g.LeadRequested,
		})
	}
	links, err := s.opts.Referral.ListLinks(ctx, referral.LinkFilter{OwnerUserID: id, IncludeDeleted: true})
	if err != nil {
		s.failed(w, r, "referral", err)
		return
	}
	for _, l := range links {
		m.Links = append(m.Links, toLinkRow(l))
	}
	s.render(w, r, referralUserPage(p, m))
}

func boolText(b bool) string { return strconv.FormatBool(b) }
