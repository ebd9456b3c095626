package referral

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNormalizeSlug(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, slug string
		ok        bool
	}{
		{"agent-007", "agent-007", true},
		{"Agent-007", "agent-007", true},
		{"abc", "abc", true},
		{"ab", "ab", false},
		{"-abc", "-abc", false},
		{"abc_def", "abc_def", false},
		{"abc def", "abc def", false},
		{"https://x.example/abc", "https://x.example/abc", false},
		{strings.Repeat("a", 64), strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), strings.Repeat("a", 65), false},
		{"", "", false},
		{"абв", "абв", false},
	} {
		slug, ok := NormalizeSlug(tc.raw)
		if slug != tc.slug || ok != tc.ok {
			t.Errorf("NormalizeSlug(%q) = %q, %v; want %q, %v", tc.raw, slug, ok, tc.slug, tc.ok)
		}
	}
}

var t0 = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

func upserted(version int64) UserUpserted {
	return UserUpserted{
		meta:    meta{MessageID: "m", OccurredAt: t0},
		UserID:  "11111111-1111-1111-1111-111111111111",
		Type:    UserInvestor,
		Status:  StatusActive,
		Name:    FullName{FirstName: " Ann ", LastName: "Lee"},
		Version: version,
	}
}

func TestUpsertReplica(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)

	t.Run("version 1 records the registration time and fills the name", func(t *testing.T) {
		r, ok := upsertReplica(upserted(1), nil, now)
		if !ok || !r.RegisteredAt.Equal(t0) || !r.IsNameFilled || r.ReplicaVersion != 1 {
			t.Fatalf("got %+v, %v", r, ok)
		}
	})
	t.Run("a first-seen version above 1 leaves the registration time unknown", func(t *testing.T) {
		r, ok := upsertReplica(upserted(3), nil, now)
		if !ok || !r.RegisteredAt.IsZero() {
			t.Fatalf("got %+v, %v", r, ok)
		}
	})
	t.Run("a later version keeps the registration time", func(t *testing.T) {
		held, _ := upsertReplica(upserted(1), nil, now)
		ev := upserted(2)
		ev.OccurredAt = t0.Add(time.Hour)
		ev.Name.FirstName = "   "
		r, ok := upsertReplica(ev, &held, now)
		if !ok || !r.RegisteredAt.Equal(t0) || r.IsNameFilled || r.ReplicaVersion != 2 {
			t.Fatalf("got %+v, %v", r, ok)
		}
	})
	t.Run("an equal or older version changes nothing", func(t *testing.T) {
		held, _ := upsertReplica(upserted(5), nil, now)
		for _, v := range []int64{5, 4, 1} {
			ev := upserted(v)
			ev.Status = StatusBlocked
			if r, ok := upsertReplica(ev, &held, now); ok || r.Status != StatusActive {
				t.Fatalf("version %d: got %+v, %v", v, r, ok)
			}
		}
	})
}

func TestBlockReplica(t *testing.T) {
	t.Parallel()
	held, _ := upsertReplica(upserted(2), nil, t0)
	if _, ok := blockReplica(UserBlocked{UserID: held.ID, Version: 3}, nil, t0); ok {
		t.Fatal("blocked a missing replica")
	}
	if _, ok := blockReplica(UserBlocked{UserID: held.ID, Version: 2}, &held, t0); ok {
		t.Fatal("blocked with a stale version")
	}
	r, ok := blockReplica(UserBlocked{UserID: held.ID, Version: 3}, &held, t0)
	if !ok || r.Status != StatusBlocked || r.ReplicaVersion != 3 || r.Name != held.Name {
		t.Fatalf("got %+v, %v", r, ok)
	}
}

