package referral

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// harness is a migrated database with the referral service consuming it.
type harness struct {
	t    testing.TB
	db   *store.DB
	svc  *Service
	logs *testwait.Buffer
	stop func()
}

type harnessOpts struct {
	Retry queue.RetryPolicy
	Group string
	DB    *store.DB // reuse a database (a second group on it)
	Sync  string    // FULL for benchmarks; NORMAL otherwise
	Quiet bool      // log at info level to nowhere, as a production process would cost
}

// newHarness opens a database and runs the service on it until the test ends.
// Retries are fast unless opts say otherwise.
func newHarness(t testing.TB, opts harnessOpts) *harness {
	t.Helper()
	if opts.Retry.MaxAttempts == 0 {
		opts.Retry = queue.RetryPolicy{MaxAttempts: 1000, MinBackoff: time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	}
	if opts.Sync == "" {
		opts.Sync = store.SyncNormal
	}
	db := opts.DB
	if db == nil {
		db = storetest.NewWith(t, store.Options{Synchronous: opts.Sync})
	}
	logs := &testwait.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if opts.Quiet {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	svc, err := New(context.Background(), Opts{
		DB:     db,
		Logger: logger,
		Group:  opts.Group,
		Retry:  opts.Retry,
	})
	if err != nil {
		t.Fatalf("new service: %v", err)
	}
	h := &harness{t: t, db: db, svc: svc, logs: logs}
	h.start()
	t.Cleanup(func() { h.stop() })
	return h
}

// start runs the service; stop cancels it and waits for Run to return.
func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.svc.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("Run: %v", err)
			}
		})
	}
}

// publish appends identity events to pin.identity.users.v1 in order, keyed
// by their aggregateId.
func (h *harness) publish(values ...[]byte) {
	h.t.Helper()
	for _, v := range values {
		var env struct {
			AggregateID string `json:"aggregateId"`
		}
		_ = json.Unmarshal(v, &env)
		key := env.AggregateID
		if key == "" {
			key = "no-key"
		}
		if _, err := h.svc.users.Publish(context.Background(), key, v); err != nil {
			h.t.Fatalf("publish: %v", err)
		}
	}
}

// group returns the stats of the service's consumer group.
func (h *harness) group() queue.GroupStats {
	h.t.Helper()
	st, err := h.svc.admin.Stats(context.Background())
	if err != nil {
		h.t.Fatalf("stats: %v", err)
	}
	for _, tp := range st.Topics {
		if tp.Name != TopicIdentityUsers {
			continue
		}
		for _, g := range tp.Groups {
			if g.Group == h.svc.opts.Group {
				return g
			}
		}
	}
	return queue.GroupStats{}
}

// waitIdle waits until the group has finished every published record.
func (h *harness) waitIdle() {
	h.t.Helper()
	var last queue.GroupStats
	// Stats reads every partition of every topic: poll it gently.
	testwait.Until(h.t, 30*time.Second, "the consumer group to finish every record", func() bool {
		last = h.group()
		return len(last.Partitions) == IdentityPartitions && last.Lag == 0 && last.Retrying == 0
	})
}

// dead lists the group's dead letters.
func (h *harness) dead() []queue.DeadLetter {
	h.t.Helper()
	d, err := h.svc.admin.ListDead(context.Background(), queue.DeadFilter{Queue: TopicIdentityUsers, Group: h.svc.opts.Group, Limit: 1000})
	if err != nil {
		h.t.Fatalf("list dead: %v", err)
	}
	return d
}

// outgoing reads every retained record of an outgoing topic.
func (h *harness) outgoing(topic string) []queue.Record {
	h.t.Helper()
	var all []queue.Record
	for p := range IdentityPartitions {
		for from := int64(0); ; {
			recs, err := h.svc.admin.Read(context.Background(), topic, queue.ReadFilter{Partition: &p, FromOffset: from, Limit: 1000})
			if err != nil {
				h.t.Fatalf("read %s: %v", topic, err)
			}
			all = append(all, recs...)
			if len(recs) < 1000 {
				break
			}
			from = recs[len(recs)-1].Offset + 1
		}
	}
	return all
}

