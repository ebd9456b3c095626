package referral

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/queue"
)

// TestModel publishes random streams of user-upserted and user-blocked
// events — with duplicates, out-of-order versions, link owners arriving after
// their referrals, re-sent snapshots and broken messages — and compares the
// tables and outgoing topics with a reference model fed the same messages in
// the order they took effect: the order of the idempotency marks' ids, which
// SQLite's single writer assigns in commit order, and which on PostgreSQL is
// such an order because a referral holds the rows it read from other users
// (the link, its owner's replica) until it commits (readAttachFacts), while
// each user's own messages are handled one at a time. It then replays the topic three
// ways: the producer re-sends everything, a second consumer group reads from
// offset 0, and a fresh database consumes a copy of the log.
func TestModel(t *testing.T) {
	t.Parallel()
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("seed %d ends in the model's state and replays change nothing", seed), func(t *testing.T) {
			t.Parallel()
			runModel(t, seed)
		})
	}
}

// linkSpec is a link of the generated world.
type linkSpec struct {
	slug    string
	owner   UserID
	deleted bool
}

// world is a generated stream and the links it refers to.
type world struct {
	rng    *rand.Rand
	links  []linkSpec
	stream []*event
	broken [][]byte
}

func generate(seed uint64) *world {
	w := &world{rng: rand.New(rand.NewPCG(seed, seed*7919))}
	r := w.rng
	pick := func(opts ...string) string { return opts[r.IntN(len(opts))] }

	owners := make([]UserID, 6)
	for i := range owners {
		owners[i] = newUser()
		w.links = append(w.links, linkSpec{slug: fmt.Sprintf("owner-%d", i), owner: owners[i]})
	}
	w.links = append(w.links, linkSpec{slug: "gone-link", owner: owners[0], deleted: true})
	referred := make([]UserID, 100)
	for i := range referred {
		referred[i] = newUser()
	}
	w.links = append(w.links, linkSpec{slug: "self-link", owner: referred[0]})

	randomCase := func(s string) string {
		b := []byte(s)
		for i := range b {
			if r.IntN(2) == 0 {
				b[i] = strings.ToUpper(string(b[i]))[0]
			}
		}
		return string(b)
	}
	snapshot := func(u UserID, v int64, referrer *string) *event {
		e := upsert(u, v)
		e.set("Type", pick("Investor", "Investor", "Investor", "Investor", "Investor", "Agent", "Robot"))
		e.set("Status", pick("Active", "Active", "Active", "Active", "Active", "Active", "Blocked", "Archived", "Frozen"))
		e.set("Name", map[string]any{"FirstName": pick("Ann", "", " ", "Boris"), "LastName": "L", "MiddleName": nil})
		if r.IntN(4) == 0 {
			e.set("CompanyId", tenantOf(u))
		}
		if referrer != nil {
			e.referrer(*referrer)
		}
		return e
	}
	// sequence builds one user's events in version order.
	sequence := func(u UserID, owner bool) []*event {
		var referrer *string
		if !owner {
			switch n := r.IntN(20); {
			case n < 4: // none
			case n < 15:
				s := randomCase(fmt.Sprintf("owner-%d", r.IntN(len(owners))))
				referrer = &s
			case n < 16:
				s := "not a slug!"
				referrer = &s
			case n < 17:
				s := "gone-link"
				referrer = &s
			case n < 18:
				s := "ghost-link"
				referrer = &s
			default:
				s := "self-link"
				referrer = &s
			}
		}
		first := int64(1)
		if r.IntN(10) == 0 {
			first = 2 // version 1 never reached this consumer
		}
		var seq []*event
		for v := first; v < first+1+int64(r.IntN(4)); v++ {
			switch {
			case v > first && r.IntN(5) == 0:
				seq = append(seq, blocked(u, v))
			case owner:
				e := snapshot(u, v, nil)
				e.set("Type", pick("Agent", "Agent", "DeveloperManager", "Investor", "Robot"))
				seq = append(seq, e)
			default:
				ref := referrer
				if v > first && r.IntN(3) == 0 {
					ref = nil
				}
				seq = append(seq, snapshot(u, v, ref))
			}
		}
		if len(seq) > 1 && r.IntN(5) == 0 { // out-of-order versions
			i := r.IntN(len(seq) - 1)
			seq[i], seq[i+1] = seq[i+1], seq[i]
		}
		return seq
	}

	var early, late [][]*event
	for _, u := range referred {
		early = append(early, sequence(u, false))
	}
	for _, o := range owners {
		if r.IntN(2) == 0 {
			late = append(late, sequence(o, true)) // the owner arrives after the referrals
		} else {
			early = append(early, sequence(o, true))
		}
	}
	interleave := func(seqs [][]*event) []*event {
		var out []*event
		for len(seqs) > 0 {
			i := r.IntN(len(seqs))
			out = append(out, seqs[i][0])
			if seqs[i] = seqs[i][1:]; len(seqs[i]) == 0 {
				seqs = slices.Delete(seqs, i, i+1)
			}
		}
		return out
	}
	w.stream = append(interleave(early), interleave(late)...)

	// Duplicates (same messageId) and re-sent snapshots (same version, new
	// messageId) later in the stream.
	n := len(w.stream)
	for range n / 8 {
		i := r.IntN(n)
		dup := w.stream[i]
		if r.IntN(3) == 0 && dup.Type == TypeUserUpserted {
			// The same version again under a new messageId, with other
			// content: the version guard must keep the first.
			c := *dup
			c.MessageID = dup.MessageID + "-resent"
			c.Payload = maps.Clone(dup.Payload)
			c.set("Name", map[string]any{"FirstName": "Resent", "LastName": "R", "MiddleName": nil})
			dup = &c
		}
		at := i + 1 + r.IntN(len(w.stream)-i)
		w.stream = slices.Insert(w.stream, at, dup)
	}
	w.broken = [][]byte{
		upsert("00000000-0000-0000-0000-000000000000", 1).json(),
		[]byte(`{"messageId":"broken","type":"pin.identity.user-upserted","payload":{"UserId":42}}`),
	}
	return w
}

