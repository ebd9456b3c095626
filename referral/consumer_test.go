package referral

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/testwait"
)

// TestAttachThroughTheTopic drives branch B through pin.identity.users.v1:
// one case per guard and branch. The cases share one database and consumer;
// each has its own users and links, so they run side by side.
func TestAttachThroughTheTopic(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	str := func(s string) *string { return &s }
	for i, tc := range []struct {
		name         string
		ownerType    UserType
		ownerStatus  UserStatus
		ownerBlocked bool    // a user-blocked event follows the owner's snapshot
		linkMissing  bool    // no link has the slug
		linkDeleted  bool    // the link was deleted before the event
		referrer     *string // ReferrerUrl of the event; nil means none
		self         bool    // the owner registers through the own link
		activeBond   bool    // another trigger already bound the user (no Initial entry)
		initial      bool    // the user was bound before through another link
		mutate       func(*event)
		want         Outcome
		wantBond     bool
		wantLead     bool
	}{
		{name: "R1 binds an active investor and requests a lead for an active agent",
			referrer: str("Agent-Link"), want: OutcomeR1, wantBond: true, wantLead: true},
		{name: "R1 requests a lead for an active developer manager",
			ownerType: UserDeveloperManager, referrer: str("agent-link"), want: OutcomeR1, wantBond: true, wantLead: true},
		{name: "R1 requests no lead for an investor owner",
			ownerType: UserInvestor, referrer: str("agent-link"), want: OutcomeR1, wantBond: true},
		{name: "R1 requests no lead for an owner of unknown type",
			ownerType: "Robot", referrer: str("agent-link"), want: OutcomeR1, wantBond: true},
		{name: "R1 requests no lead for an archived owner",
			ownerStatus: StatusArchived, referrer: str("agent-link"), want: OutcomeR1, wantBond: true},
		{name: "R1 requests no lead for an owner of unknown status",
			ownerStatus: "Frozen", referrer: str("agent-link"), want: OutcomeR1, wantBond: true},
		{name: "R1 requests no lead for an owner blocked by user-blocked",
			ownerBlocked: true, referrer: str("agent-link"), want: OutcomeR1, wantBond: true},
		{name: "without a ReferrerUrl only the replica is written",
			want: OutcomeReplicaOnly},
		{name: "a ReferrerUrl that is not a slug skips branch B",
			referrer: str("agent link; drop table"), want: OutcomeInvalidSlug},
		{name: "a too short slug skips branch B",
			referrer: str("ab"), want: OutcomeInvalidSlug},
		{name: "G1 refuses a slug without link",
			linkMissing: true, referrer: str("agent-link"), want: OutcomeG1},
		{name: "G1 refuses a deleted link",
			linkDeleted: true, referrer: str("agent-link"), want: OutcomeG1},
		{name: "G2 refuses an agent registering through a link",
			referrer: str("agent-link"), mutate: func(e *event) { e.set("Type", "Agent") }, want: OutcomeG2},
		{name: "G2 refuses a user of unknown type",
			referrer: str("agent-link"), mutate: func(e *event) { e.set("Type", "Robot") }, want: OutcomeG2},
		{name: "G3 refuses the owner registering through the own link",
			self: true, ownerType: UserInvestor, referrer: str("agent-link"), want: OutcomeG3},
		{name: "G4 refuses a blocked user",
			referrer: str("agent-link"), mutate: func(e *event) { e.set("Status", "Blocked") }, want: OutcomeG4},
		{name: "G4 refuses an archived user",
			referrer: str("agent-link"), mutate: func(e *event) { e.set("Status", "Archived") }, want: OutcomeG4},
		{name: "G4 treats an unknown status as blocked",
			referrer: str("agent-link"), mutate: func(e *event) { e.set("Status", "Frozen") }, want: OutcomeG4},
		{name: "G5 refuses a user another trigger already bound",
			activeBond: true, referrer: str("agent-link"), want: OutcomeG5, wantBond: true},
		{name: "a user with an Initial entry is not first-seen",
			initial: true, referrer: str("agent-link"), want: OutcomeFirstSeenSkip, wantBond: true},
	} {
		slug := fmt.Sprintf("link-%02d", i)
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if tc.ownerType == "" {
				tc.ownerType = UserAgent
			}
			if tc.ownerStatus == "" {
				tc.ownerStatus = StatusActive
			}
			owner := newUser()
			h.publish(upsert(owner, 1).set("Type", string(tc.ownerType)).set("Status", string(tc.ownerStatus)).json())
			if tc.ownerBlocked {
				h.publish(blocked(owner, 2).json())
			}
			var link Link
			if !tc.linkMissing {
				link = h.link(slug, owner)
				if tc.linkDeleted {
					if err := h.svc.DeleteLink(ctx, link.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
			user := newUser()
			if tc.self {
				user = owner
			}
			version := int64(1)
			if tc.self {
				version = 2
			}
			if tc.activeBond {
				insertForeignBond(t, h, user, link)
			}
			if tc.initial {
				other := newUser()
				h.publish(upsert(other, 1).set("Type", "Agent").json())
				h.link(slug+"-other", other)
				h.publish(upsert(user, 1).referrer(slug + "-other").json())
				version = 2
			}
			h.waitIdle() // the owner's state is settled before the user registers
			ev := upsert(user, version)
			if tc.referrer != nil {
				// Cases name the link "agent-link" in the case they want sent.
				ev.referrer(strings.NewReplacer("agent-link", slug, "Agent-Link", strings.ToUpper(slug[:1])+slug[1:]).Replace(*tc.referrer))
			}
			if tc.mutate != nil {
				tc.mutate(ev)
			}
			h.publish(ev.json())
			h.waitIdle()

			if got := h.markOutcome(TypeUserUpserted, ev.MessageID); got != tc.want {
				t.Fatalf("outcome = %q, want %q\nlogs:\n%s", got, tc.want, h.logs)
			}
			if r := h.replica(user); r == nil || r.ReplicaVersion != version {
				t.Fatalf("replica = %+v, want version %d", r, version)
			}
			bonds := h.count(`select count(*) from referral_bonds where referred_user_id = ?`, string(user))
			if (bonds == 1) != tc.wantBond || bonds > 1 {
				t.Fatalf("bonds of the user = %d, want bond %v", bonds, tc.wantBond)
			}
			created := 0
			for _, r := range h.outgoing(TopicBonds) {
				if r.Key == string(user) {
					created++
				}
			}
			wantCreated := 0
			if tc.want == OutcomeR1 || tc.initial {
				wantCreated = 1
			}
			if created != wantCreated {
				t.Fatalf("bond-created events for the user = %d, want %d", created, wantCreated)
			}
			leads := 0
			for _, r := range h.outgoing(TopicLeadAttachments) {
				if r.Key == string(user) {
					leads++
				}
			}
			if tc.initial {
				leads-- // the first binding, through an active agent's link
			}
			if (leads == 1) != tc.wantLead || leads > 1 {
				t.Fatalf("lead events = %d, want lead %v", leads, tc.wantLead)
			}
			if tc.want == OutcomeR1 {
				var lead bool
				if err := h.db.Read.QueryRow(`select lead_requested from referral_registrations where referred_user_id = ?`, string(user)).Scan(&lead); err != nil || lead != tc.wantLead {
					t.Fatalf("journal lead_requested = %v (%v), want %v", lead, err, tc.wantLead)
				}
			}
		})
	}
}

// insertForeignBond writes an active bond without Initial entry, as another
// attach trigger (T2) would.
func insertForeignBond(t *testing.T, h *harness, user UserID, l Link) {
	t.Helper()
	err := h.db.Tx(context.Background(), func(tx *sql.Tx) error {
		_, err := insertBond(context.Background(), tx, Bond{ID: BondID(newID()), ReferredUserID: user, ReferrerUserID: l.OwnerUserID,
			ReferralLinkID: l.ID, TenantID: l.TenantID, BoundAt: baseTime, AppliedRule: "R2", Status: BondActive,
			RegistrationID: RegistrationID(newID()), CreatedAt: baseTime})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBondAndEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	owner, user := newUser(), newUser()
	h.publish(upsert(owner, 1).set("Type", "Agent").json())
	link := h.link("Maria-Agent", owner)
	if link.URL != "maria-agent" {
		t.Fatalf("link url = %q, want the lower-cased slug", link.URL)
	}
	ev := upsert(user, 1).referrer("MARIA-agent")
	h.publish(ev.json())
	h.waitIdle()

	bonds, err := h.svc.ListBonds(context.Background(), BondFilter{ReferredUserID: user})
	if err != nil || len(bonds) != 1 {
		t.Fatalf("bonds = %+v, %v", bonds, err)
	}
	b := bonds[0]
	regs, err := h.svc.ListRegistrations(context.Background(), RegistrationFilter{ReferredUserID: user})
	if err != nil || len(regs) != 1 {
		t.Fatalf("registrations = %+v, %v", regs, err)
	}
	r := regs[0]

	t.Run("the bond maps the event and the link", func(t *testing.T) {
		want := Bond{ID: b.ID, ReferredUserID: user, ReferrerUserID: owner, ReferralLinkID: link.ID, TenantID: link.TenantID,
			BoundAt: ev.OccurredAt, AppliedRule: RuleR1, Status: BondActive, RegistrationID: r.ID, CreatedAt: b.CreatedAt}
		if b != want {
			t.Fatalf("bond = %+v\nwant   %+v", b, want)
		}
	})
	t.Run("the Initial entry and the bond point at each other", func(t *testing.T) {
		want := Registration{ID: b.RegistrationID, ReferredUserID: user, RegistrationType: RegistrationInitial, AppliedRule: RuleR1,
			LeadRequested: true, LinkURL: "maria-agent", ReferrerUserID: owner, TenantID: link.TenantID, RegisteredAt: ev.OccurredAt,
			BondID: b.ID, CreatedAt: r.CreatedAt}
		if r != want {
			t.Fatalf("registration = %+v\nwant           %+v", r, want)
		}
	})
	t.Run("bond-created carries the bond, the channel and the correlation id", func(t *testing.T) {
		recs := h.outgoing(TopicBonds)
		if len(recs) != 1 || recs[0].Key != string(user) {
			t.Fatalf("records = %+v", recs)
		}
		env, p := decodeOut[BondCreatedPayload](t, recs[0].Value)
		if env.Type != TypeBondCreated || env.ContractVersion != 1 || env.CorrelationID != ev.CorrelationID || env.CausationID != ev.MessageID {
			t.Fatalf("envelope = %+v", env)
		}
		want := BondCreatedPayload{BondId: string(b.ID), ReferredUserId: string(user), ReferrerUserId: string(owner),
			ReferralLinkId: string(link.ID), TenantId: link.TenantID, BoundAt: ev.OccurredAt, AppliedRule: "R1", Status: "Active", Channel: "telegram"}
		if p != want {
			t.Fatalf("payload = %+v\nwant      %+v", p, want)
		}
	})
	t.Run("lead-attach-requested names the agent and the bond", func(t *testing.T) {
		recs := h.outgoing(TopicLeadAttachments)
		if len(recs) != 1 || recs[0].Key != string(user) {
			t.Fatalf("records = %+v", recs)
		}
		env, p := decodeOut[LeadAttachRequestedPayload](t, recs[0].Value)
		if env.Type != TypeLeadAttachRequested || env.CorrelationID != ev.CorrelationID {
			t.Fatalf("envelope = %+v", env)
		}
		want := LeadAttachRequestedPayload{InvestorUserId: string(user), AgentUserId: string(owner), AgentCompanyId: link.TenantID,
			ReferralLinkId: string(link.ID), Channel: "telegram", AppliedRule: "R1", BondId: string(b.ID), RequestedAt: p.RequestedAt}
		if p != want || p.RequestedAt.IsZero() {
			t.Fatalf("payload = %+v\nwant      %+v", p, want)
		}
	})
	t.Run("every log line about the event carries its correlation id and no name or phone", func(t *testing.T) {
		n := 0
		for _, l := range h.logs.Lines() {
			if l["message_id"] != ev.MessageID {
				continue
			}
			n++
			if l["correlation_id"] != ev.CorrelationID {
				t.Errorf("log line without the correlation id: %v", l)
			}
		}
		if n < 3 {
			t.Fatalf("%d log lines about the event, want consumed, replica-upserted and attach-outcome", n)
		}
		all := h.logs.String()
		for _, secret := range []string{"Zinaida", "Quorum", "79991234567"} {
			if strings.Contains(all, secret) {
				t.Fatalf("the log holds %q", secret)
			}
		}
		if !strings.Contains(all, `"phone":"+7***4567"`) {
			t.Fatalf("the log has no masked phone:\n%s", all)
		}
	})
}

func decodeOut[P any](t *testing.T, value []byte) (Envelope, P) {
	t.Helper()
	var env Envelope
	var p P
	if err := json.Unmarshal(value, &env); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(env.Payload)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("payload %s: %v", env.Payload, err)
	}
	return env, p
}

func TestReplicaBranch(t *testing.T) {
	t.Parallel()

	t.Run("a registration records occurredAt and the fields of the snapshot", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		company := "AAAAAAAA-0000-0000-0000-000000000001"
		ev := upsert(u, 1).set("CompanyId", company).set("Name", map[string]any{"FirstName": "  ", "LastName": "X", "MiddleName": "Y"})
		h.publish(ev.json())
		h.waitIdle()
		r := h.replica(u)
		mid := "Y"
		if r == nil || !r.RegisteredAt.Equal(ev.OccurredAt) || r.IsNameFilled || r.Type != UserInvestor || r.Status != StatusActive ||
			*r.CompanyID != strings.ToLower(company) || r.PhoneNumber != "+79991234567" || *r.Name.MiddleName != mid || r.ReplicaVersion != 1 {
			t.Fatalf("replica = %+v", r)
		}
	})
	t.Run("a user first seen above version 1 has no registration time, and keeps none", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		h.publish(upsert(u, 2).json(), upsert(u, 3).json())
		h.waitIdle()
		if r := h.replica(u); r == nil || !r.RegisteredAt.IsZero() || r.ReplicaVersion != 3 {
			t.Fatalf("replica = %+v", r)
		}
	})
	t.Run("later versions keep the registration time", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		v1 := upsert(u, 1)
		h.publish(v1.json(), upsert(u, 2).set("Status", "Blocked").json())
		h.waitIdle()
		if r := h.replica(u); r == nil || !r.RegisteredAt.Equal(v1.OccurredAt) || r.Status != StatusBlocked {
			t.Fatalf("replica = %+v", r)
		}
	})
	t.Run("the version guard ignores older and equal versions", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		h.publish(upsert(u, 3).set("Status", "Archived").json(),
			upsert(u, 2).json(),
			upsert(u, 3).json(), // the same version, another message
			blocked(u, 3).json(),
		)
		h.waitIdle()
		if r := h.replica(u); r == nil || r.ReplicaVersion != 3 || r.Status != StatusArchived {
			t.Fatalf("replica = %+v", r)
		}
		h.publish(upsert(u, 4).json())
		h.waitIdle()
		if r := h.replica(u); r.ReplicaVersion != 4 || r.Status != StatusActive {
			t.Fatalf("replica = %+v", r)
		}
	})
	t.Run("unknown type and status are kept as sent", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		h.publish(upsert(u, 1).set("Type", "Cyborg").set("Status", "Dormant").json())
		h.waitIdle()
		if r := h.replica(u); r == nil || r.Type != "Cyborg" || r.Status != "Dormant" {
			t.Fatalf("replica = %+v", r)
		}
	})
	t.Run("a contract version mismatch warns and proceeds", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		ev := upsert(u, 1)
		ev.ContractVersion = 2
		h.publish(ev.json())
		h.waitIdle()
		if h.replica(u) == nil {
			t.Fatal("no replica")
		}
		if !strings.Contains(h.logs.String(), "contract version mismatch") {
			t.Fatalf("no warning:\n%s", h.logs)
		}
	})
}

