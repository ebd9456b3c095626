package referral

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/gorilla/mux"

	"switchyard/httpjson"
	"switchyard/httpjson/httpjsontest"
	"switchyard/mask"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// The fuzz targets of this file check the referral consumers and operator
// API against bad input: identity events as they come off the topic, the
// ReferrerUrl slug from a cookie, and the link body. They run over their
// seeds in every `go test`, and for a fixed time in CI (.ci/fuzz).

// Fixtures of the fuzz targets: an agent who owns the link "agent-link".
const (
	fuzzOwner  = "aaaaaaaa-0000-4000-8000-000000000001"
	fuzzTenant = "bbbbbbbb-0000-4000-8000-000000000001"
	fuzzUser   = "cccccccc-0000-4000-8000-000000000002"
)

// fuzzService is a referral service on a fresh database (commits skip the
// fsync: fuzzing checks answers and state, not durability) holding the
// owner's replica and a live link of theirs. Its consumers do not run: the
// targets call the handler themselves.
func fuzzService(tb testing.TB) *Service {
	tb.Helper()
	db := storetest.NewWith(tb, store.Options{Synchronous: store.SyncNormal})
	s, err := New(context.Background(), Opts{DB: db})
	if err != nil {
		tb.Fatal(err)
	}
	owner := identityEvent("00000000-0000-4000-8000-00000000000a", string(TypeUserUpserted), fuzzOwner,
		`{"UserId":"`+fuzzOwner+`","Type":"Agent","CompanyId":"dddddddd-0000-4000-8000-000000000001","Status":"Active","Name":{"FirstName":"Olga","LastName":"Agent"},"PhoneNumber":"+79990001111","RegisteredVia":"Sms","Version":1}`)
	err = db.Tx(context.Background(), func(tx *sql.Tx) error {
		return s.handle(context.Background(), tx, queue.Record{Topic: TopicIdentityUsers, Key: fuzzOwner, Value: owner, Attempt: 1})
	})
	if err != nil {
		tb.Fatalf("owner replica: %v", err)
	}
	if _, err := s.CreateLink(context.Background(), NewLink{URL: "agent-link", OwnerUserID: fuzzOwner, TenantID: fuzzTenant, Channel: "web"}); err != nil {
		tb.Fatal(err)
	}
	return s
}

func identityEvent(messageID, typ, aggregate, payload string) []byte {
	return []byte(`{"messageId":"` + messageID + `","type":"` + typ + `","contractVersion":1,"aggregateId":"` + aggregate +
		`","aggregateType":"User","occurredAt":"2026-01-15T12:00:00Z","correlationId":"corr-1","payload":` + payload + `}`)
}

// errRollback ends a fuzz run's transaction: every run starts from the same
// database.
var errRollback = errors.New("roll back the fuzz run")

