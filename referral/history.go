package referral

import (
	"context"
	"fmt"
	"strings"

	"switchyard/history"
	"switchyard/mask"
	"switchyard/store"
)

// The console's search ("what happened to X") asks the referral context
// what its tables know about a term: for an identity user id, the identity
// events consumed for the user, the replica's version, the journal, the
// bonds as referred or referrer (with the outgoing events their commit
// published) and the links the user owns; for a message id, its consumption;
// for a bond, link or journal entry id, that row. Names stay out; a phone
// number is masked.

const (
	historyMarksSQL = `select mark, user_id, outcome, processed_at, traceparent from referral_processed_messages
		where user_id = ? or mark in (?, ?) order by id desc limit ?`
	historyBondsSQL = `select ` + bondColumns + `, traceparent from referral_bonds
		where referred_user_id = ? or referrer_user_id = ? or id = ? order by created_at desc limit ?`
	historyRegistrationsSQL = `select id, referred_user_id, registration_type, applied_rule, lead_requested,
		link_url, referrer_user_id, registered_at, coalesce(bond_id, ''), created_at
		from referral_registrations where referred_user_id = ? or id = ? order by created_at desc limit ?`
	historyLinksSQL = `select id, url, owner_user_id, created_at, deleted_at from referral_links
		where owner_user_id = ? or id = ? order by created_at desc limit ?`
)

// History returns what the referral context knows about term, at most
// limit rows per query.
func (s *Service) History(ctx context.Context, term string, limit int) (history.Found, error) {
	var found history.Found
	if term == "" {
		return found, nil
	}
	steps := []func(context.Context, *history.Found, string, int) error{
		s.replicaHistory, s.marksHistory, s.bondsHistory, s.registrationsHistory, s.linksHistory,
	}
	for _, step := range steps {
		if err := step(ctx, &found, term, limit); err != nil {
			return found, fmt.Errorf("referral history of %s: %w", term, err)
		}
	}
	return found, nil
}

func userLink(id string) string { return "/admin/referral/users/" + id }

func (s *Service) replicaHistory(ctx context.Context, found *history.Found, id string, limit int) error {
	r, err := getReplica(ctx, s.db.Read, UserID(id))
	if err != nil || r == nil {
		return err
	}
	found.Add(limit, 1, history.Item{At: r.UpdatedAt, Flow: history.FlowReferral, Kind: "replica version",
		Summary: fmt.Sprintf("version %d: %s, %s, phone %s", r.ReplicaVersion, r.Type, r.Status, mask.Phone(r.PhoneNumber)),
		IDs:     []history.ID{{Name: "user", Value: id}}, Link: userLink(id)})
	return nil
}

func (s *Service) marksHistory(ctx context.Context, found *history.Found, id string, limit int) error {
	rows, err := s.db.Read.QueryContext(ctx, historyMarksSQL, id,
		string(TypeUserUpserted)+":"+id, string(TypeUserBlocked)+":"+id, limit)
	if err != nil {
		return fmt.Errorf("marks: %w", err)
	}
	defer rows.Close()
	var items []history.Item
	for rows.Next() {
		var (
			mark, user, outcome, traceparent string
			at                               store.Timestamp
		)
		if err := rows.Scan(&mark, &user, &outcome, &at, &traceparent); err != nil {
			return fmt.Errorf("marks: %w", err)
		}
		typ, msg, _ := strings.Cut(mark, ":")
		items = append(items, history.Item{At: at.Time, Flow: history.FlowReferral, Kind: "identity event consumed",
			Summary: fmt.Sprintf("%s: %s", typ, outcome),
			IDs:     []history.ID{{Name: "message", Value: msg}, {Name: "user", Value: user}}, Link: userLink(user),
			TraceID: history.TraceID(traceparent)})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("marks: %w", err)
	}
	found.Add(limit, len(items), items...)
	return nil
}