func TestUserBlocked(t *testing.T) {
	t.Parallel()

	t.Run("blocks the replica behind the version guard and publishes nothing", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		b2 := blocked(u, 2)
		h.publish(upsert(u, 1).json(), b2.json(), blocked(u, 2).json())
		h.waitIdle()
		r := h.replica(u)
		if r == nil || r.Status != StatusBlocked || r.ReplicaVersion != 2 || r.Name.FirstName != "Zinaida" {
			t.Fatalf("replica = %+v", r)
		}
		if got := h.markOutcome(TypeUserBlocked, b2.MessageID); got != OutcomeBlocked {
			t.Fatalf("outcome = %q", got)
		}
		if n := h.count(`select count(*) from referral_processed_messages where outcome = ?`, string(OutcomeStale)); n != 1 {
			t.Fatalf("stale blocks = %d, want 1", n)
		}
		if n := len(h.outgoing(TopicBonds)) + len(h.outgoing(TopicLeadAttachments)); n != 0 {
			t.Fatalf("%d outgoing events", n)
		}
		h.publish(upsert(u, 3).json())
		h.waitIdle()
		if r := h.replica(u); r.Status != StatusActive {
			t.Fatalf("an upsert after the block did not unblock: %+v", r)
		}
	})
	t.Run("a block before any snapshot is a warning and a no-op", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		b := blocked(u, 5)
		h.publish(b.json())
		h.waitIdle()
		if h.replica(u) != nil || h.markOutcome(TypeUserBlocked, b.MessageID) != OutcomeNoReplica {
			t.Fatalf("replica = %+v, outcome %q", h.replica(u), h.markOutcome(TypeUserBlocked, b.MessageID))
		}
	})
}