func (h *harness) count(q string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.db.Read.QueryRow(q, args...).Scan(&n); err != nil {
		h.t.Fatalf("count %q: %v", q, err)
	}
	return n
}

func (h *harness) replica(id UserID) *Replica {
	h.t.Helper()
	r, err := getReplica(context.Background(), h.db.Read, id)
	if err != nil {
		h.t.Fatalf("replica: %v", err)
	}
	return r
}

func (h *harness) link(url string, owner UserID) Link {
	h.t.Helper()
	l, err := h.svc.CreateLink(context.Background(), NewLink{URL: url, OwnerUserID: owner, TenantID: tenantOf(owner), Channel: "telegram"})
	if err != nil {
		h.t.Fatalf("create link %s: %v", url, err)
	}
	return l
}

// markOutcome is the outcome kept with a message's idempotency mark, or "".
func (h *harness) markOutcome(t MessageType, msgID string) Outcome {
	h.t.Helper()
	var o string
	err := h.db.Read.QueryRow(`select outcome from referral_processed_messages where mark = ?`, string(t)+":"+msgID).Scan(&o)
	if err != nil {
		return ""
	}
	return Outcome(o)
}

var seq atomic.Int64

// newUser returns a fresh user id.
func newUser() UserID { return UserID(uuid.NewString()) }

// tenantOf derives a stable tenant (company) id from a user id.
func tenantOf(u UserID) string { return uuid.NewSHA1(uuid.NameSpaceOID, []byte(u)).String() }

// event is an identity event under construction.
type event struct {
	MessageID       string
	Type            MessageType
	ContractVersion int
	User            UserID
	OccurredAt      time.Time
	CorrelationID   string
	Payload         map[string]any
}

var baseTime = time.Date(2026, 1, 10, 9, 0, 0, 0, time.UTC)

// upsert builds a user-upserted snapshot of an active investor.
func upsert(user UserID, version int64) *event {
	n := seq.Add(1)
	return &event{
		MessageID:       fmt.Sprintf("m-%d-%s", n, uuid.NewString()[:8]),
		Type:            TypeUserUpserted,
		ContractVersion: ContractVersion,
		User:            user,
		OccurredAt:      baseTime.Add(time.Duration(version) * time.Minute),
		CorrelationID:   fmt.Sprintf("corr-%d", n),
		Payload: map[string]any{
			"UserId":        string(user),
			"Type":          string(UserInvestor),
			"CompanyId":     nil,
			"Status":        string(StatusActive),
			"Name":          map[string]any{"FirstName": "Zinaida", "LastName": "Quorum", "MiddleName": nil},
			"PhoneNumber":   "+79991234567",
			"RegisteredVia": "Sms",
			"ReferrerUrl":   nil,
			"Version":       version,
		},
	}
}

// blocked builds a user-blocked event.
func blocked(user UserID, version int64) *event {
	n := seq.Add(1)
	return &event{
		MessageID:       fmt.Sprintf("b-%d-%s", n, uuid.NewString()[:8]),
		Type:            TypeUserBlocked,
		ContractVersion: ContractVersion,
		User:            user,
		OccurredAt:      baseTime.Add(time.Duration(version) * time.Minute),
		CorrelationID:   fmt.Sprintf("corr-%d", n),
		Payload:         map[string]any{"UserId": string(user), "Reason": "Fraud", "Version": version},
	}
}

func (e *event) set(k string, v any) *event { e.Payload[k] = v; return e }

func (e *event) referrer(url string) *event { return e.set("ReferrerUrl", url) }

func (e *event) json() []byte {
	b, err := json.Marshal(map[string]any{
		"messageId":       e.MessageID,
		"type":            e.Type,
		"contractVersion": e.ContractVersion,
		"aggregateId":     string(e.User),
		"aggregateType":   "User",
		"occurredAt":      e.OccurredAt.Format(time.RFC3339Nano),
		"correlationId":   e.CorrelationID,
		"payload":         e.Payload,
	})
	if err != nil {
		panic(err)
	}
	return b
}