func (s *Service) bondsHistory(ctx context.Context, found *history.Found, id string, limit int) error {
	rows, err := s.db.Read.QueryContext(ctx, historyBondsSQL, id, id, id, limit)
	if err != nil {
		return fmt.Errorf("bonds: %w", err)
	}
	defer rows.Close()
	var items []history.Item
	n := 0
	for rows.Next() {
		var (
			bond, referred, referrer, link, tenant, rule, st, reg, traceparent string
			bound, created                                                     store.Timestamp
		)
		if err := rows.Scan(&bond, &referred, &referrer, &link, &tenant, &bound, &rule, &st, &reg, &created, &traceparent); err != nil {
			return fmt.Errorf("bonds: %w", err)
		}
		n++
		ids := []history.ID{{Name: "bond", Value: bond}, {Name: "referred", Value: referred}, {Name: "referrer", Value: referrer}}
		// The outgoing event's own trace links to the processing's, whose
		// trace the bond keeps.
		trace := history.TraceID(traceparent)
		items = append(items,
			history.Item{At: created.Time, Flow: history.FlowReferral, Kind: "bond created",
				Summary: fmt.Sprintf("%s bound to %s by rule %s (%s)", referred, referrer, rule, st), IDs: ids, Link: userLink(referred),
				TraceID: trace},
			history.Item{At: created.Time, Flow: history.FlowReferral, Kind: "outgoing event",
				Summary: fmt.Sprintf("%s on %s, in the bond's transaction", TypeBondCreated, TopicBonds), IDs: ids, Link: userLink(referred),
				TraceID: trace})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("bonds: %w", err)
	}
	found.Add(limit, n, items...)
	return nil
}

func (s *Service) registrationsHistory(ctx context.Context, found *history.Found, id string, limit int) error {
	rows, err := s.db.Read.QueryContext(ctx, historyRegistrationsSQL, id, id, limit)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer rows.Close()
	var items []history.Item
	n := 0
	for rows.Next() {
		var (
			reg, referred, typ, rule, url, referrer, bond string
			lead                                          bool
			registered, created                           store.Timestamp
		)
		if err := rows.Scan(&reg, &referred, &typ, &rule, &lead, &url, &referrer, &registered, &bond, &created); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		n++
		ids := []history.ID{{Name: "registration", Value: reg}, {Name: "referred", Value: referred}}
		if bond != "" {
			ids = append(ids, history.ID{Name: "bond", Value: bond})
		}
		items = append(items, history.Item{At: created.Time, Flow: history.FlowReferral, Kind: "registration journaled",
			Summary: fmt.Sprintf("%s registration through link %s of %s, rule %s", typ, url, referrer, rule), IDs: ids, Link: userLink(referred)})
		if lead {
			items = append(items, history.Item{At: created.Time, Flow: history.FlowReferral, Kind: "outgoing event",
				Summary: fmt.Sprintf("%s on %s, in the registration's transaction", TypeLeadAttachRequested, TopicLeadAttachments), IDs: ids, Link: userLink(referred)})
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	found.Add(limit, n, items...)
	return nil
}

func (s *Service) linksHistory(ctx context.Context, found *history.Found, id string, limit int) error {
	rows, err := s.db.Read.QueryContext(ctx, historyLinksSQL, id, id, limit)
	if err != nil {
		return fmt.Errorf("links: %w", err)
	}
	defer rows.Close()
	var items []history.Item
	n := 0
	for rows.Next() {
		var (
			link, url, owner string
			created, deleted store.Timestamp
		)
		if err := rows.Scan(&link, &url, &owner, &created, &deleted); err != nil {
			return fmt.Errorf("links: %w", err)
		}
		n++
		ids := []history.ID{{Name: "link", Value: link}, {Name: "owner", Value: owner}}
		items = append(items, history.Item{At: created.Time, Flow: history.FlowReferral, Kind: "link created",
			Summary: "link " + url + " of " + owner, IDs: ids, Link: userLink(owner)})
		if !deleted.Time.IsZero() {
			items = append(items, history.Item{At: deleted.Time, Flow: history.FlowReferral, Kind: "link deleted",
				Summary: "link " + url + " of " + owner, IDs: ids, Link: userLink(owner)})
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("links: %w", err)
	}
	found.Add(limit, n, items...)
	return nil
}