func TestTransport(t *testing.T) {
	t.Parallel()

	t.Run("a duplicate messageId is acknowledged and does nothing", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		u := newUser()
		ev := upsert(u, 1)
		h.publish(ev.json())
		dup := *ev
		dup.Payload = map[string]any{}
		for k, v := range ev.Payload {
			dup.Payload[k] = v
		}
		dup.set("Version", 7)
		h.publish(dup.json())
		h.waitIdle()
		if r := h.replica(u); r.ReplicaVersion != 1 {
			t.Fatalf("the duplicate took effect: %+v", r)
		}
		if n := h.count(`select count(*) from referral_processed_messages`); n != 1 {
			t.Fatalf("marks = %d", n)
		}
	})
	t.Run("broken messages go to the dead-letter queue at once", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		empty := upsert("00000000-0000-0000-0000-000000000000", 1)
		h.publish(empty.json(), []byte(`{"messageId":"x","type":"pin.identity.user-upserted","payload":`),
			upsert(newUser(), 1).set("UserId", "not-a-guid").json())
		h.waitIdle()
		dead := h.dead()
		if len(dead) != 3 {
			t.Fatalf("dead letters = %d, want 3", len(dead))
		}
		for _, d := range dead {
			if d.Attempts != 1 || !strings.Contains(d.LastError, "bad identity event") {
				t.Fatalf("dead letter = %+v", d)
			}
		}
	})
	t.Run("other message types on the topic are acknowledged and ignored", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		ev := upsert(newUser(), 1)
		ev.Type = "pin.identity.user-signed-in"
		h.publish(ev.json())
		h.waitIdle()
		if n := h.count(`select count(*) from referral_processed_messages`) + len(h.dead()); n != 0 {
			t.Fatalf("marks and dead letters = %d", n)
		}
	})
}