func TestDecideAttach(t *testing.T) {
	t.Parallel()
	owner := Replica{ID: "22222222-2222-2222-2222-222222222222", Type: UserAgent, Status: StatusActive}
	link := &Link{ID: "l", URL: "agent-1", OwnerUserID: owner.ID}
	url := func(s string) *string { return &s }
	base := func() attachFacts {
		ev := upserted(1)
		ev.ReferrerURL = url("Agent-1")
		return attachFacts{Event: ev, Link: link, Owner: &owner}
	}
	for _, tc := range []struct {
		name   string
		change func(*attachFacts)
		want   Outcome
		lead   bool
	}{
		{"binds an active investor through an agent's link and requests a lead", func(*attachFacts) {}, OutcomeR1, true},
		{"without a ReferrerUrl only the replica changes", func(f *attachFacts) { f.Event.ReferrerURL = nil }, OutcomeReplicaOnly, false},
		{"a ReferrerUrl that is not a slug is skipped", func(f *attachFacts) { f.Event.ReferrerURL = url("a b") }, OutcomeInvalidSlug, false},
		{"a user with an Initial entry is not first-seen", func(f *attachFacts) { f.HasInitial = true }, OutcomeFirstSeenSkip, false},
		{"G1 refuses a missing link", func(f *attachFacts) { f.Link = nil }, OutcomeG1, false},
		{"G2 refuses an agent", func(f *attachFacts) { f.Event.Type = UserAgent }, OutcomeG2, false},
		{"G2 refuses an unknown type", func(f *attachFacts) { f.Event.Type = "Robot" }, OutcomeG2, false},
		{"G3 refuses the link's owner", func(f *attachFacts) { f.Event.UserID = owner.ID }, OutcomeG3, false},
		{"G4 refuses a blocked user", func(f *attachFacts) { f.Event.Status = StatusBlocked }, OutcomeG4, false},
		{"G4 refuses an archived user", func(f *attachFacts) { f.Event.Status = StatusArchived }, OutcomeG4, false},
		{"G4 refuses an unknown status as blocked", func(f *attachFacts) { f.Event.Status = "Frozen" }, OutcomeG4, false},
		{"G5 refuses a user with an active bond", func(f *attachFacts) { f.HasActiveBond = true }, OutcomeG5, false},
		{"a missing owner replica asks for a retry", func(f *attachFacts) { f.Owner = nil }, OutcomeOwnerMissing, false},
		{"a developer manager gets a lead", func(f *attachFacts) { o := owner; o.Type = UserDeveloperManager; f.Owner = &o }, OutcomeR1, true},
		{"an investor owner gets no lead", func(f *attachFacts) { o := owner; o.Type = UserInvestor; f.Owner = &o }, OutcomeR1, false},
		{"an unknown owner type gets no lead", func(f *attachFacts) { o := owner; o.Type = "Robot"; f.Owner = &o }, OutcomeR1, false},
		{"a blocked owner gets no lead", func(f *attachFacts) { o := owner; o.Status = StatusBlocked; f.Owner = &o }, OutcomeR1, false},
		{"an owner of unknown status gets no lead", func(f *attachFacts) { o := owner; o.Status = "Frozen"; f.Owner = &o }, OutcomeR1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base()
			tc.change(&f)
			d := decideAttach(f)
			if d.Outcome != tc.want || d.LeadRequested != tc.lead {
				t.Fatalf("decision = %+v, want %s lead=%v", d, tc.want, tc.lead)
			}
		})
	}
}

func TestParseUserUpserted(t *testing.T) {
	t.Parallel()
	good := `{"messageId":"m1","type":"pin.identity.user-upserted","contractVersion":1,
		"aggregateId":"11111111-1111-1111-1111-111111111111","aggregateType":"User",
		"occurredAt":"2026-01-15T12:00:00Z","correlationId":"c1",
		"payload":{"UserId":"11111111-1111-1111-1111-111111111111","Type":"Investor","CompanyId":null,
		"Status":"Active","Name":{"FirstName":"Ann","LastName":"Lee","MiddleName":null},
		"PhoneNumber":"+79991231234","RegisteredVia":"Sms","ReferrerUrl":"agent-1","Version":1}}`
	parse := func(s string) (UserUpserted, error) {
		env, err := parseEnvelope([]byte(s))
		if err != nil {
			return UserUpserted{}, err
		}
		return parseUserUpserted(env)
	}
	ev, err := parse(good)
	if err != nil || ev.UserID != "11111111-1111-1111-1111-111111111111" || *ev.ReferrerURL != "agent-1" || ev.CorrelationID != "c1" {
		t.Fatalf("parse = %+v, %v", ev, err)
	}
	for name, mutate := range map[string]func(map[string]any){
		"an empty GUID": func(m map[string]any) {
			pl(m)["UserId"] = "00000000-0000-0000-0000-000000000000"
			delete(m, "aggregateId")
		},
		"a UserId that is not a GUID":    func(m map[string]any) { pl(m)["UserId"] = "nope" },
		"a payload of the wrong shape":   func(m map[string]any) { m["payload"] = []int{1} },
		"a Version that is not a number": func(m map[string]any) { pl(m)["Version"] = "one" },
		"a zero Version":                 func(m map[string]any) { pl(m)["Version"] = 0 },
		"no messageId":                   func(m map[string]any) { delete(m, "messageId") },
		"no occurredAt":                  func(m map[string]any) { delete(m, "occurredAt") },
		"an aggregateId of another user": func(m map[string]any) { m["aggregateId"] = "22222222-2222-2222-2222-222222222222" },
		"a CompanyId that is not a GUID": func(m map[string]any) { pl(m)["CompanyId"] = "acme" },
		"no payload":                     func(m map[string]any) { delete(m, "payload") },
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal([]byte(good), &m); err != nil {
				t.Fatal(err)
			}
			mutate(m)
			b, _ := json.Marshal(m)
			if _, err := parse(string(b)); !errors.Is(err, ErrBadPayload) {
				t.Fatalf("err = %v, want ErrBadPayload", err)
			}
		})
	}
}

func pl(m map[string]any) map[string]any { return m["payload"].(map[string]any) }
