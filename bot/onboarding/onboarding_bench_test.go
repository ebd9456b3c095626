package onboarding

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/telegram/fakebot"
)

const (
	benchEvents = 10_000
	benchUsers  = 1_000
)

// benchOnboarding is a backend and an onboarding bot on one database file at
// synchronous=FULL on the system clock, talking over real HTTP, with the
// users' funnels bound already (so stage events send no prompts).
type benchOnboarding struct {
	db *store.DB
	be *backend.Service
	ob *Bot

	mu        sync.Mutex
	handledAt map[contract.EventID]time.Time
}

func newBenchOnboarding(b *testing.B) *benchOnboarding {
	b.Helper()
	db := storetest.New(b)
	be := backend.New(backend.Opts{DB: db, Secret: backendTestSecret})
	r := mux.NewRouter()
	be.Routes(r)
	srv := httptest.NewServer(r)
	b.Cleanup(srv.Close)
	b.Cleanup(be.Shutdown)
	fake := fakebot.New(fakebot.Opts{})
	fs := httptest.NewServer(fake)
	b.Cleanup(fs.Close)
	b.Cleanup(fake.Close)
	ob, err := New(Opts{
		DB: db, BackendURL: srv.URL, BackendSecret: backendTestSecret,
		TelegramToken: fakebot.Token(onboardingTestBotID), TelegramAPIURL: fs.URL,
	})
	if err != nil {
		b.Fatal(err)
	}
	bo := &benchOnboarding{db: db, be: be, ob: ob, handledAt: map[contract.EventID]time.Time{}}
	ob.afterCommit = func(processed, _ []contract.EventID) {
		now := time.Now()
		bo.mu.Lock()
		for _, id := range processed {
			if _, ok := bo.handledAt[id]; !ok {
				bo.handledAt[id] = now
			}
		}
		bo.mu.Unlock()
	}
	ctx := context.Background()
	err = db.Tx(ctx, func(tx *sql.Tx) error {
		now := store.TS(db.Now())
		for i := range benchUsers {
			if _, err := tx.ExecContext(ctx,
				`insert into bot_funnel (telegram_id, uid, stage, bind_state, created_at, updated_at) values (?, ?, 5, 'bound', ?, ?)`,
				benchTG(i), i+1, now, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return bo
}

func benchTG(i int) string { return fmt.Sprint(1_000_000 + i) }

// benchEvent is the n-th event of the benchmark: users in turn, each going
// through wallet_connected, registered and status_nft_activated.
func benchEvent(n int) backend.NewEvent {
	user := n % benchUsers
	target := backend.Target{MagnetUID: contract.UID(user + 1), TelegramID: contract.TelegramID(benchTG(user))}
	var (
		typ     contract.EventType
		payload any
	)
	switch (n / benchUsers) % 3 {
	case 0:
		typ, payload = contract.EventWalletConnected, contract.WalletConnectedPayload{Addr: "EQbench"}
	case 1:
		leader := contract.UID(1)
		typ, payload = contract.EventRegistered, contract.RegisteredPayload{LeaderUID: &leader}
	default:
		typ, payload = contract.EventStatusNftActivated, contract.StatusNftActivatedPayload{Level: contract.NftLP1}
	}
	p, _ := json.Marshal(payload)
	return backend.NewEvent{Type: typ, Target: target, Payload: p}
}

// emit writes events [from, to) in one transaction and returns their ids.
func (bo *benchOnboarding) emit(b *testing.B, from, to int) []contract.EventID {
	ctx := context.Background()
	ids := make([]contract.EventID, 0, to-from)
	err := bo.be.Outbox().Tx(ctx, func(tx *sql.Tx) error {
		ids = ids[:0] // a transaction run again (PostgreSQL) starts over
		for n := from; n < to; n++ {
			id, err := bo.be.Outbox().EmitTx(ctx, tx, benchEvent(n))
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return ids
}

func (bo *benchOnboarding) handled() int {
	bo.mu.Lock()
	defer bo.mu.Unlock()
	return len(bo.handledAt)
}

// BenchmarkOnboardingDrain10k drains 10,000 stage-advancing events (1,000
// users) end to end through HTTP pending/ack: the spec's batch of 100, the
// ledger and the handlers' funnel writes in one transaction per batch, one
// ack per batch. The baseline, in the same run, is a minimal HTTP consumer
// that acks every page without handling anything.
//
//	go test -run '^$' -bench OnboardingDrain10k -benchtime=3x ./bot/
func BenchmarkOnboardingDrain10k(b *testing.B) {
	b.Run("baseline-minimal-http-consumer", func(b *testing.B) {
		be, c := benchBackend(b)
		drain := httpDrain(c)
		ctx := context.Background()
		var elapsed time.Duration
		for b.Loop() {
			b.StopTimer()
			seed(b, be.Outbox(), benchEvents, benchUsers)
			b.StartTimer()
			start := time.Now()
			for got := 0; got < benchEvents; {
				n, err := drain(ctx, BATCH_LIMIT)
				if err != nil || n == 0 {
					b.Fatalf("drained %d, then %d, %v", got, n, err)
				}
				got += n
			}
			elapsed += time.Since(start)
		}
		b.ReportMetric(float64(b.N*benchEvents)/elapsed.Seconds(), "events/s")
	})

	b.Run("onboarding-backlog", func(b *testing.B) {
		ctx := context.Background()
		var elapsed time.Duration
		for b.Loop() {
			b.StopTimer()
			bo := newBenchOnboarding(b)
			for from := 0; from < benchEvents; from += 1000 {
				bo.emit(b, from, from+1000)
			}
			b.StartTimer()
			start := time.Now()
			if !bo.ob.poll(ctx) {
				b.Fatal("the consumer did not get the lease")
			}
			elapsed += time.Since(start)
			if n := bo.handled(); n != benchEvents {
				b.Fatalf("handled %d of %d", n, benchEvents)
			}
		}
		b.ReportMetric(float64(b.N*benchEvents)/elapsed.Seconds(), "events/s")
	})

	// live: a producer emits 25 events every 10 ms (2,500 events/s offered)
	// while the bot runs as in production (long-polling consumer, lease,
	// gocron safety net); emit→handled is from the emit call to the commit
	// of the batch that handled the event.
	b.Run("onboarding-live-2500-per-s", func(b *testing.B) {
		var lat []time.Duration
		var elapsed time.Duration
		for b.Loop() {
			b.StopTimer()
			bo := newBenchOnboarding(b)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- bo.ob.Run(ctx) }()
			b.StartTimer()
			emitted := make(map[contract.EventID]time.Time, benchEvents)
			tick := time.NewTicker(10 * time.Millisecond)
			start := time.Now()
			for from := 0; from < benchEvents; from += 25 {
				<-tick.C
				at := time.Now()
				for _, id := range bo.emit(b, from, from+25) {
					emitted[id] = at
				}
			}
			tick.Stop()
			deadline := time.Now().Add(time.Minute)
			for bo.handled() < benchEvents {
				if time.Now().After(deadline) {
					b.Fatalf("handled %d of %d within a minute", bo.handled(), benchEvents)
				}
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			var last time.Time
			bo.mu.Lock()
			for id, at := range emitted {
				h := bo.handledAt[id]
				lat = append(lat, h.Sub(at))
				if h.After(last) {
					last = h
				}
			}
			bo.mu.Unlock()
			elapsed += last.Sub(start)
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		slices.Sort(lat)
		b.ReportMetric(float64(b.N*benchEvents)/elapsed.Seconds(), "events/s")
		b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	})
}

// benchBackend is a backend on the system clock at synchronous=FULL, served
// over real HTTP, and the bot's client for it: the baseline's consumer.
func benchBackend(b *testing.B) (*backend.Service, *BackendClient) {
	b.Helper()
	db := storetest.New(b)
	be := backend.New(backend.Opts{DB: db, Secret: backendTestSecret})
	r := mux.NewRouter()
	be.Routes(r)
	srv := httptest.NewServer(r)
	b.Cleanup(srv.Close)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	return be, NewBackendClient(srv.URL, backendTestSecret, hc)
}

// seed emits n events spread over users (uids 1..users), 1,000 per transaction.
func seed(b *testing.B, o *backend.Outbox, n, users int) {
	b.Helper()
	ctx := context.Background()
	for done := 0; done < n; {
		chunk := min(1000, n-done)
		err := o.Tx(ctx, func(tx *sql.Tx) error {
			for i := range chunk {
				uid := contract.UID((done+i)%users + 1)
				if _, err := o.EmitStatusNftActivatedTx(ctx, tx, backend.Target{MagnetUID: uid}, contract.StatusNftActivatedPayload{Level: contract.NftLP1}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		done += chunk
	}
}

// httpDrain fetches up to limit events and acks them all processed, over
// HTTP; it returns how many it acked.
func httpDrain(c *BackendClient) func(ctx context.Context, limit int) (int, error) {
	return func(ctx context.Context, limit int) (int, error) {
		events, err := c.Pending(ctx, limit, 0)
		if err != nil || len(events) == 0 {
			return 0, err
		}
		_, err = c.Ack(ctx, contract.AckRequest{ProcessedIDs: eventIDs(events)})
		return len(events), err
	}
}