func TestOwnerReplicaMissing(t *testing.T) {
	t.Parallel()

	t.Run("retries until the owner arrives without holding back other users", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{})
		owner, user, other := newUser(), newUser(), newUser()
		h.link("late-owner", owner)
		ev := upsert(user, 1).referrer("late-owner")
		h.publish(ev.json())
		testwait.Until(t, 10*time.Second, "a retry of the referral", func() bool { return h.group().Retrying == 1 })
		// Later events of the same user wait; other users flow.
		later := upsert(user, 2)
		h.publish(later.json(), upsert(other, 1).json())
		testwait.Until(t, 10*time.Second, "the other user's replica", func() bool { return h.replica(other) != nil })
		if r := h.replica(user); r != nil {
			t.Fatalf("the retrying user's replica was written before its registration: %+v", r)
		}
		h.publish(upsert(owner, 1).set("Type", "Agent").json())
		h.waitIdle()
		if h.markOutcome(TypeUserUpserted, ev.MessageID) != OutcomeR1 || h.replica(user).ReplicaVersion != 2 {
			t.Fatalf("outcome %q, replica %+v", h.markOutcome(TypeUserUpserted, ev.MessageID), h.replica(user))
		}
		if !strings.Contains(h.logs.String(), "REFERRAL_OWNER_REPLICA_MISSING") {
			t.Fatal("no log line names REFERRAL_OWNER_REPLICA_MISSING")
		}
	})
	t.Run("dead-letters after the attempts and binds on redrive", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t, harnessOpts{Retry: queue.RetryPolicy{MaxAttempts: 3, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}})
		owner, user := newUser(), newUser()
		h.link("never-owner", owner)
		ev := upsert(user, 1).referrer("never-owner")
		h.publish(ev.json())
		h.waitIdle()
		dead := h.dead()
		if len(dead) != 1 || dead[0].Attempts != 3 || !strings.Contains(dead[0].LastError, "REFERRAL_OWNER_REPLICA_MISSING") {
			t.Fatalf("dead letters = %+v", dead)
		}
		h.publish(upsert(owner, 1).json())
		h.waitIdle()
		if _, err := h.svc.admin.Redrive(context.Background(), queue.DeadFilter{Queue: TopicIdentityUsers, Group: ConsumerGroup}); err != nil {
			t.Fatal(err)
		}
		h.waitIdle()
		if got := h.markOutcome(TypeUserUpserted, ev.MessageID); got != OutcomeR1 {
			t.Fatalf("outcome after redrive = %q", got)
		}
	})
}

