package referral

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// BenchmarkUpserts10k measures the referral consumer on 10,000
// user-upserted events, half of them registrations through a valid link of
// one of 100 active agents, at synchronous=FULL:
//
//   - "bare consumer (baseline)": the same 10,000 records through a consumer
//     group whose handler does nothing, in the same run;
//   - "drain": the events published first, then consumed; events/s;
//   - "live at 2000 per s", "live at 5000 per s": published at that rate
//     while the consumer runs; registration (publish) → bond committed, p50
//     and p99 (the goal at 5,000/s: p99 < 500 ms).
//
// Run: go test -run '^$' -bench Upserts10k -benchtime=1x -count 3 ./referral/
func BenchmarkUpserts10k(b *testing.B) {
	const events = 10_000
	// baselines[i] is the bare consumer's rate of the i-th run (-count):
	// the i-th drain is compared with it.
	var baselines []float64
	drains := 0
	b.Run("bare consumer (baseline)", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
			topic, err := queue.NewTopic(context.Background(), queue.TopicOpts{DB: db, Name: TopicIdentityUsers, Partitions: IdentityPartitions})
			if err != nil {
				b.Fatal(err)
			}
			values := benchStream(events, nil, time.Time{})
			benchPublish(b, db, topic, values)
			done := make(chan struct{})
			var n int
			b.StartTimer()
			start := time.Now()
			sub, err := topic.Subscribe(context.Background(), queue.SubscribeOpts{Group: "bare", Handler: func(context.Context, *sql.Tx, queue.Record) error {
				if n++; n == events {
					close(done)
				}
				return nil
			}})
			if err != nil {
				b.Fatal(err)
			}
			<-done
			took := time.Since(start)
			b.StopTimer()
			_ = sub.Stop(context.Background())
			baseline := events / took.Seconds()
			baselines = append(baselines, baseline)
			b.ReportMetric(baseline, "events/s")
		}
	})
	b.Run("drain", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			h, agents := benchHarness(b)
			values := benchStream(events, agents, time.Time{})
			benchPublish(b, h.db, h.svc.users, values)
			b.StartTimer()
			start := time.Now()
			h.start()
			waitBonds(b, h, events/2)
			h.waitIdle()
			took := time.Since(start)
			b.StopTimer()
			h.stop()
			rate := events / took.Seconds()
			b.ReportMetric(rate, "events/s")
			if drains < len(baselines) {
				b.ReportMetric(rate/baselines[drains], "x-baseline")
			}
			drains++
		}
	})
	for _, rate := range []int{2000, 5000} {
		b.Run(fmt.Sprintf("live at %d per s", rate), func(b *testing.B) { benchLive(b, events, rate) })
	}
}

// benchLive publishes events at rate per second, in a batch every 10 ms,
// while the consumer runs, and reports registration (publish) → bond
// committed, p50 and p99, the rate the batches were published at and the
// rate the events were consumed at.
func benchLive(b *testing.B, events, rate int) {
	const tick = 10 * time.Millisecond
	per := rate * int(tick) / int(time.Second)
	for range b.N {
		b.StopTimer()
		h, agents := benchHarness(b)
		h.start()
		b.StartTimer()
		start := time.Now()
		// Each event's occurredAt is its publish time. A batch does not wait
		// for the commit of the one before (each event is a new user, so
		// their order does not matter): a slow commit does not lower the
		// rate offered.
		var wg sync.WaitGroup
		for i := 0; i < events; i += per {
			due := start.Add(time.Duration(i/per) * tick)
			time.Sleep(time.Until(due))
			values := benchStream(per, agents, time.Now(), i)
			wg.Go(func() {
				if err := publishValues(h.db, h.svc.users, values); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		published := time.Since(start)
		waitBonds(b, h, events/2)
		h.waitIdle()
		took := time.Since(start)
		b.StopTimer()
		h.stop()
		lat := bondLatencies(b, h)
		b.ReportMetric(float64(events)/published.Seconds(), "published/s")
		b.ReportMetric(float64(events)/took.Seconds(), "events/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// benchHarness is a FULL-sync database with 100 active agents, their links
// and replicas, and a stopped consumer.
func benchHarness(b *testing.B) (*harness, []string) {
	h := newHarness(b, harnessOpts{Sync: store.SyncFull, Quiet: true})
	var agents, slugs []string
	var values [][]byte
	for i := range 100 {
		a := newUser()
		agents = append(agents, string(a))
		slug := fmt.Sprintf("agent-%03d", i)
		slugs = append(slugs, slug)
		h.link(slug, a)
		values = append(values, upsert(a, 1).set("Type", "Agent").json())
	}
	benchPublish(b, h.db, h.svc.users, values)
	h.waitIdle()
	h.stop()
	_ = agents
	return h, slugs
}

// benchStream makes n first snapshots of new investors; every second one
// registers through one of the slugs (none when slugs is nil). A non-zero at
// is their occurredAt.
func benchStream(n int, slugs []string, at time.Time, offset ...int) [][]byte {
	base := 0
	if len(offset) > 0 {
		base = offset[0]
	}
	values := make([][]byte, 0, n)
	for i := range n {
		e := upsert(newUser(), 1)
		if !at.IsZero() {
			e.OccurredAt = at
		}
		if slugs != nil && (base+i)%2 == 0 {
			e.referrer(slugs[(base+i)%len(slugs)])
		}
		values = append(values, e.json())
	}
	return values
}

// benchPublish publishes values in transactions of 500.
func benchPublish(b *testing.B, db *store.DB, topic *queue.Topic, values [][]byte) {
	if err := publishValues(db, topic, values); err != nil {
		b.Fatal(err)
	}
}

func publishValues(db *store.DB, topic *queue.Topic, values [][]byte) error {
	ctx := context.Background()
	for chunk := range slices.Chunk(values, 500) {
		err := db.Tx(ctx, func(tx *sql.Tx) error {
			for _, v := range chunk {
				if err := topic.PublishTx(ctx, tx, keyOf(v), v); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func keyOf(v []byte) string {
	env, _ := parseEnvelope(v)
	return env.AggregateID
}

func waitBonds(b *testing.B, h *harness, n int) {
	testwait.Until(b, 5*time.Minute, fmt.Sprintf("%d bonds", n), func() bool {
		return h.count(`select count(*) from referral_bonds`) >= n
	})
}

// bondLatencies returns, sorted, each bond's created_at minus its bound_at
// (the registration's occurredAt, set when it was published).
func bondLatencies(b *testing.B, h *harness) []time.Duration {
	rows, err := h.db.Read.Query(`select bound_at, created_at from referral_bonds`)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var out []time.Duration
	for rows.Next() {
		var bound, created store.Timestamp
		if err := rows.Scan(&bound, &created); err != nil {
			b.Fatal(err)
		}
		out = append(out, created.Sub(bound.Time))
	}
	slices.Sort(out)
	if len(out) == 0 {
		b.Fatal("no bonds")
	}
	return out
}
