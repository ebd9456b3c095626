package backend

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"switchyard/bot/contract"
	"switchyard/bot/onboarding"
	"switchyard/store/storetest"
)

// benchBackend is a Service on the system clock at synchronous=FULL, served
// over real HTTP, and a minimal client for it.
func benchBackend(b *testing.B) (*Service, *onboarding.BackendClient) {
	b.Helper()
	db := storetest.New(b)
	be := New(Opts{DB: db, Secret: backendTestSecret})
	r := mux.NewRouter()
	be.Routes(r)
	srv := httptest.NewServer(r)
	b.Cleanup(srv.Close)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	return be, onboarding.NewBackendClient(srv.URL, backendTestSecret, hc)
}

// seed emits n events spread over users (uids 1..users), 1,000 per transaction.
func seed(b *testing.B, o *Outbox, n, users int) {
	b.Helper()
	ctx := context.Background()
	for done := 0; done < n; {
		chunk := min(1000, n-done)
		err := o.Tx(ctx, func(tx *sql.Tx) error {
			for i := range chunk {
				uid := contract.UID((done+i)%users + 1)
				if _, err := o.EmitStatusNftActivatedTx(ctx, tx, Target{MagnetUID: uid}, contract.StatusNftActivatedPayload{Level: contract.NftLP1}); err != nil {
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

// drainFunc fetches up to limit events and acks them all processed; it
// returns how many it acked.
type drainFunc func(ctx context.Context, limit int) (int, error)

func directDrain(o *Outbox) drainFunc {
	return func(ctx context.Context, limit int) (int, error) {
		events, err := o.Pending(ctx, limit)
		if err != nil || len(events) == 0 {
			return 0, err
		}
		_, err = o.Ack(ctx, contract.AckRequest{ProcessedIDs: eventIDs(events)})
		return len(events), err
	}
}

func httpDrain(c *onboarding.BackendClient) drainFunc {
	return func(ctx context.Context, limit int) (int, error) {
		events, err := c.Pending(ctx, limit, 0)
		if err != nil || len(events) == 0 {
			return 0, err
		}
		_, err = c.Ack(ctx, contract.AckRequest{ProcessedIDs: eventIDs(events)})
		return len(events), err
	}
}

// BenchmarkPendingAckCycle is one pending + ack of 100 events: called
// directly (the baseline without HTTP) and through the HTTP contract.
func BenchmarkPendingAckCycle(b *testing.B) {
	for _, via := range []string{"direct", "http"} {
		b.Run(via, func(b *testing.B) {
			be, c := benchBackend(b)
			drain := directDrain(be.Outbox())
			if via == "http" {
				drain = httpDrain(c)
			}
			ctx := context.Background()
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				seed(b, be.Outbox(), 100, 10)
				b.StartTimer()
				start := time.Now()
				n, err := drain(ctx, 100)
				elapsed += time.Since(start)
				if err != nil || n != 100 {
					b.Fatalf("drained %d, %v", n, err)
				}
			}
			b.ReportMetric(float64(b.N*100)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkDrain10k drains 10,000 pending events (1,000 users) by a minimal
// client looping pending + ack: directly (the baseline without HTTP), and
// over HTTP with the spec's batch of 100 and with the cap of 500.
func BenchmarkDrain10k(b *testing.B) {
	const total = 10_000
	cases := []struct {
		name  string
		http  bool
		limit int
	}{
		{"direct-limit500", false, 500},
		{"http-limit100", true, 100},
		{"http-limit500", true, 500},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			be, c := benchBackend(b)
			drain := directDrain(be.Outbox())
			if tc.http {
				drain = httpDrain(c)
			}
			ctx := context.Background()
			var elapsed time.Duration
			for b.Loop() {
				b.StopTimer()
				seed(b, be.Outbox(), total, 1000)
				b.StartTimer()
				start := time.Now()
				got := 0
				for got < total {
					n, err := drain(ctx, tc.limit)
					if err != nil {
						b.Fatal(err)
					}
					if n == 0 {
						b.Fatalf("drained %d of %d, then nothing", got, total)
					}
					got += n
				}
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(b.N*total)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkEmitToConsumer measures the time from an emit's call to a
// long-polling HTTP consumer holding the event (and acking it), one event in
// flight at a time.
func BenchmarkEmitToConsumer(b *testing.B) {
	be, c := benchBackend(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan contract.EventID, 1)
	go func() {
		for ctx.Err() == nil {
			events, err := c.Pending(ctx, 100, 30*time.Second)
			if err != nil {
				continue
			}
			ids := eventIDs(events)
			if _, err := c.Ack(ctx, contract.AckRequest{ProcessedIDs: ids}); err != nil {
				continue
			}
			for _, id := range ids {
				seen <- id
			}
		}
	}()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		id, err := be.Outbox().EmitRegistered(ctx, Target{MagnetUID: 1}, contract.RegisteredPayload{})
		if err != nil {
			b.Fatal(err)
		}
		if got := <-seen; got != id {
			b.Fatalf("consumer saw %d, want %d", got, id)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
