package referral

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"switchyard/httpjson"
)

// AdminRoutes mounts the referral operator API on r, the /admin/api
// subrouter (JSON in camelCase):
//
//	POST   /referral/links                      {"url","ownerUserId","tenantId","channel"} → 201 {"id"}
//	GET    /referral/links?ownerUserId=&includeDeleted=&limit=
//	DELETE /referral/links/{id}                 soft delete → 204
//	GET    /referral/replicas/{userId}
//	GET    /referral/bonds?referredUserId=&referrerUserId=&limit=
//	GET    /referral/registrations?referredUserId=&limit=
//	GET    /referral/users/{userId}/referrer    get-my-referrer {"hasReferrer","referrer":{"userId","name"}}
//
// Publishing identity events and reading topics are queue/'s generic topic
// endpoints (POST/GET /admin/api/topics/{topic}/messages).
func (s *Service) AdminRoutes(r *mux.Router) {
	r.Handle("/referral/links", httpjson.HandlerFunc(s.handleCreateLink)).Methods(http.MethodPost)
	r.Handle("/referral/links", httpjson.HandlerFunc(s.handleListLinks)).Methods(http.MethodGet)
	r.Handle("/referral/links/{id}", httpjson.HandlerFunc(s.handleDeleteLink)).Methods(http.MethodDelete)
	r.Handle("/referral/replicas/{userId}", httpjson.HandlerFunc(s.handleReplica)).Methods(http.MethodGet)
	r.Handle("/referral/bonds", httpjson.HandlerFunc(s.handleBonds)).Methods(http.MethodGet)
	r.Handle("/referral/registrations", httpjson.HandlerFunc(s.handleRegistrations)).Methods(http.MethodGet)
	r.Handle("/referral/users/{userId}/referrer", httpjson.HandlerFunc(s.handleReferrer)).Methods(http.MethodGet)
}

// httpError maps the package's errors to HTTP errors; anything else is a 500.
func httpError(err error) error {
	switch {
	case errors.Is(err, ErrInvalidLink):
		return httpjson.Errorf(http.StatusBadRequest, "invalid_link", "%s", err.Error())
	case errors.Is(err, ErrSlugTaken):
		return httpjson.Errorf(http.StatusConflict, "slug_taken", "%s", err.Error())
	case errors.Is(err, ErrLinkNotFound):
		return httpjson.NotFound("%s", err.Error())
	case errors.Is(err, ErrReplicaNotFound):
		return httpjson.NotFound("%s", err.Error())
	case errors.Is(err, ErrInvalidFilter):
		return httpjson.BadRequest("%s", strings.TrimPrefix(err.Error(), ErrInvalidFilter.Error()+": "))
	}
	return err
}

// userParam reads a user id from the path or query; "" is allowed when optional.
func userParam(value, name string, optional bool) (UserID, error) {
	if value == "" && optional {
		return "", nil
	}
	id, err := uuid.Parse(value)
	if err != nil {
		return "", httpjson.BadRequest("%s %q is not a GUID", name, value)
	}
	return UserID(id.String()), nil
}

func limitParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, httpjson.BadRequest("limit must be an integer from 1 to 1000")
	}
	return n, nil
}

type linkJSON struct {
	ID          LinkID     `json:"id"`
	URL         string     `json:"url"`
	OwnerUserID UserID     `json:"ownerUserId"`
	TenantID    string     `json:"tenantId"`
	Channel     string     `json:"channel"`
	CreatedAt   time.Time  `json:"createdAt"`
	DeletedAt   *time.Time `json:"deletedAt"`
}

func (s *Service) handleCreateLink(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		URL         string `json:"url"`
		OwnerUserID string `json:"ownerUserId"`
		TenantID    string `json:"tenantId"`
		Channel     string `json:"channel"`
	}
	if err := httpjson.Decode(r, &body); err != nil {
		return err
	}
	l, err := s.CreateLink(r.Context(), NewLink{URL: body.URL, OwnerUserID: UserID(body.OwnerUserID), TenantID: body.TenantID, Channel: body.Channel})
	if err != nil {
		return httpError(err)
	}
	httpjson.Write(w, http.StatusCreated, map[string]LinkID{"id": l.ID})
	return nil
}

func (s *Service) handleListLinks(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	owner, err := userParam(q.Get("ownerUserId"), "ownerUserId", true)
	if err != nil {
		return err
	}
	n, err := limitParam(r)
	if err != nil {
		return err
	}
	f := LinkFilter{OwnerUserID: owner, IncludeDeleted: q.Get("includeDeleted") == "true", Limit: n,
		Search: q.Get("q"), Before: q.Get("before"), After: q.Get("after")}
	links, err := s.ListLinks(r.Context(), f)
	if err != nil {
		return httpError(err)
	}
	out := make([]linkJSON, 0, len(links))
	for _, l := range links {
		out = append(out, linkJSON{ID: l.ID, URL: l.URL, OwnerUserID: l.OwnerUserID, TenantID: l.TenantID,
			Channel: l.Channel, CreatedAt: l.CreatedAt, DeletedAt: timePtr(l.DeletedAt)})
	}
	body := map[string]any{"links": out}
	if f.After == "" && len(links) > 0 && len(links) == limit(n) {
		// A full window: the next one starts past its last link.
		body["nextBefore"] = links[len(links)-1].Key()
	}
	httpjson.Write(w, http.StatusOK, body)
	return nil
}