var canonicalGUID = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// FuzzIdentityEvent hands any record value to the consumers' handler, in a
// transaction that is then rolled back. A record is applied, dead-lettered at
// once as a bad payload, or waits for its link owner's replica — never a
// panic and never a storage error, which would retry it for an hour and a
// half while later events of its user wait. What decodes keeps the
// contract's invariants.
func FuzzIdentityEvent(f *testing.F) {
	upsert := func(id, payload string) []byte {
		return identityEvent(id, string(TypeUserUpserted), fuzzUser, payload)
	}
	for _, v := range [][]byte{
		upsert("m-1", `{"UserId":"`+fuzzUser+`","Type":"Investor","Status":"Active","Name":{"FirstName":"Ivan","LastName":"Petrov","MiddleName":"I"},"PhoneNumber":"+79991234567","RegisteredVia":"Sms","ReferrerUrl":"Agent-Link","Version":1}`),
		upsert("m-2", `{"UserId":"`+fuzzUser+`","Type":"Agent","CompanyId":"","Status":"Blocked","Name":null,"PhoneNumber":"","RegisteredVia":"Email","ReferrerUrl":"agent-link","Version":2}`),
		upsert("m-3", `{"UserId":"`+fuzzUser+`","Type":"Developer","Status":"Active","Name":{"FirstName":" "},"PhoneNumber":"8 (999) 000-11-22","RegisteredVia":"Sms","ReferrerUrl":"no-such-link","Version":1}`),
		upsert("m-4", `{"UserId":"`+fuzzUser+`","Type":"Investor","Status":"Active","PhoneNumber":"+7","ReferrerUrl":"<script>","Version":1}`),
		upsert("m-5", `{"UserId":"`+fuzzOwner+`","Type":"Investor","Status":"Active","ReferrerUrl":"agent-link","Version":9}`),
		upsert("m-6", `{"UserId":"00000000-0000-0000-0000-000000000000","Version":1}`),
		upsert("m-7", `{"UserId":"`+strings.ToUpper(fuzzUser)+`","Version":0}`),
		upsert("m-8", `{"UserId":"`+fuzzUser+`","CompanyId":"not-a-guid","Version":1}`),
		upsert("m-9", `[]`),
		upsert("", `{"UserId":"`+fuzzUser+`","Version":1}`),
		upsert(strings.Repeat("x", 201), `{"UserId":"`+fuzzUser+`","Version":1}`),
		upsert("m-10", `null`),
		identityEvent("m-11", string(TypeUserBlocked), fuzzUser, `{"UserId":"`+fuzzUser+`","Reason":"fraud","Version":3}`),
		identityEvent("m-12", string(TypeUserBlocked), fuzzOwner, `{"UserId":"`+fuzzOwner+`","Reason":"","Version":2}`),
		identityEvent("m-13", "pin.identity.user-deleted", fuzzUser, `{"UserId":"`+fuzzUser+`"}`),
		identityEvent("m-14", string(TypeUserUpserted), fuzzOwner, `{"UserId":"`+fuzzUser+`","Version":1}`),
		[]byte(`{"messageId":"m-15","type":"pin.identity.user-upserted","occurredAt":"yesterday","payload":{}}`),
		[]byte(`not json`),
		[]byte(``),
	} {
		f.Add(v)
	}
	s := fuzzService(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, value []byte) {
		var handled error
		err := s.db.Tx(ctx, func(tx *sql.Tx) error {
			handled = s.handle(ctx, tx, queue.Record{Topic: TopicIdentityUsers, Key: fuzzUser, Value: value, Attempt: 1})
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatalf("the handler's transaction: %v", err)
		}
		if handled != nil && !errors.Is(handled, ErrBadPayload) && !errors.Is(handled, ErrOwnerReplicaMissing) {
			t.Fatalf("the handler failed with neither a bad payload nor a missing owner, so the record would be retried: %v", handled)
		}
		if errors.Is(handled, ErrBadPayload) && !strings.HasPrefix(handled.Error(), "permanent: ") {
			t.Fatalf("a bad payload is not dead-lettered at once: %v", handled)
		}

		env, err := parseEnvelope(value)
		if err != nil {
			if !errors.Is(handled, ErrBadPayload) {
				t.Fatalf("an envelope that does not decode was handled with %v", handled)
			}
			return
		}
		switch env.Type {
		case TypeUserUpserted:
			ev, err := parseUserUpserted(env)
			if err != nil {
				if !errors.Is(err, ErrBadPayload) || !errors.Is(handled, ErrBadPayload) {
					t.Fatalf("parse %v, handled %v", err, handled)
				}
				return
			}
			checkMeta(t, ev.meta)
			checkUserID(t, ev.UserID)
			if ev.Version < 1 || (ev.CompanyID != nil && !canonicalGUID.MatchString(*ev.CompanyID)) {
				t.Fatalf("version %d company %v", ev.Version, ev.CompanyID)
			}
			// The log shows the phone as mask.Phone writes it: its last four
			// digits, and the first when it has a leading "+", nothing more.
			if m, d := mask.Phone(ev.PhoneNumber), digitsOf(ev.PhoneNumber); len(d) >= 7 &&
				digitsOf(m) != d[len(d)-4:] && digitsOf(m) != d[:1]+d[len(d)-4:] {
				t.Fatalf("the masked phone %q shows more of the number %q than its last four digits", m, ev.PhoneNumber)
			}
		case TypeUserBlocked:
			ev, err := parseUserBlocked(env)
			if err != nil {
				if !errors.Is(err, ErrBadPayload) || !errors.Is(handled, ErrBadPayload) {
					t.Fatalf("parse %v, handled %v", err, handled)
				}
				return
			}
			checkMeta(t, ev.meta)
			checkUserID(t, ev.UserID)
			if ev.Version < 1 {
				t.Fatalf("version %d", ev.Version)
			}
		default:
			if handled != nil {
				t.Fatalf("an event of another type (%q) is not ignored: %v", env.Type, handled)
			}
		}
	})
}

func checkMeta(t *testing.T, m meta) {
	t.Helper()
	if strings.TrimSpace(m.MessageID) == "" || len(m.MessageID) > maxMessageIDLength || m.OccurredAt.IsZero() ||
		len(m.CorrelationID) > correlationIDMaxLength {
		t.Fatalf("meta %+v breaks the envelope's limits", m)
	}
}

func checkUserID(t *testing.T, id UserID) {
	t.Helper()
	if !canonicalGUID.MatchString(string(id)) || uuid.MustParse(string(id)) == uuid.Nil {
		t.Fatalf("user id %q is not a canonical non-empty GUID", id)
	}
}

