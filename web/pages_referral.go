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
	links, err := s.opts.Referral.ListLinks(ctx, referral.LinkFilter{IncludeDeleted: m.ShowDeleted, Limit: 100})
	if err != nil {
		return m, err
	}
	for _, l := range links {
		m.Links = append(m.Links, toLinkRow(l))
	}
	replicas, err := s.opts.Referral.ListReplicas(ctx, referral.ReplicaFilter{Limit: 20})
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