func (s *Service) handleDeleteLink(w http.ResponseWriter, r *http.Request) error {
	if err := s.DeleteLink(r.Context(), LinkID(mux.Vars(r)["id"])); err != nil {
		return httpError(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type nameJSON struct {
	FirstName  string  `json:"firstName"`
	LastName   string  `json:"lastName"`
	MiddleName *string `json:"middleName"`
}

type replicaJSON struct {
	ID             UserID     `json:"id"`
	Type           UserType   `json:"type"`
	CompanyID      *string    `json:"companyId"`
	Status         UserStatus `json:"status"`
	Name           nameJSON   `json:"name"`
	PhoneNumber    string     `json:"phoneNumber"`
	IsNameFilled   bool       `json:"isNameFilled"`
	RegisteredAt   *time.Time `json:"registeredAt"`
	ReplicaVersion int64      `json:"replicaVersion"`
	UpdatedAt      time.Time  `json:"updatedAt"`
}

func (s *Service) handleReplica(w http.ResponseWriter, r *http.Request) error {
	id, err := userParam(mux.Vars(r)["userId"], "userId", false)
	if err != nil {
		return err
	}
	rep, err := s.Replica(r.Context(), id)
	if err != nil {
		return httpError(err)
	}
	httpjson.Write(w, http.StatusOK, replicaJSON{
		ID: rep.ID, Type: rep.Type, CompanyID: rep.CompanyID, Status: rep.Status,
		Name:        nameJSON{FirstName: rep.Name.FirstName, LastName: rep.Name.LastName, MiddleName: rep.Name.MiddleName},
		PhoneNumber: rep.PhoneNumber, IsNameFilled: rep.IsNameFilled, RegisteredAt: timePtr(rep.RegisteredAt),
		ReplicaVersion: rep.ReplicaVersion, UpdatedAt: rep.UpdatedAt,
	})
	return nil
}

type bondJSON struct {
	ID             BondID         `json:"id"`
	ReferredUserID UserID         `json:"referredUserId"`
	ReferrerUserID UserID         `json:"referrerUserId"`
	ReferralLinkID LinkID         `json:"referralLinkId"`
	TenantID       string         `json:"tenantId"`
	BoundAt        time.Time      `json:"boundAt"`
	AppliedRule    Rule           `json:"appliedRule"`
	Status         BondStatus     `json:"status"`
	RegistrationID RegistrationID `json:"registrationId"`
	CreatedAt      time.Time      `json:"createdAt"`
}

func (s *Service) handleBonds(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	referred, err := userParam(q.Get("referredUserId"), "referredUserId", true)
	if err != nil {
		return err
	}
	referrer, err := userParam(q.Get("referrerUserId"), "referrerUserId", true)
	if err != nil {
		return err
	}
	n, err := limitParam(r)
	if err != nil {
		return err
	}
	bonds, err := s.ListBonds(r.Context(), BondFilter{ReferredUserID: referred, ReferrerUserID: referrer, Limit: n})
	if err != nil {
		return err
	}
	out := make([]bondJSON, 0, len(bonds))
	for _, b := range bonds {
		out = append(out, bondJSON(b))
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"bonds": out})
	return nil
}

type registrationJSON struct {
	ID               RegistrationID   `json:"id"`
	ReferredUserID   UserID           `json:"referredUserId"`
	RegistrationType RegistrationType `json:"registrationType"`
	AppliedRule      Rule             `json:"appliedRule"`
	LeadRequested    bool             `json:"leadRequested"`
	LinkURL          string           `json:"linkUrl"`
	ReferrerUserID   UserID           `json:"referrerUserId"`
	TenantID         string           `json:"tenantId"`
	RegisteredAt     time.Time        `json:"registeredAt"`
	BondID           BondID           `json:"bondId"`
	CreatedAt        time.Time        `json:"createdAt"`
}

func (s *Service) handleRegistrations(w http.ResponseWriter, r *http.Request) error {
	referred, err := userParam(r.URL.Query().Get("referredUserId"), "referredUserId", true)
	if err != nil {
		return err
	}
	n, err := limitParam(r)
	if err != nil {
		return err
	}
	regs, err := s.ListRegistrations(r.Context(), RegistrationFilter{ReferredUserID: referred, Limit: n})
	if err != nil {
		return err
	}
	out := make([]registrationJSON, 0, len(regs))
	for _, g := range regs {
		out = append(out, registrationJSON(g))
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"registrations": out})
	return nil
}

type referrerJSON struct {
	HasReferrer bool `json:"hasReferrer"`
	Referrer    *struct {
		UserID UserID  `json:"userId"`
		Name   *string `json:"name"`
	} `json:"referrer"`
}

func (s *Service) handleReferrer(w http.ResponseWriter, r *http.Request) error {
	id, err := userParam(mux.Vars(r)["userId"], "userId", false)
	if err != nil {
		return err
	}
	ref, err := s.MyReferrer(r.Context(), id)
	if err != nil {
		return err
	}
	out := referrerJSON{HasReferrer: ref.HasReferrer}
	if ref.HasReferrer {
		out.Referrer = &struct {
			UserID UserID  `json:"userId"`
			Name   *string `json:"name"`
		}{UserID: ref.UserID}
		if ref.Name != "" {
			out.Referrer.Name = &ref.Name
		}
	}
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