func TestRaceWithAnotherTrigger(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	owner, user := newUser(), newUser()
	h.publish(upsert(owner, 1).set("Type", "Agent").json())
	link := h.link("race-link", owner)
	h.waitIdle()
	ctx := context.Background()

	t.Run("a unique conflict on the active bond completes without writes or events", func(t *testing.T) {
		insertForeignBond(t, h, user, link)
		err := h.db.Tx(ctx, func(tx *sql.Tx) error {
			ev := upsert(user, 1)
			parsed, err := parseUserUpserted(mustEnvelope(t, ev.json()))
			if err != nil {
				return err
			}
			_, won, err := h.svc.bind(ctx, tx, parsed, link, true, h.db.Now())
			if err != nil || won {
				t.Errorf("bind = won %v, %v; want lost", won, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := h.count(`select count(*) from referral_bonds where referred_user_id = ?`, string(user)); n != 1 {
			t.Fatalf("bonds = %d", n)
		}
		if n := h.count(`select count(*) from referral_registrations`) + len(h.outgoing(TopicBonds)); n != 0 {
			t.Fatalf("registrations and events = %d", n)
		}
	})
	t.Run("a unique conflict on the Initial entry takes the new bond back", func(t *testing.T) {
		u2 := newUser()
		err := h.db.Tx(ctx, func(tx *sql.Tx) error {
			// Another trigger's closed bond and its Initial entry.
			closed := Bond{ID: BondID(newID()), ReferredUserID: u2, ReferrerUserID: owner, ReferralLinkID: link.ID, TenantID: link.TenantID,
				BoundAt: baseTime, AppliedRule: "R2", Status: "Closed", RegistrationID: RegistrationID(newID()), CreatedAt: baseTime}
			if _, err := insertBond(ctx, tx, closed); err != nil {
				return err
			}
			_, err := insertRegistration(ctx, tx, Registration{ID: closed.RegistrationID, ReferredUserID: u2, RegistrationType: RegistrationInitial,
				AppliedRule: "R2", LinkURL: link.URL, ReferrerUserID: owner, TenantID: link.TenantID, RegisteredAt: baseTime, BondID: closed.ID, CreatedAt: baseTime})
			if err != nil {
				return err
			}
			parsed, err := parseUserUpserted(mustEnvelope(t, upsert(u2, 1).json()))
			if err != nil {
				return err
			}
			_, won, err := h.svc.bind(ctx, tx, parsed, link, true, h.db.Now())
			if err != nil || won {
				t.Errorf("bind = won %v, %v; want lost", won, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := h.count(`select count(*) from referral_bonds where referred_user_id = ? and status = 'Active'`, string(u2)); n != 0 {
			t.Fatalf("active bonds = %d", n)
		}
		if n := len(h.outgoing(TopicBonds)); n != 0 {
			t.Fatalf("events = %d", n)
		}
	})
}

func mustEnvelope(t *testing.T, b []byte) Envelope {
	t.Helper()
	env, err := parseEnvelope(b)
	if err != nil {
		t.Fatal(err)
	}
	return env
}