// setUp creates the world's links in h's database.
func (w *world) setUp(t *testing.T, h *harness) {
	t.Helper()
	for _, l := range w.links {
		link := h.link(l.slug, l.owner)
		if l.deleted {
			if err := h.svc.DeleteLink(context.Background(), link.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// publishAll publishes values in order, 50 per transaction.
func publishAll(t *testing.T, h *harness, values [][]byte) {
	t.Helper()
	ctx := context.Background()
	for len(values) > 0 {
		n := min(50, len(values))
		err := h.db.Tx(ctx, func(tx *sql.Tx) error {
			for _, v := range values[:n] {
				var env struct {
					AggregateID string `json:"aggregateId"`
				}
				_ = json.Unmarshal(v, &env)
				if env.AggregateID == "" {
					env.AggregateID = "no-key"
				}
				if err := h.svc.users.PublishTx(ctx, tx, env.AggregateID, v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		values = values[n:]
	}
}

func runModel(t *testing.T, seed uint64) {
	w := generate(seed)
	h := newHarness(t, harnessOpts{})
	w.setUp(t, h)
	var values [][]byte
	for i, e := range w.stream {
		values = append(values, e.json())
		if i == len(w.stream)/2 {
			values = append(values, w.broken...)
		}
	}
	publishAll(t, h, values)
	h.waitIdle()
	t.Logf("%d messages published, %d distinct", len(values), len(distinct(w.stream)))

	if dead := h.dead(); len(dead) != len(w.broken) {
		t.Fatalf("dead letters = %d, want the %d broken messages", len(dead), len(w.broken))
	}
	first := checkAgainstModel(t, h, w)
	counts := map[Outcome]int{}
	for _, o := range first.Outcomes {
		counts[o]++
	}
	t.Logf("outcomes: %v; %d retries for a missing owner replica", counts, strings.Count(h.logs.String(), `"reason":"owner-replica-missing"`))

	// The producer sends everything again: every message is a duplicate.
	publishAll(t, h, values)
	h.waitIdle()
	if again := snapshotOf(t, h); !reflect.DeepEqual(again, first) {
		t.Fatalf("re-sent messages changed the state:\n%s", diff(first, again))
	}

	// A second group reads the topic from offset 0 on the same database.
	second := newHarness(t, harnessOpts{DB: h.db, Group: "referral-replay"})
	second.waitIdle()
	second.stop()
	if again := snapshotOf(t, h); !reflect.DeepEqual(again, first) {
		t.Fatalf("a replay from offset 0 changed the state:\n%s", diff(first, again))
	}

	// A fresh database consumes a copy of the whole log.
	fresh := newHarness(t, harnessOpts{})
	w.setUp(t, fresh)
	for p := range IdentityPartitions {
		var copied [][]byte
		for from := int64(0); ; {
			recs, err := h.svc.users.Read(context.Background(), queue.ReadFilter{Partition: &p, FromOffset: from, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				copied = append(copied, r.Value)
			}
			if len(recs) < 1000 {
				break
			}
			from = recs[len(recs)-1].Offset + 1
		}
		publishAll(t, fresh, copied)
	}
	fresh.waitIdle()
	rebuilt := checkAgainstModel(t, fresh, w)
	if !reflect.DeepEqual(rebuilt.Replicas, first.Replicas) {
		t.Fatalf("the replay into a fresh database built other replicas:\n%s", diff(first, rebuilt))
	}
	// Which bonds exist depends only on each user's own events; whether a
	// lead was requested also on the owner's state when the bond was made.
	if !reflect.DeepEqual(withoutLead(rebuilt.Bonds), withoutLead(first.Bonds)) {
		t.Fatalf("the replay into a fresh database made other bonds:\n%s", diff(first, rebuilt))
	}
}

func distinct(stream []*event) map[string]*event {
	m := map[string]*event{}
	for _, e := range stream {
		if _, ok := m[string(e.Type)+":"+e.MessageID]; !ok {
			m[string(e.Type)+":"+e.MessageID] = e
		}
	}
	return m
}

// state is what the tables hold, in ids that do not depend on the database.
type state struct {
	Replicas map[UserID]mReplica
	Bonds    map[UserID]mBond // by referred user
	Outcomes map[string]Outcome
}

type mReplica struct {
	Type, Status, First, Last, Phone string
	Middle, Company                  *string
	NameFilled                       bool
	RegisteredAt                     time.Time
	Version                          int64
}

type mBond struct {
	Referrer     UserID
	LinkURL      string
	Tenant       string
	BoundAt      time.Time
	Lead         bool
	RegisteredAt time.Time
}

func withoutLead(b map[UserID]mBond) map[UserID]mBond {
	out := map[UserID]mBond{}
	for k, v := range b {
		v.Lead = false
		out[k] = v
	}
	return out
}

// model is the reference: the spec's steps, written plainly.
type model struct {
	links    map[string]linkSpec // live links by slug
	replicas map[UserID]mReplica
	bonds    map[UserID]mBond
}

func modelSlug(s string) (string, bool) {
	s = strings.ToLower(s)
	if len(s) < 3 || len(s) > 64 || s[0] == '-' {
		return s, false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return s, false
		}
	}
	return s, true
}

func (m *model) apply(t *testing.T, e *event) Outcome {
	t.Helper()
	u := e.User
	version := e.Payload["Version"].(int64)
	held, seen := m.replicas[u]
	if e.Type == TypeUserBlocked {
		switch {
		case !seen:
			return OutcomeNoReplica
		case version <= held.Version:
			return OutcomeStale
		}
		held.Status, held.Version = "Blocked", version
		m.replicas[u] = held
		return OutcomeBlocked
	}
	typ, status := e.Payload["Type"].(string), e.Payload["Status"].(string)
	if !seen || version > held.Version {
		name := e.Payload["Name"].(map[string]any)
		r := mReplica{Type: typ, Status: status, First: name["FirstName"].(string), Last: name["LastName"].(string),
			Phone: e.Payload["PhoneNumber"].(string), NameFilled: strings.TrimSpace(name["FirstName"].(string)) != "", Version: version}
		if c, ok := e.Payload["CompanyId"].(string); ok {
			r.Company = &c
		}
		switch {
		case version == 1:
			r.RegisteredAt = e.OccurredAt
		case seen:
			r.RegisteredAt = held.RegisteredAt
		}
		m.replicas[u] = r
	}
	ref, ok := e.Payload["ReferrerUrl"].(string)
	if !ok {
		return OutcomeReplicaOnly
	}
	slug, valid := modelSlug(ref)
	if !valid {
		return OutcomeInvalidSlug
	}
	if _, bound := m.bonds[u]; bound {
		return OutcomeFirstSeenSkip
	}
	link, live := m.links[slug]
	switch {
	case !live:
		return OutcomeG1
	case typ != "Investor":
		return OutcomeG2
	case u == link.owner:
		return OutcomeG3
	case status != "Active":
		return OutcomeG4
	}
	owner, ok := m.replicas[link.owner]
	if !ok {
		t.Fatalf("message %s bound user %s before the owner %s had a replica", e.MessageID, u, link.owner)
	}
	m.bonds[u] = mBond{Referrer: link.owner, LinkURL: slug, Tenant: tenantOf(link.owner), BoundAt: e.OccurredAt,
		RegisteredAt: e.OccurredAt, Lead: (owner.Type == "Agent" || owner.Type == "DeveloperManager") && owner.Status == "Active"}
	return OutcomeR1
}

// checkAgainstModel replays the messages in the order their marks were
// written through the model and compares everything.
func checkAgainstModel(t *testing.T, h *harness, w *world) state {
	t.Helper()
	msgs := distinct(w.stream)
	rows, err := h.db.Read.Query(`select mark, user_id, outcome from referral_processed_messages order by id`)
	if err != nil {
		t.Fatal(err)
	}
	type mark struct {
		key     string
		user    UserID
		outcome Outcome
	}
	var marks []mark
	for rows.Next() {
		var m mark
		if err := rows.Scan(&m.key, &m.user, &m.outcome); err != nil {
			t.Fatal(err)
		}
		marks = append(marks, m)
	}
	rows.Close()
	if len(marks) != len(msgs) {
		t.Fatalf("%d marks for %d distinct messages", len(marks), len(msgs))
	}

	// Per-user order: each user's messages took effect in the order they
	// were first published.
	firstPos := map[string]int{}
	for i, e := range w.stream {
		if _, ok := firstPos[string(e.Type)+":"+e.MessageID]; !ok {
			firstPos[string(e.Type)+":"+e.MessageID] = i
		}
	}
	lastPos := map[UserID]int{}
	for _, mk := range marks {
		p, ok := firstPos[mk.key]
		if !ok {
			t.Fatalf("mark %s is for no published message", mk.key)
		}
		if last, ok := lastPos[mk.user]; ok && p < last {
			t.Fatalf("user %s: message %s took effect after a message published later", mk.user, mk.key)
		}
		lastPos[mk.user] = p
	}

	m := &model{links: map[string]linkSpec{}, replicas: map[UserID]mReplica{}, bonds: map[UserID]mBond{}}
	for _, l := range w.links {
		if !l.deleted {
			m.links[l.slug] = l
		}
	}
	want := state{Outcomes: map[string]Outcome{}}
	for _, mk := range marks {
		want.Outcomes[mk.key] = m.apply(t, msgs[mk.key])
	}
	want.Replicas, want.Bonds = m.replicas, m.bonds
	got := snapshotOf(t, h)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the database differs from the model:\n%s", diff(want, got))
	}
	checkOutgoing(t, h, got)
	return got
}

// snapshotOf reads the tables into a state.
func snapshotOf(t *testing.T, h *harness) state {
	t.Helper()
	s := state{Replicas: map[UserID]mReplica{}, Bonds: map[UserID]mBond{}, Outcomes: map[string]Outcome{}}
	ctx := context.Background()
	rows, err := h.db.Read.QueryContext(ctx, `select `+replicaColumns+` from referral_users`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		r, err := scanReplica(rows)
		if err != nil {
			t.Fatal(err)
		}
		s.Replicas[r.ID] = mReplica{Type: string(r.Type), Status: string(r.Status), First: r.Name.FirstName, Last: r.Name.LastName,
			Middle: r.Name.MiddleName, Phone: r.PhoneNumber, Company: r.CompanyID, NameFilled: r.IsNameFilled,
			RegisteredAt: r.RegisteredAt, Version: r.ReplicaVersion}
	}
	rows.Close()

	rows, err = h.db.Read.QueryContext(ctx, `
		select b.referred_user_id, b.referrer_user_id, l.url, b.tenant_id, b.bound_at, b.applied_rule, b.status,
			r.registration_type, r.applied_rule, r.lead_requested, r.link_url, r.referrer_user_id, r.tenant_id, r.registered_at,
			r.bond_id = b.id and b.registration_id = r.id
		from referral_bonds b
		join referral_links l on l.id = b.referral_link_id
		left join referral_registrations r on r.referred_user_id = b.referred_user_id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var (
			referred, referrer, url, tenant, rule, status    string
			regType, regRule, regURL, regReferrer, regTenant sql.NullString
			lead, linked                                     sql.NullBool
			bound, registered                                tsScan
		)
		if err := rows.Scan(&referred, &referrer, &url, &tenant, &bound, &rule, &status,
			&regType, &regRule, &lead, &regURL, &regReferrer, &regTenant, &registered, &linked); err != nil {
			t.Fatal(err)
		}
		if _, dup := s.Bonds[UserID(referred)]; dup {
			t.Fatalf("user %s has two bonds or two journal entries", referred)
		}
		if rule != "R1" || status != "Active" || regType.String != "Initial" || regRule.String != "R1" || !linked.Bool ||
			regURL.String != url || regReferrer.String != referrer || regTenant.String != tenant {
			t.Fatalf("bond of %s does not match its journal entry: %s %s %s %s %v %s %s %s", referred, rule, status,
				regType.String, regRule.String, linked.Bool, regURL.String, regReferrer.String, regTenant.String)
		}
		s.Bonds[UserID(referred)] = mBond{Referrer: UserID(referrer), LinkURL: url, Tenant: tenant, BoundAt: bound.t,
			Lead: lead.Bool, RegisteredAt: registered.t}
	}
	rows.Close()
	if n := h.count(`select count(*) from referral_registrations`); n != len(s.Bonds) {
		t.Fatalf("%d journal entries for %d bonds", n, len(s.Bonds))
	}

	rows, err = h.db.Read.QueryContext(ctx, `select mark, outcome from referral_processed_messages`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, o string
		if err := rows.Scan(&k, &o); err != nil {
			t.Fatal(err)
		}
		s.Outcomes[k] = Outcome(o)
	}
	rows.Close()
	return s
}

// checkOutgoing asserts one bond-created per bond and one lead request per
// bond that asked for one, each matching the bond, and no event twice.
func checkOutgoing(t *testing.T, h *harness, s state) {
	t.Helper()
	seen := map[string]bool{}
	created := map[UserID]int{}
	for _, r := range h.outgoing(TopicBonds) {
		env, p := decodeOut[BondCreatedPayload](t, r.Value)
		if seen[env.MessageID] {
			t.Fatalf("bond-created %s published twice", env.MessageID)
		}
		seen[env.MessageID] = true
		b, ok := s.Bonds[UserID(p.ReferredUserId)]
		if !ok || r.Key != p.ReferredUserId || UserID(p.ReferrerUserId) != b.Referrer || !p.BoundAt.Equal(b.BoundAt) || p.TenantId != b.Tenant {
			t.Fatalf("bond-created %+v matches no bond", p)
		}
		created[UserID(p.ReferredUserId)]++
	}
	leads := map[UserID]int{}
	for _, r := range h.outgoing(TopicLeadAttachments) {
		env, p := decodeOut[LeadAttachRequestedPayload](t, r.Value)
		if seen[env.MessageID] {
			t.Fatalf("lead-attach-requested %s published twice", env.MessageID)
		}
		seen[env.MessageID] = true
		if b, ok := s.Bonds[UserID(p.InvestorUserId)]; !ok || !b.Lead || UserID(p.AgentUserId) != b.Referrer {
			t.Fatalf("lead-attach-requested %+v matches no bond with a lead", p)
		}
		leads[UserID(p.InvestorUserId)]++
	}
	for u, b := range s.Bonds {
		wantLeads := 0
		if b.Lead {
			wantLeads = 1
		}
		if created[u] != 1 || leads[u] != wantLeads {
			t.Fatalf("user %s: %d bond-created and %d lead events, want 1 and %d", u, created[u], leads[u], wantLeads)
		}
	}
	if len(created) != len(s.Bonds) {
		t.Fatalf("%d users with bond-created events, %d bonds", len(created), len(s.Bonds))
	}
}

// tsScan scans a nullable text timestamp.
type tsScan struct{ t time.Time }

func (s *tsScan) Scan(src any) error {
	if src == nil {
		return nil
	}
	v, ok := src.(string)
	if !ok {
		return fmt.Errorf("timestamp of type %T", src)
	}
	var err error
	s.t, err = time.Parse(time.RFC3339Nano, v)
	return err
}

// diff names what differs between two states.
func diff(want, got state) string {
	var b strings.Builder
	for u, w := range want.Replicas {
		if g, ok := got.Replicas[u]; !ok || !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "replica %s: want %+v, got %+v (present %v)\n", u, w, g, ok)
		}
	}
	for u := range got.Replicas {
		if _, ok := want.Replicas[u]; !ok {
			fmt.Fprintf(&b, "replica %s: not expected\n", u)
		}
	}
	for u, w := range want.Bonds {
		if g, ok := got.Bonds[u]; !ok || g != w {
			fmt.Fprintf(&b, "bond of %s: want %+v, got %+v (present %v)\n", u, w, g, ok)
		}
	}
	for u, g := range got.Bonds {
		if _, ok := want.Bonds[u]; !ok {
			fmt.Fprintf(&b, "bond of %s: not expected: %+v\n", u, g)
		}
	}
	for k, w := range want.Outcomes {
		if g := got.Outcomes[k]; g != w {
			fmt.Fprintf(&b, "message %s: outcome want %q, got %q\n", k, w, g)
		}
	}
	for k := range got.Outcomes {
		if _, ok := want.Outcomes[k]; !ok {
			fmt.Fprintf(&b, "message %s: mark not expected\n", k)
		}
	}
	return b.String()
}
