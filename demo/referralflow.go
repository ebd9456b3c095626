package demo

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// lateOwnerDelay is how long a late link owner's own identity event follows
// their referrals' events.
const lateOwnerDelay = 1500 * time.Millisecond

// referralJourney is one identity scenario on the topic: a referral through
// a live link (sometimes delivered twice, sometimes followed by a profile
// update), two versions out of order, a link owner whose own event arrives
// after their referrals', or a referral the rules must refuse.
func (s *sim) referralJourney(ctx context.Context) error {
	switch r := s.float(); {
	case r < 0.45:
		return s.validReferral(ctx)
	case r < 0.60:
		return s.outOfOrder(ctx)
	case r < 0.70:
		return s.lateOwner(ctx)
	default:
		return s.refusedReferral(ctx)
	}
}

// newIdentity is a fresh identity user's first version.
func (s *sim) newIdentity(typ, status, referrer string) identity {
	first, last := s.person()
	return identity{
		MessageID: uuid.NewString(), UserID: uuid.NewString(), Type: typ, Status: status,
		First: first, Last: last, Phone: s.phone(), Referrer: referrer, Version: 1, At: time.Now().UTC(),
	}
}

// publishAs publishes ev and records what must become of its user.
func (s *sim) publishAs(ctx context.Context, ev identity, wantReferrer string) error {
	if err := s.c.publish(ctx, ev); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.led.idUser(ev.UserID)
	u.wantReferrer = wantReferrer
	u.maxVersion = max(u.maxVersion, ev.Version)
	s.led.published++
	return nil
}

func (s *sim) validReferral(ctx context.Context) error {
	link := s.cast.Links[s.intn(len(s.cast.Links))]
	ev := s.newIdentity("Investor", "Active", link.Slug)
	if err := s.publishAs(ctx, ev, link.OwnerUserID); err != nil {
		return failed("publish a referral", err)
	}
	if s.chance(0.25) {
		if err := s.pause(ctx); err != nil {
			return err
		}
		// The producer retries: the same message again.
		if err := s.publishAs(ctx, ev, link.OwnerUserID); err != nil {
			return failed("publish a duplicate", err)
		}
		s.mu.Lock()
		s.led.duplicates++
		s.mu.Unlock()
	}
	if s.chance(0.3) {
		if err := s.pause(ctx); err != nil {
			return err
		}
		// A profile update: a new phone number in version 2.
		ev.MessageID, ev.Version, ev.Phone, ev.At = uuid.NewString(), 2, s.phone(), ev.At.Add(time.Minute)
		if err := s.publishAs(ctx, ev, link.OwnerUserID); err != nil {
			return failed("publish a profile update", err)
		}
	}
	return nil
}

// outOfOrder publishes version 2 of a new user before version 1: the
// referral binds once, the replica stays at version 2.
func (s *sim) outOfOrder(ctx context.Context) error {
	link := s.cast.Links[s.intn(len(s.cast.Links))]
	v1 := s.newIdentity("Investor", "Active", link.Slug)
	v2 := v1
	v2.MessageID, v2.Version, v2.Phone, v2.At = uuid.NewString(), 2, s.phone(), v1.At.Add(time.Minute)
	if err := s.publishAs(ctx, v2, link.OwnerUserID); err != nil {
		return failed("publish version 2", err)
	}
	if err := s.publishAs(ctx, v1, link.OwnerUserID); err != nil {
		return failed("publish version 1 late", err)
	}
	s.mu.Lock()
	s.led.outOfOrder++
	s.mu.Unlock()
	return nil
}

// lateOwner gives a new agent a link, publishes one or two investors
// arriving through it, and only then the agent's own identity event: the
// consumer retries the referrals until the owner's replica exists.
func (s *sim) lateOwner(ctx context.Context) error {
	n := s.next()
	owner := s.newIdentity("Agent", "Active", "")
	tenant := tenantNorth
	if s.chance(0.5) {
		tenant = tenantRiver
	}
	channels := []string{"telegram", "website", "whatsapp", "vk"}
	slug := fmt.Sprintf("agent-%s-%d", s.run, n)
	err := s.c.admin(ctx, http.MethodPost, "/referral/links", map[string]string{
		"url": slug, "ownerUserId": owner.UserID, "tenantId": tenant, "channel": channels[s.intn(len(channels))],
	}, nil)
	if err != nil {
		return failed("create a late owner's link", err)
	}
	for range 1 + s.intn(2) {
		ev := s.newIdentity("Investor", "Active", slug)
		if err := s.publishAs(ctx, ev, owner.UserID); err != nil {
			return failed("publish a late owner's referral", err)
		}
	}
	if err := sleep(ctx, lateOwnerDelay); err != nil {
		return err
	}
	owner.At = time.Now().UTC()
	if err := s.publishAs(ctx, owner, ""); err != nil {
		return failed("publish the late owner", err)
	}
	s.mu.Lock()
	s.led.lateOwners++
	s.mu.Unlock()
	return nil
}

// refusedReferral is a user the rules must not bind: an unknown slug (G1),
// an agent (G2), a blocked user (G4), a slug that is not one, or no link.
func (s *sim) refusedReferral(ctx context.Context) error {
	link := s.cast.Links[s.intn(len(s.cast.Links))]
	var ev identity
	switch s.intn(5) {
	case 0:
		ev = s.newIdentity("Investor", "Active", fmt.Sprintf("gone-%s-%d", s.run, s.next()))
	case 1:
		ev = s.newIdentity("Agent", "Active", link.Slug)
	case 2:
		ev = s.newIdentity("Investor", "Blocked", link.Slug)
	case 3:
		ev = s.newIdentity("Investor", "Active", "Промо акция!")
	default:
		ev = s.newIdentity("Investor", "Active", "")
	}
	if err := s.publishAs(ctx, ev, ""); err != nil {
		return failed("publish a referral to refuse", err)
	}
	s.mu.Lock()
	s.led.refused++
	s.mu.Unlock()
	return nil
}
