package referral

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"switchyard/store"
)

// This file holds the operator-facing reads and the link writes, each with
// its SQL. Reads use the read pool; writes are one transaction each.

// NewLink is what an operator gives to create a referral link.
type NewLink struct {
	URL         string
	OwnerUserID UserID
	TenantID    string
	Channel     string
}

// CreateLink stores a live link whose URL is the normalised slug. It fails
// with ErrInvalidLink on a bad slug or id, and ErrSlugTaken when a live link
// already has the slug.
func (s *Service) CreateLink(ctx context.Context, nl NewLink) (Link, error) {
	slug, ok := NormalizeSlug(nl.URL)
	if !ok {
		return Link{}, fmt.Errorf("%w: url %q is not a slug (^[a-z0-9][a-z0-9-]{2,63}$)", ErrInvalidLink, nl.URL)
	}
	owner, err := uuid.Parse(string(nl.OwnerUserID))
	if err != nil || owner == uuid.Nil {
		return Link{}, fmt.Errorf("%w: ownerUserId %q is not a GUID", ErrInvalidLink, nl.OwnerUserID)
	}
	tenant, err := uuid.Parse(nl.TenantID)
	if err != nil {
		return Link{}, fmt.Errorf("%w: tenantId %q is not a GUID", ErrInvalidLink, nl.TenantID)
	}
	channel := strings.TrimSpace(nl.Channel)
	if channel == "" || len(channel) > 64 {
		return Link{}, fmt.Errorf("%w: channel must have 1 to 64 characters", ErrInvalidLink)
	}
	l := Link{
		ID:          LinkID(newID()),
		URL:         slug,
		OwnerUserID: UserID(owner.String()),
		TenantID:    tenant.String(),
		Channel:     channel,
		CreatedAt:   s.db.Now(),
	}
	err = s.db.Tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx,
			`insert into referral_links (`+linkColumns+`) values (?, ?, ?, ?, ?, ?, null)`,
			string(l.ID), l.URL, string(l.OwnerUserID), l.TenantID, l.Channel, store.TS(l.CreatedAt))
		return err
	})
	if store.IsUniqueViolation(err) {
		return Link{}, fmt.Errorf("%w: %q", ErrSlugTaken, slug)
	}
	return l, err
}

// DeleteLink soft-deletes a link: its slug resolves no more (guard G1) and can
// be given to a new link; bonds made through it stay. Deleting a deleted link
// is a no-op; an unknown id is ErrLinkNotFound.
func (s *Service) DeleteLink(ctx context.Context, id LinkID) error {
	var found bool
	err := s.db.Tx(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `select 1 from referral_links where id = ?`, string(id)).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		_, err = tx.ExecContext(ctx, `update referral_links set deleted_at = ? where id = ? and deleted_at is null`,
			store.TS(s.db.Now()), string(id))
		return err
	})
	if err == nil && !found {
		return ErrLinkNotFound
	}
	return err
}

// LinkFilter selects links; zero fields do not filter.
type LinkFilter struct {
	OwnerUserID    UserID
	IncludeDeleted bool
	// Search keeps the links whose slug holds the term, or whose owner's
	// user id it is (lists.go).
	Search string
	// Before keeps the links after this key (Link.Key) in the list's order,
	// newest first: an older window. After keeps those before it, nearest
	// the key first: a newer window.
	Before, After string
	Limit         int // default 100, at most 1000
}

// ListLinks returns a window of links, newest first (lists.go).
func (s *Service) ListLinks(ctx context.Context, f LinkFilter) ([]Link, error) {
	q, args, err := f.listSQL()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	links := []Link{}
	for rows.Next() {
		l, err := scanLink(rows)
		if err != nil {
			return nil, err
		}
		links = append(links, *l)
	}
	return links, rows.Err()
}

// Replica returns the user's replica, or ErrReplicaNotFound.
func (s *Service) Replica(ctx context.Context, id UserID) (Replica, error) {
	r, err := getReplica(ctx, s.db.Read, id)
	if err != nil {
		return Replica{}, err
	}
	if r == nil {
		return Replica{}, ErrReplicaNotFound
	}
	return *r, nil
}

// ReplicaFilter selects replicas.
type ReplicaFilter struct {
	// Search keeps the replicas it finds: a user id, a name, or the last
	// digits of a phone number (lists.go).
	Search string
	// Before and After are window keys (Replica.Key), as in LinkFilter.
	Before, After string
	Limit         int // default 100, at most 1000
}