func digitsOf(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

var slugRule = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{2,63}$`)

// FuzzNormalizeSlug: a ReferrerUrl from a cookie is a slug only when it is
// one ignoring ASCII case; the slug is then the input with its ASCII letters
// lower-cased, at most 64 bytes, and normalising it again changes nothing.
func FuzzNormalizeSlug(f *testing.F) {
	for _, s := range []string{
		"agent-link", "Agent-Link", "AGENT", "ab", "abc", "-abc", "a--", "0-0", strings.Repeat("a", 64), strings.Repeat("a", 65),
		"agent_link", "agent link", " agent-link", "agent-link\n", "агент", "\u212Aelvin", "ǅabc", "İstanbul", "%61gent", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		slug, ok := NormalizeSlug(raw)
		if ok != slugRule.MatchString(slug) {
			t.Fatalf("NormalizeSlug(%q) = %q, %v; the rule says %v", raw, slug, ok, !ok)
		}
		lower := asciiLower(raw)
		if ok != slugRule.MatchString(lower) {
			t.Fatalf("NormalizeSlug(%q) = %v, but %q is %v by the rule", raw, ok, lower, !ok)
		}
		if !ok {
			return
		}
		if slug != lower || len(slug) > 64 || !strings.EqualFold(slug, raw) {
			t.Fatalf("NormalizeSlug(%q) = %q: not the input with its ASCII letters lower-cased", raw, slug)
		}
		if again, ok := NormalizeSlug(slug); !ok || again != slug {
			t.Fatalf("NormalizeSlug(%q) = %q, %v: not idempotent", slug, again, ok)
		}
	})
}

// asciiLower lower-cases the ASCII letters of s and leaves every other byte.
func asciiLower(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// FuzzCreateLinkBody posts any body to POST /admin/api/referral/links:
// never a 5xx; a 4xx is a JSON error and changes nothing; a 201 is a live
// link whose URL is the body's url normalised.
func FuzzCreateLinkBody(f *testing.F) {
	for _, s := range []string{
		`{"url":"New-Link","ownerUserId":"` + fuzzOwner + `","tenantId":"` + fuzzTenant + `","channel":"telegram"}`,
		`{"url":"agent-link","ownerUserId":"` + fuzzOwner + `","tenantId":"` + fuzzTenant + `","channel":"web"}`,
		`{"url":"x","ownerUserId":"` + fuzzOwner + `","tenantId":"` + fuzzTenant + `","channel":"web"}`,
		`{"url":"okay-link","ownerUserId":"00000000-0000-0000-0000-000000000000","tenantId":"` + fuzzTenant + `","channel":"web"}`,
		`{"url":"okay-link","ownerUserId":"` + fuzzOwner + `","tenantId":"tenant","channel":"web"}`,
		`{"url":"okay-link","ownerUserId":"` + fuzzOwner + `","tenantId":"` + fuzzTenant + `","channel":"   "}`,
		`{"url":"okay-link","ownerUserId":"` + fuzzOwner + `","tenantId":"` + fuzzTenant + `","channel":"` + strings.Repeat("c", 65) + `"}`,
		`{"url":"okay-link","ownerUserId":"` + strings.ToUpper(fuzzOwner) + `","tenantId":"{` + fuzzTenant + `}","channel":"web"}`,
		`{"url":1}`,
		`{"url":"okay-link","extra":1}`,
		`{}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	s := fuzzService(f)
	h := mux.NewRouter()
	h.NotFoundHandler = httpjson.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return httpjson.NotFound("no such route") })
	s.AdminRoutes(h.PathPrefix("/admin/api").Subrouter())
	// A refusal must commit nothing: the watch's version changes exactly
	// when a commit changed the database.
	watch := storetest.WatchCommits(f, s.db)
	f.Fuzz(func(t *testing.T, body []byte) {
		before := watch.Version(t)
		req := httptest.NewRequest(http.MethodPost, "/admin/api/referral/links", bytes.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case httpjsontest.CheckRefusal(t, "a link body", rec):
			if after := watch.Version(t); after != before {
				t.Fatalf("refused with %d %s but changed the database", rec.Code, rec.Body)
			}
			return
		case rec.Code != http.StatusCreated:
			t.Fatalf("answered %d %s, want 201 or a 4xx", rec.Code, rec.Body)
		}
		var in struct {
			URL string `json:"url"`
		}
		var out struct {
			ID LinkID `json:"id"`
		}
		if json.Unmarshal(body, &in) != nil || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
			t.Fatalf("201 for %s: %s", body, rec.Body)
		}
		want, _ := NormalizeSlug(in.URL)
		var url string
		if err := s.db.Read.QueryRow(`select url from referral_links where id = ? and deleted_at is null`, string(out.ID)).Scan(&url); err != nil || url != want {
			t.Fatalf("link %s: url %q (%v), want %q", out.ID, url, err, want)
		}
		// Free the slug again, so the next run can take it.
		if err := s.DeleteLink(context.Background(), out.ID); err != nil {
			t.Fatal(err)
		}
	})
}
