package omni

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
)

// Benchmarks (not part of the normal test run):
//
//	go test -run '^$' -bench 'WebhookIngest' -benchtime 20000x ./omni/
//	go test -run '^$' -bench 'OutboundUnderLimits' -benchtime 1x ./omni/

// webhookConns is how many connections post at once, as Telegram's
// max_connections allows up to 100.
const webhookConns = 64

// ingestResult is one ingest run's figures.
type ingestResult struct {
	rate          float64 // accepted updates per second
	p50, p99, max time.Duration
}

// postConcurrently posts n distinct updates to url over conns connections
// and measures the rate and latency of the 200s. Any other answer fails b.
func postConcurrently(b *testing.B, url, secret string, n, conns int) ingestResult {
	b.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
	defer client.CloseIdleConnections()
	var next atomic.Int64
	lat := make([][]time.Duration, conns)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range conns {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				body := update(int(i), "business_message", businessMessage("bc-bench", 1000+i%500, 1000+i%500, int(i), fmt.Sprintf("message number %d from a customer", i), t0))
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(WebhookSecretHeader, secret)
				t := time.Now()
				res, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					failed.Add(1)
					continue
				}
				lat[c] = append(lat[c], time.Since(t))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d requests failed", f, n)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	return ingestResult{
		rate: float64(len(all)) / elapsed.Seconds(),
		p50:  all[len(all)/2],
		p99:  all[len(all)*99/100],
		max:  all[len(all)-1],
	}
}

func report(b *testing.B, r ingestResult) {
	b.ReportMetric(r.rate, "updates/s")
	b.ReportMetric(float64(r.p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(r.p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkWebhookIngest posts b.N updates over 64 connections at
// synchronous=FULL, first to a minimal handler that commits each request in
// its own transaction (the baseline), then to omni_inbound, whose
// concurrent enqueues share commits. It reports both and their ratio.
func BenchmarkWebhookIngest(b *testing.B) {
	var baseline ingestResult

	b.Run("baseline=commit-per-request", func(b *testing.B) {
		path := filepath.Join(b.TempDir(), "baseline.db")
		db, err := sql.Open("sqlite", "file:"+path+"?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)")
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		if _, err := db.Exec(`create table updates (id integer primary key, key text not null unique, body blob not null) strict`); err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(commitPerRequest(db, `insert into updates (key, body) values (?, ?)`))
		defer srv.Close()
		b.ResetTimer()
		baseline = postConcurrently(b, srv.URL, testSecret, b.N, webhookConns)
		report(b, baseline)
	})

	b.Run("omni-inbound", func(b *testing.B) { benchOmniInbound(b, baseline) })
}

// BenchmarkOutboundUnderLimits queues replies to 60 business chats (5 each)
// and lets the outbound role deliver them through a fake Bot API that
// enforces the same limits (30 a second per bot, 1 a second per chat) and
// answers 429 beyond them. It reports the sustained rate as a share of the
// bot's limit and the 429s received. One iteration takes about 10 s.
func BenchmarkOutboundUnderLimits(b *testing.B) {
	const chats, perChat = 60, 5
	limits := telegram.DefaultLimits()
	for range b.N {
		b.StopTimer()
		p := newPlatform(b, platformOpts{
			fake:     fakebot.Opts{Limits: &limits, MaxCalls: 100_000},
			outbound: OutboundOpts{Limits: limits},
		})
		conn := p.connect(b, 900, true)
		threads := make([]ThreadID, chats)
		for i := range threads {
			threads[i] = p.customerWrites(b, conn.ID, int64(2000+i), "hello")
		}
		var ids []MessageID
		for round := range perChat {
			for _, th := range threads {
				m, err := p.admin.Reply(context.Background(), th, fmt.Sprintf("reply %d", round))
				if err != nil {
					b.Fatal(err)
				}
				ids = append(ids, m.ID)
			}
		}
		b.StartTimer()
		var ok []fakebot.Call
		if err := p.fake.WaitUntil(ctxTimeout(b, time.Minute), func() bool {
			ok = p.sends()
			return len(ok) >= len(ids)
		}); err != nil {
			b.Fatalf("%d of %d replies delivered: %v", len(ok), len(ids), err)
		}
		b.StopTimer()
		span := ok[len(ok)-1].At.Sub(ok[0].At)
		rate := float64(len(ok)-1) / span.Seconds()
		b.ReportMetric(rate, "msgs/s")
		b.ReportMetric(100*rate/float64(limits.Bot.Rate), "%-of-limit")
		b.ReportMetric(float64(p.fake.RateLimited()), "429s")
		b.ReportMetric(0, "ns/op")
	}
}

// commitPerRequest is the baseline receiver: it stores each request's body
// with insert (key, body) in a transaction of its own.
func commitPerRequest(db *sql.DB, insert string) http.Handler {
	var seq atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tx, err := db.BeginTx(r.Context(), nil)
		if err == nil {
			_, err = tx.Exec(insert, fmt.Sprint(seq.Add(1)), body)
			if err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// benchOmniInbound posts b.N updates to omni inbound on the test database
// and reports its rate, and its ratio to baseline's when that ran.
func benchOmniInbound(b *testing.B, baseline ingestResult) {
	db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
	in := NewInbound(InboundOpts{DB: db, Token: inboxToken, WebhookSecret: testSecret})
	base := serve(b, in.Routes)
	b.ResetTimer()
	r := postConcurrently(b, base+WebhookPath, testSecret, b.N, webhookConns)
	report(b, r)
	if baseline.rate > 0 {
		b.ReportMetric(r.rate/baseline.rate, "x-baseline")
	}
	b.StopTimer()
	if n := len(flowBodies(b, db)); n < min(b.N, 1000) {
		b.Fatalf("only %d envelopes on %s after %d accepted updates", n, QueueReceiverFlow, b.N)
	}
}