// ListReplicas returns a window of replicas, changed last first.
func (s *Service) ListReplicas(ctx context.Context, f ReplicaFilter) ([]Replica, error) {
	q, args, err := f.listSQL()
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	defer rows.Close()
	replicas := []Replica{}
	for rows.Next() {
		r, err := scanReplica(rows)
		if err != nil {
			return nil, fmt.Errorf("list replicas: %w", err)
		}
		replicas = append(replicas, *r)
	}
	return replicas, rows.Err()
}

// CountBonds counts every bond made.
func (s *Service) CountBonds(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.Read.QueryRowContext(ctx, `select count(*) from referral_bonds`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count bonds: %w", err)
	}
	return n, nil
}

// The identity events consumed per minute, by their marks: one
// referral_processed_messages row per message consumed, whose id grows with
// processed_at (SQLite's one writer stamps each mark with the store's clock
// as it inserts it), so a count searches the ids instead of scanning. On
// PostgreSQL, partitions handled at once may take their ids in another order
// than their stamps, a few milliseconds apart: a minute's count may then be
// off by the marks written in those milliseconds around its bounds. A bond
// commits with its message's mark, whose outcome is R1.
var (
	consumedMarks = store.Stamped{Table: "referral_processed_messages", Column: "processed_at", ByID: true}
	bondMarks     = store.Stamped{Table: "referral_processed_messages", Column: "processed_at",
		Where: "outcome = ?", Args: []any{string(OutcomeR1)}, ByID: true}
)

// ConsumedBetween counts the identity events consumed in [from, to); a zero
// to has no end.
func (s *Service) ConsumedBetween(ctx context.Context, from, to time.Time) (int64, error) {
	return consumedMarks.CountBetween(ctx, s.db, from, to)
}

// BondsBetween counts the bonds created in [from, to); a zero to has no end.
func (s *Service) BondsBetween(ctx context.Context, from, to time.Time) (int64, error) {
	return bondMarks.CountBetween(ctx, s.db, from, to)
}

// LinkLookupOutcomes are the outcomes of the user-upserted events whose
// ReferrerUrl is a well-formed slug and whose user has no Initial entry yet:
// the ones that looked the link up (G1 when none is live). The G1 alert
// watches G1's share of them: a rising share means broken referral cookies or
// links deleted while still handed out. The outcomes before the lookup
// (replica-only, invalid-slug, first-seen-skip) are not counted, so the share
// does not sink when many users update their profiles.
var LinkLookupOutcomes = []Outcome{OutcomeR1, OutcomeG1, OutcomeG2, OutcomeG3, OutcomeG4, OutcomeG5, OutcomeRaceLost}

// LinkLookups counts, over a span of time, the events that looked a link up
// (LinkLookupOutcomes) and those of them that found none (G1).
type LinkLookups struct {
	Looked, Missing int64
}

var (
	lookupMarks = store.Stamped{Table: "referral_processed_messages", Column: "processed_at",
		Where: "outcome in (?" + strings.Repeat(", ?", len(LinkLookupOutcomes)-1) + ")", Args: outcomeArgs(LinkLookupOutcomes), ByID: true}
	missingLinkMarks = store.Stamped{Table: "referral_processed_messages", Column: "processed_at",
		Where: "outcome = ?", Args: []any{string(OutcomeG1)}, ByID: true}
)

func outcomeArgs(os []Outcome) []any {
	out := make([]any, len(os))
	for i, o := range os {
		out[i] = string(o)
	}
	return out
}

// LinkLookupsBetween counts the link lookups of [from, to), by their marks;
// a zero to has no end.
func (s *Service) LinkLookupsBetween(ctx context.Context, from, to time.Time) (LinkLookups, error) {
	var (
		l   LinkLookups
		err error
	)
	if l.Looked, err = lookupMarks.CountBetween(ctx, s.db, from, to); err != nil {
		return LinkLookups{}, fmt.Errorf("count link lookups: %w", err)
	}
	if l.Missing, err = missingLinkMarks.CountBetween(ctx, s.db, from, to); err != nil {
		return LinkLookups{}, fmt.Errorf("count link lookups: %w", err)
	}
	return l, nil
}

