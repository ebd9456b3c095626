package retention_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/bot/backend"
	"switchyard/bot/onboarding"
	"switchyard/omni"
	"switchyard/queue"
	"switchyard/referral"
	"switchyard/retention"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

const day = 24 * time.Hour

// bundle is a migrated database with the owners of every pruned table and
// the rules the process wires (cli/wire.go wireRetention), each prune wrapped
// to check that no batch goes beyond its limit.
type bundle struct {
	db    *store.DB
	clock *store.ManualClock
	qa    *queue.Admin
	rules []retention.Rule
	// over counts batches that deleted more than their limit.
	over atomic.Int64
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db, clock := storetest.NewWithClock(t)
	b := &bundle{db: db, clock: clock, qa: queue.NewAdmin(queue.AdminOpts{DB: db, LeaveRecords: true})}
	ref, err := referral.New(t.Context(), referral.Opts{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	chat := omni.NewAdmin(omni.AdminOpts{DB: db})
	outbox := backend.NewOutbox(backend.OutboxOpts{DB: db})
	withDB := func(f func(context.Context, *store.DB, time.Time, int) (int64, error)) retention.PruneFunc {
		return func(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
			return f(ctx, db, cutoff, limit)
		}
	}
	rule := func(name string, keep time.Duration, table string, f retention.PruneFunc) retention.Rule {
		checked := func(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
			n, err := f(ctx, cutoff, limit)
			if n > int64(limit) {
				b.over.Add(1)
			}
			return n, err
		}
		return retention.Rule{Name: name, Option: "--retention-" + name, Keep: keep, Parts: []retention.Part{{Table: table, Prune: checked}}}
	}
	b.rules = []retention.Rule{
		rule("webhook-ledger", 7*day, "omni_inbound_events", chat.PruneInboundLedger),
		rule("dead-letters", 30*day, "queue_dead", b.qa.PruneDeadLetters),
		rule("outbox", 7*day, "bot_event_outbox", outbox.PruneProcessed),
		rule("referral-marks", 30*day, "referral_processed_messages", ref.PruneMarks),
		rule("topic-records", 7*day, "queue_topic_log", b.qa.PruneTopicRecords),
		rule("bot-updates", 7*day, "bot_updates", withDB(onboarding.PruneUpdates)),
		rule("deliveries", 30*day, "bot_deliveries", withDB(onboarding.PruneDeliveries)),
		rule("chat-messages", 90*day, "omni_messages", chat.PruneMessages),
		rule("queue-keys", 7*day, "queue_keys", b.qa.PruneKeys),
		rule("queue-failures", 7*day, "queue_failures", b.qa.PruneFailures),
	}
	return b
}

func (b *bundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if err := b.db.Tx(t.Context(), func(tx *sql.Tx) error {
		_, err := tx.ExecContext(t.Context(), q, args...)
		return err
	}); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// keys lists the first column of q's rows, as text, in order.
func (b *bundle) keys(t *testing.T, q string) []string {
	t.Helper()
	rows, err := b.db.Read.QueryContext(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v any
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		if bs, ok := v.([]byte); ok {
			v = string(bs)
		}
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// ago is the store time d before the clock's now.
func (b *bundle) ago(d time.Duration) store.Timestamp { return store.TS(b.db.Now().Add(-d)) }

// seed writes, for every rule, rows on both sides of its setting and rows
// that must stay whatever their age. The names say which: "old" rows go,
// every other stays.
func (b *bundle) seed(t *testing.T) {
	t.Helper()
	for _, r := range []struct {
		key string
		age time.Duration
	}{{"old", 8 * day}, {"new", 6 * day}} {
		b.exec(t, `insert into omni_inbound_events (idempotency_key, event_type, outcome, occurred_at, received_at, applied_at)
			values (?, 'message', 'applied', ?, ?, ?)`, r.key, b.ago(r.age), b.ago(r.age), b.ago(r.age))
	}
	for _, r := range []struct {
		id  string
		age time.Duration
	}{{"old", 31 * day}, {"new", 29 * day}} {
		b.exec(t, `insert into queue_dead (id, queue, grp, key, order_key, seq, priority, body, attempts, last_error, created_at, first_failed_at, dead_at)
			values (?, 'q', '', '', '', 0, 0, ?, 1, 'e', ?, ?, ?)`, r.id, []byte("{}"), b.ago(r.age), b.ago(r.age), b.ago(r.age))
	}
	for _, r := range []struct {
		key string
		age time.Duration
	}{{"old", 8 * day}, {"new", 6 * day}} {
		b.exec(t, `insert into queue_keys (queue, key, message_id, created_at) values ('q', ?, ?, ?)`, r.key, "m_"+r.key, b.ago(r.age))
		b.exec(t, `insert into queue_failures (queue, grp, message_id, attempt, error, outcome, failed_at) values ('q', '', ?, 1, 'e', 'retry', ?)`,
			r.key, b.ago(r.age))
	}
	// Outbox: acknowledged long ago (goes), acknowledged lately, never
	// acknowledged, and a registered event dead-lettered (the spec keeps it).
	for _, r := range []struct {
		uid         int
		processed   any
		deadLetters any
	}{{1, b.ago(8 * day), nil}, {2, b.ago(6 * day), nil}, {3, nil, nil}, {4, nil, b.ago(60 * day)}} {
		b.exec(t, `insert into bot_event_outbox (event_type, magnet_uid, payload, created_at, processed_at, user_key, dead_lettered_at)
			values ('registered', ?, '{}', ?, ?, ?, ?)`, r.uid, b.ago(60*day), r.processed, fmt.Sprintf("uid:%020d", r.uid), r.deadLetters)
	}
	// Referral marks: a forgettable one old (goes) and new; an old G1 of a
	// user never bound, which a link created later could still bind.
	for _, r := range []struct {
		mark, outcome string
		age           time.Duration
	}{{"old", "R1", 31 * day}, {"new", "R1", 29 * day}, {"old-g1", "G1", 31 * day}} {
		b.exec(t, `insert into referral_processed_messages (mark, user_id, outcome, processed_at) values (?, 'u', ?, ?)`,
			r.mark, r.outcome, b.ago(r.age))
	}
	// Bot updates: done and failed long ago (go), done lately, pending long ago.
	for _, r := range []struct {
		id     int
		status string
		done   any
	}{{1, "done", b.ago(8 * day)}, {2, "failed", b.ago(8 * day)}, {3, "done", b.ago(6 * day)}, {4, "pending", nil}} {
		b.exec(t, `insert into bot_updates (bot_id, update_id, chat_id, kind, payload, status, next_attempt_at, received_at, done_at)
			values (1, ?, '1', 'message', '{}', ?, ?, ?, ?)`, r.id, r.status, b.ago(60*day), b.ago(60*day), r.done)
	}
	for _, r := range []struct {
		key string
		age time.Duration
	}{{"old", 31 * day}, {"new", 29 * day}} {
		b.exec(t, `insert into bot_deliveries (dm_key, method, chat_id, text, outcome, attempts, delivered_at)
			values (?, 'sendMessage', '1', 'hi', 'sent', 1, ?)`, r.key, b.ago(r.age))
	}
	// Chat history: one thread; old finished messages go, except the
	// thread's newest inbound one; an old message still queued stays.
	b.exec(t, `insert into omni_contacts (id, provider, provider_user_id, created_at, updated_at) values (1, 'telegram', '1', ?, ?)`, b.ago(0), b.ago(0))
	b.exec(t, `insert into omni_threads (id, contact_id, channel, bot_id, chat_id, state, created_at, updated_at)
		values (1, 1, 'telegram_bot', '1', '1', 'open', ?, ?)`, b.ago(0), b.ago(0))
	for _, m := range []struct {
		seq            int
		dir, status    string
		age            time.Duration
		expectedToStay bool
	}{
		{1, "inbound", "received", 100 * day, false},
		{2, "outbound", "sent", 100 * day, false},
		{3, "outbound", "queued", 100 * day, true},
		{4, "inbound", "received", 100 * day, true}, // the newest inbound
		{5, "outbound", "sent", 80 * day, true},
	} {
		b.exec(t, `insert into omni_messages (thread_id, seq, direction, origin, kind, text, status, created_at, updated_at)
			values (1, ?, ?, 'provider', 'text', ?, ?, ?, ?)`, m.seq, m.dir, fmt.Sprint(m.expectedToStay), m.status, b.ago(m.age), b.ago(m.age))
	}
}

func TestRules(t *testing.T) {
	t.Parallel()

	t.Run("each rule removes its old finished rows and nothing newer or unfinished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t)
		r := retention.New(retention.Opts{DB: b.db, Rules: b.rules, BatchSize: 1})
		results, err := r.Pass(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for q, want := range map[string][]string{
			`select idempotency_key from omni_inbound_events order by 1`:                 {"new"},
			`select id from queue_dead order by 1`:                                       {"new"},
			`select magnet_uid from bot_event_outbox order by 1`:                         {"2", "3", "4"},
			`select mark from referral_processed_messages order by 1`:                    {"new", "old-g1"},
			`select update_id from bot_updates order by 1`:                               {"3", "4"},
			`select dm_key from bot_deliveries order by 1`:                               {"new"},
			`select seq from omni_messages order by seq`:                                 {"3", "4", "5"},
			`select count(*) from omni_messages where text = 'false'`:                    {"0"},
			`select count(*) from omni_threads where last_message_at is null and id = 1`: {"1"},
			`select key from queue_keys order by 1`:                                      {"new"},
			`select message_id from queue_failures order by 1`:                           {"new"},
		} {
			if got := b.keys(t, q); !slices.Equal(got, want) {
				t.Errorf("%s = %v, want %v", q, got, want)
			}
		}
		removed := map[string]int64{}
		for _, res := range results {
			removed[res.Rule] = res.Rows
			if res.Rule != "free-pages" && res.Batches != int(res.Rows)+1 {
				t.Errorf("%s: %d rows in %d batches of 1, want one batch per row and a last empty one", res.Rule, res.Rows, res.Batches)
			}
		}
		want := map[string]int64{"webhook-ledger": 1, "dead-letters": 1, "outbox": 1, "referral-marks": 1, "topic-records": 0,
			"bot-updates": 2, "deliveries": 1, "chat-messages": 2, "queue-keys": 1, "queue-failures": 1}
		for rule, n := range want {
			if removed[rule] != n {
				t.Errorf("rule %s removed %d rows, want %d (results %+v)", rule, removed[rule], n, results)
			}
		}
		if n := b.over.Load(); n > 0 {
			t.Errorf("%d batches deleted more rows than their limit", n)
		}
	})

	t.Run("topic records go once every group has passed them, and a group created later starts at the first kept", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		topic, err := queue.NewTopic(t.Context(), queue.TopicOpts{DB: b.db, Name: "retention.t", Partitions: 2, Retention: 365 * day})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topic.CreateGroup(t.Context(), "slow", queue.StartEarliest); err != nil {
			t.Fatal(err)
		}
		if _, err := topic.CreateGroup(t.Context(), "fast", queue.StartEarliest); err != nil {
			t.Fatal(err)
		}
		var perPartition [2]int64
		for i := range 40 {
			pos, err := topic.Publish(t.Context(), fmt.Sprintf("k%d", i), []byte("v"))
			if err != nil {
				t.Fatal(err)
			}
			perPartition[pos.Partition]++
		}
		b.clock.Advance(8 * day)
		for i := range 4 {
			if _, err := topic.Publish(t.Context(), fmt.Sprintf("k%d", i), []byte("new")); err != nil {
				t.Fatal(err)
			}
		}
		// fast has finished everything; slow has finished 5 records of
		// partition 0 and none of partition 1.
		ends := map[int]int64{}
		for p := range 2 {
			ends[p] = perPartition[p] + 4 // at most: the 4 new ones
		}
		if err := topic.SeekGroup(t.Context(), "fast", ends); err != nil {
			t.Fatal(err)
		}
		if err := topic.SeekGroup(t.Context(), "slow", map[int]int64{0: 5, 1: 0}); err != nil {
			t.Fatal(err)
		}
		rules := slices.DeleteFunc(slices.Clone(b.rules), func(r retention.Rule) bool { return r.Name != "topic-records" })
		r := retention.New(retention.Opts{DB: b.db, Rules: rules, BatchSize: 2})
		if _, err := r.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		p0, p1 := 0, 1
		recs0, _ := topic.Read(t.Context(), queue.ReadFilter{Partition: &p0})
		recs1, _ := topic.Read(t.Context(), queue.ReadFilter{Partition: &p1})
		if len(recs0) == 0 || recs0[0].Offset != 5 || int64(len(recs1)) != ends[1]-4+countNew(recs1) {
			t.Fatalf("kept partition 0 from offset %v (%d records), partition 1 %d records; want partition 0 from 5 (what slow has not finished) and all of partition 1",
				firstOffset(recs0), len(recs0), len(recs1))
		}
		// Once slow has finished everything, the old records go, the new stay.
		if err := topic.SeekGroup(t.Context(), "slow", ends); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		all, _ := topic.Read(t.Context(), queue.ReadFilter{})
		if len(all) != 4 || countNew(all) != 4 {
			t.Fatalf("kept %d records (%d new), want only the 4 published within the retention", len(all), countNew(all))
		}
		if n := b.over.Load(); n > 0 {
			t.Errorf("%d batches deleted more rows than their limit", n)
		}
		if _, err := topic.CreateGroup(t.Context(), "late", queue.StartEarliest); err != nil {
			t.Fatal(err)
		}
		groups, err := topic.Groups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range groups {
			if g.Group != "late" {
				continue
			}
			for _, gp := range g.Partitions {
				first := ends[gp.Partition]
				for _, rec := range all {
					if rec.Partition == gp.Partition {
						first = min(first, rec.Offset)
					}
				}
				if gp.Committed != first {
					t.Errorf("late group starts partition %d at %d, want the first kept offset %d", gp.Partition, gp.Committed, first)
				}
			}
		}
	})

	t.Run("a rule set to 0 keeps its rows for ever", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t)
		rules := slices.Clone(b.rules)
		for i := range rules {
			rules[i].Keep = 0
		}
		results, err := retention.New(retention.Opts{DB: b.db, Rules: rules}).Pass(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, res := range results {
			if res.Rule != "free-pages" {
				t.Errorf("rule %s ran while off: %+v", res.Rule, res)
			}
		}
		if got := b.keys(t, `select count(*) from omni_inbound_events`); got[0] != "2" {
			t.Errorf("ledger rows = %v, want both", got)
		}
	})

	t.Run("the last pass of each rule is kept for every process's console", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.seed(t)
		if _, err := retention.New(retention.Opts{DB: b.db, Rules: b.rules}).Pass(t.Context()); err != nil {
			t.Fatal(err)
		}
		// Another process, which never pruned, reads it.
		st, err := retention.New(retention.Opts{DB: b.db, Rules: b.rules}).Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.Space.DatabaseBytes <= 0 || len(st.Rules) != len(b.rules) {
			t.Fatalf("status = %+v", st)
		}
		for _, rs := range st.Rules {
			if rs.Last == nil || !rs.Last.At.Equal(b.db.Now()) || rs.Last.Error != "" {
				t.Fatalf("rule %s: last = %+v, want the pass just run", rs.Name, rs.Last)
			}
			if rs.Name == "bot-updates" && rs.Last.Rows != 2 {
				t.Errorf("bot-updates last removed %d rows, want 2", rs.Last.Rows)
			}
		}
	})
}

func countNew(recs []queue.Record) int64 {
	var n int64
	for _, r := range recs {
		if string(r.Value) == "new" {
			n++
		}
	}
	return n
}

func firstOffset(recs []queue.Record) any {
	if len(recs) == 0 {
		return "none"
	}
	return recs[0].Offset
}

// TestRun checks the worker: one process of the database prunes at a time,
// and a second one takes over when the first stops.
func TestRun(t *testing.T) {
	t.Parallel()
	db := storetest.New(t)
	var (
		inFlight, most, passes atomic.Int64
		mu                     sync.Mutex
		by                     = map[string]int{}
	)
	rule := func(who string) []retention.Rule {
		return []retention.Rule{{Name: "probe", Keep: time.Hour, Parts: []retention.Part{{Table: "none", Prune: func(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			passes.Add(1)
			mu.Lock()
			by[who]++
			mu.Unlock()
			return 0, nil
		}}}}}
	}
	run := func(who string) (stop func()) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		r := retention.New(retention.Opts{DB: db, Rules: rule(who), Interval: 10 * time.Millisecond, LeaseTTL: 2 * time.Second})
		go func() { done <- r.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run of %s: %v", who, err)
			}
		}
	}
	stopA := run("a")
	testwait.Until(t, 30*time.Second, "the first runner prunes", func() bool { return passes.Load() >= 5 })
	stopB := run("b")
	defer stopB()
	start := passes.Load()
	testwait.Until(t, 30*time.Second, "more passes with both running", func() bool { return passes.Load() >= start+20 })
	stopA()
	testwait.Until(t, 30*time.Second, "the second runner takes over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return by["b"] >= 5
	})
	if m := most.Load(); m != 1 {
		t.Fatalf("%d prunes ran at once; want one process at a time", m)
	}
	mu.Lock()
	defer mu.Unlock()
	if by["a"] < 5 {
		t.Fatalf("passes by runner: %v", by)
	}
}