// BondFilter selects bonds; zero fields do not filter.
type BondFilter struct {
	ReferredUserID UserID
	ReferrerUserID UserID
	Limit          int // default 100, at most 1000
}

const bondColumns = `id, referred_user_id, referrer_user_id, referral_link_id, tenant_id, bound_at,
	applied_rule, status, registration_id, created_at`

// ListBonds returns bonds, oldest first.
func (s *Service) ListBonds(ctx context.Context, f BondFilter) ([]Bond, error) {
	rows, err := s.db.Read.QueryContext(ctx, `select `+bondColumns+` from referral_bonds
		where (? = '' or referred_user_id = ?) and (? = '' or referrer_user_id = ?)
		order by created_at, id limit ?`,
		string(f.ReferredUserID), string(f.ReferredUserID), string(f.ReferrerUserID), string(f.ReferrerUserID), limit(f.Limit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	bonds := []Bond{}
	for rows.Next() {
		var (
			b                                      Bond
			id, referred, referrer, link, rule, st string
			reg                                    string
			bound, created                         store.Timestamp
		)
		if err := rows.Scan(&id, &referred, &referrer, &link, &b.TenantID, &bound, &rule, &st, &reg, &created); err != nil {
			return nil, err
		}
		b.ID, b.ReferredUserID, b.ReferrerUserID, b.ReferralLinkID = BondID(id), UserID(referred), UserID(referrer), LinkID(link)
		b.BoundAt, b.AppliedRule, b.Status, b.RegistrationID, b.CreatedAt = bound.Time, Rule(rule), BondStatus(st), RegistrationID(reg), created.Time
		bonds = append(bonds, b)
	}
	return bonds, rows.Err()
}

// RegistrationFilter selects journal entries; zero fields do not filter.
type RegistrationFilter struct {
	ReferredUserID UserID
	Limit          int // default 100, at most 1000
}

// ListRegistrations returns journal entries, oldest first.
func (s *Service) ListRegistrations(ctx context.Context, f RegistrationFilter) ([]Registration, error) {
	rows, err := s.db.Read.QueryContext(ctx, `select id, referred_user_id, registration_type, applied_rule, lead_requested,
			link_url, referrer_user_id, tenant_id, registered_at, bond_id, created_at
		from referral_registrations where (? = '' or referred_user_id = ?)
		order by created_at, id limit ?`,
		string(f.ReferredUserID), string(f.ReferredUserID), limit(f.Limit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	regs := []Registration{}
	for rows.Next() {
		var (
			r                                 Registration
			id, referred, typ, rule, referrer string
			bond                              sql.NullString
			registered, created               store.Timestamp
		)
		if err := rows.Scan(&id, &referred, &typ, &rule, &r.LeadRequested, &r.LinkURL, &referrer, &r.TenantID,
			&registered, &bond, &created); err != nil {
			return nil, err
		}
		r.ID, r.ReferredUserID, r.RegistrationType, r.AppliedRule = RegistrationID(id), UserID(referred), RegistrationType(typ), Rule(rule)
		r.ReferrerUserID, r.BondID, r.RegisteredAt, r.CreatedAt = UserID(referrer), BondID(bond.String), registered.Time, created.Time
		regs = append(regs, r)
	}
	return regs, rows.Err()
}

// Referrer is the answer of get-my-referrer.
type Referrer struct {
	HasReferrer bool
	UserID      UserID
	// Name is the referrer's display name; empty while the referrer's replica
	// is missing or its first name is empty.
	Name string
}

// MyReferrer is get-my-referrer: the referrer of the user's active bond.
// Between registration and the bond's commit it says HasReferrer = false.
func (s *Service) MyReferrer(ctx context.Context, user UserID) (Referrer, error) {
	var referrer string
	err := s.db.Read.QueryRowContext(ctx,
		`select referrer_user_id from referral_bonds where referred_user_id = ? and status = ?`,
		string(user), string(BondActive)).Scan(&referrer)
	if errors.Is(err, sql.ErrNoRows) {
		return Referrer{}, nil
	}
	if err != nil {
		return Referrer{}, err
	}
	ref := Referrer{HasReferrer: true, UserID: UserID(referrer)}
	r, err := getReplica(ctx, s.db.Read, ref.UserID)
	if err != nil {
		return Referrer{}, err
	}
	if r != nil {
		ref.Name = r.Name.Display()
	}
	return ref, nil
}

func limit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	default:
		return n
	}
}
