package queue_test

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// BenchmarkPG measures the queue and the topic on PostgreSQL beside River
// (github.com/riverqueue/river, the PostgreSQL job queue for Go) on the same
// server in the same run, as the baseline. Every case sends b.N messages from
// benchSenders goroutines while the consumers run, and stops the clock when
// every message has been handled and its acknowledgement committed; it
// reports msg/s and the deliveries beyond the first (dups, which must be 0:
// distinct ids are counted), and each Switchyard case its ratio to the River
// case of the same shape run just before it (x-river). -count repeats each
// case in place (three River runs, then three Switchyard runs, each ratio
// taken to the last River run), so for paired ratios on a noisy machine run
// rounds of -count 1 instead.
//
//	queue/<shape>/send=one/{river,switchyard}:   each message its own
//	    transaction: River's Insert, the queue's Send;
//	queue/<shape>/send=batch/{river,switchyard}: benchBatch messages per
//	    transaction: River's InsertMany, SendTx benchBatch times in one db.Tx;
//	topic/send={one,batch}/switchyard: Publish, or PublishTx benchBatch
//	    times in one db.Tx, consumed by one group (6 partitions in flight).
//
// A shape is consumers×slots: 1x8 is one River client with MaxWorkers 8 and
// one queue Worker with Concurrency 8; 2x4 is two of each with 4, so two
// receivers compete for the same rows. The handlers do nothing.
//
// River runs in a fresh database of its own, migrated with rivermigrate, with
// the fetch settings of River's own benchmark (cmd/river/riverbench:
// FetchCooldown 2 ms, FetchPollInterval 20 ms, much faster than its defaults
// of 100 ms and 1 s) and a pool as large as both of Switchyard's together.
// It needs SWITCHYARD_TEST_DB (a PostgreSQL server); without it the benchmark
// skips. The same Switchyard cases run on either backend in
// BenchmarkSameCases, for the SQLite figures beside these:
//
//	SWITCHYARD_TEST_DB='postgres://…' go test -run '^$' -bench PG -benchtime 5000x ./queue/
//	go test -run '^$' -bench SameCases -benchtime 5000x ./queue/
func BenchmarkPG(b *testing.B) {
	if !storetest.Postgres() {
		b.Skip("BenchmarkPG needs a PostgreSQL server: set " + storetest.EnvTestDB + " to its postgres:// URL")
	}
	for _, shape := range benchShapes {
		b.Run("queue/"+shape.String(), func(b *testing.B) {
			for _, batch := range []int{1, benchBatch} {
				var baseline float64
				b.Run(sendName(batch)+"/river", func(b *testing.B) {
					baseline = benchRiver(b, shape, batch)
				})
				b.Run(sendName(batch)+"/switchyard", func(b *testing.B) {
					rate := benchQueue(b, shape, batch)
					if baseline > 0 {
						b.ReportMetric(rate/baseline, "x-river")
					}
				})
			}
		})
	}
	benchTopics(b)
}

// BenchmarkSameCases runs BenchmarkPG's Switchyard cases on the backend
// SWITCHYARD_TEST_DB chooses (SQLite at synchronous=FULL when it is unset),
// so that the two backends are measured with the same load.
func BenchmarkSameCases(b *testing.B) {
	for _, shape := range benchShapes {
		b.Run("queue/"+shape.String(), func(b *testing.B) {
			for _, batch := range []int{1, benchBatch} {
				b.Run(sendName(batch)+"/switchyard", func(b *testing.B) { benchQueue(b, shape, batch) })
			}
		})
	}
	benchTopics(b)
}

func benchTopics(b *testing.B) {
	for _, batch := range []int{1, benchBatch} {
		b.Run("topic/"+sendName(batch)+"/switchyard", func(b *testing.B) { benchTopic(b, batch) })
	}
}

const (
	// benchBatch is how many messages a batched send puts in one transaction.
	benchBatch = 100
	// benchWait bounds how long the consumers may take after the last send.
	benchWait = 2 * time.Minute
)

// benchSenders is how many goroutines send at once, as BenchmarkThroughput's
// b.SetParallelism(16).
func benchSenders() int { return 16 * runtime.GOMAXPROCS(0) }

// benchShape is how the consumers are spread: consumers (River clients, or
// queue Workers) of slots handlers each.
type benchShape struct{ consumers, slots int }

func (s benchShape) String() string { return fmt.Sprintf("%dx%d", s.consumers, s.slots) }

var benchShapes = []benchShape{{1, 8}, {2, 4}}

func sendName(batch int) string {
	if batch == 1 {
		return "send=one"
	}
	return "send=batch"
}

// benchBody is message n's body, the same small JSON on both sides.
func benchBody(n int) []byte { return []byte(`{"n":` + strconv.Itoa(n) + `}`) }

// sendAll sends messages 0..n-1 from benchSenders goroutines, up to batch
// messages per call of send, which gets the first message's number and the
// count.
func sendAll(b *testing.B, n, batch int, send func(ctx context.Context, first, count int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchSenders() {
		wg.Go(func() {
			ctx := context.Background()
			for {
				first := int(next.Add(int64(batch))) - batch
				if first >= n {
					return
				}
				if err := send(ctx, first, min(batch, n-first)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// tally counts deliveries and the distinct messages among them, and tells
// when want distinct messages have been seen.
type tally[K comparable] struct {
	mu    sync.Mutex
	seen  map[K]struct{}
	total int
	want  int
	all   chan struct{}
}

func newTally[K comparable](want int) *tally[K] {
	return &tally[K]{seen: make(map[K]struct{}, want), want: want, all: make(chan struct{})}
}

func (t *tally[K]) add(id K) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total++
	if _, ok := t.seen[id]; ok {
		return
	}
	t.seen[id] = struct{}{}
	if len(t.seen) == t.want {
		close(t.all)
	}
}

// wait waits until every message was seen, or fails b after benchWait.
func (t *tally[K]) wait(b *testing.B, what string) {
	b.Helper()
	select {
	case <-t.all:
	case <-time.After(benchWait):
		t.mu.Lock()
		defer t.mu.Unlock()
		b.Fatalf("%s %d distinct of %d (%d deliveries) after %s", what, len(t.seen), t.want, t.total, benchWait)
	}
}

// duplicates is how many deliveries repeated a message already seen.
func (t *tally[K]) duplicates() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total - len(t.seen)
}

// reportRate reports b.N messages over the timed part of b as msg/s, and the
// duplicate deliveries, and returns the rate.
func reportRate(b *testing.B, dups int) float64 {
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "msg/s")
	b.ReportMetric(float64(dups), "dups")
	return rate
}

// benchQueue is the queue's case: shape.consumers Workers on one database,
// b.N messages sent in transactions of batch; the clock stops once every
// message was handled and the Workers have stopped, which commits the last
// acknowledgements.
func benchQueue(b *testing.B, shape benchShape, batch int) float64 {
	db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
	q := queue.New(queue.NewOpts{DB: db, Name: "bench"})
	handled := newTally[queue.ID](b.N)
	workers := make([]*queue.Worker, shape.consumers)
	for i := range workers {
		workers[i] = q.Start(context.Background(), queue.WorkerOpts{Concurrency: shape.slots, Handler: func(ctx context.Context, m queue.Message) error {
			handled.add(m.ID)
			return nil
		}})
	}
	b.ResetTimer()
	sendAll(b, b.N, batch, func(ctx context.Context, first, count int) error {
		if count == 1 {
			_, err := q.Send(ctx, queue.Message{Body: benchBody(first)})
			return err
		}
		return db.Tx(ctx, func(tx *sql.Tx) error {
			for i := range count {
				if _, err := q.SendTx(ctx, tx, queue.Message{Body: benchBody(first + i)}); err != nil {
					return err
				}
			}
			return nil
		})
	})
	handled.wait(b, "handled")
	for _, w := range workers {
		if err := w.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var left int
	if err := db.Read.QueryRow(`select count(*) from goqite where queue = 'bench'`).Scan(&left); err != nil {
		b.Fatal(err)
	}
	if left != 0 {
		b.Fatalf("%d messages still queued after all were handled and the workers stopped", left)
	}
	return reportRate(b, handled.duplicates())
}

// benchTopic is the topic's case: b.N records published in transactions of
// batch to a 6-partition topic and consumed by one group; the clock stops
// once every record was handled and the subscription has stopped, which
// commits the last offsets.
func benchTopic(b *testing.B, batch int) float64 {
	ctx := context.Background()
	db := storetest.NewWith(b, store.Options{Synchronous: store.SyncFull})
	topic, err := queue.NewTopic(ctx, queue.TopicOpts{DB: db, Name: "bench", Partitions: 6})
	if err != nil {
		b.Fatal(err)
	}
	consumed := newTally[queue.Position](b.N)
	sub, err := topic.Subscribe(ctx, queue.SubscribeOpts{Group: "bench", Handler: func(ctx context.Context, tx *sql.Tx, r queue.Record) error {
		// Counted once the offset is committed: PostgreSQL may run the
		// handler's transaction again, which is not a second delivery.
		db.AfterCommit(tx, func() { consumed.add(queue.Position{Partition: r.Partition, Offset: r.Offset}) })
		return nil
	}})
	if err != nil {
		b.Fatal(err)
	}
	key := func(n int) string { return "user-" + strconv.Itoa(n%1000) }
	b.ResetTimer()
	sendAll(b, b.N, batch, func(ctx context.Context, first, count int) error {
		if count == 1 {
			_, err := topic.Publish(ctx, key(first), benchBody(first))
			return err
		}
		// In the order they come: the topic takes a transaction's partitions
		// in one order itself, at its pre-commit.
		return db.Tx(ctx, func(tx *sql.Tx) error {
			for i := range count {
				if err := topic.PublishTx(ctx, tx, key(first+i), benchBody(first+i)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	consumed.wait(b, "consumed")
	if err := sub.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	return reportRate(b, consumed.duplicates())
}

// riverArgs is the River job of the benchmark: a number, as benchBody.
type riverArgs struct {
	N int `json:"n"`
}

func (riverArgs) Kind() string { return "bench" }

// riverWorker does nothing but count the job.
type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	handled *tally[int64]
}

func (w *riverWorker) Work(ctx context.Context, job *river.Job[riverArgs]) error {
	w.handled.add(job.ID)
	return nil
}

// riverPoolConns is the size of River's pool: Switchyard's write pool
// (max(8, 4×CPUs)) and read pool (max(4, 2×CPUs)) together.
func riverPoolConns() int32 {
	n := runtime.NumCPU()
	return int32(max(8, 4*n) + max(4, 2*n))
}

// benchRiver is River's case: shape.consumers clients on a fresh database of
// their own, b.N jobs inserted in transactions of batch (Insert or
// InsertMany) through the first; the clock stops once every job's
// completion was committed (River's job_completed events come from its
// completer after the commit).
func benchRiver(b *testing.B, shape benchShape, batch int) float64 {
	ctx := context.Background()
	pool := riverDatabase(b)
	handled := newTally[int64](b.N)
	clients, completed := startRiver(b, pool, shape, handled)

	b.ResetTimer()
	sendAll(b, b.N, batch, func(ctx context.Context, first, count int) error {
		if count == 1 {
			_, err := clients[0].Insert(ctx, riverArgs{N: first}, nil)
			return err
		}
		params := make([]river.InsertManyParams, count)
		for i := range params {
			params[i].Args = riverArgs{N: first + i}
		}
		_, err := clients[0].InsertMany(ctx, params)
		return err
	})
	select {
	case <-completed:
	case <-time.After(benchWait):
		b.Fatalf("River did not complete %d jobs in %s", b.N, benchWait)
	}
	b.StopTimer()
	handled.wait(b, "River handled")
	var done int
	if err := pool.QueryRow(ctx, `select count(*) from river_job where state = 'completed'`).Scan(&done); err != nil {
		b.Fatal(err)
	}
	if done != b.N {
		b.Fatalf("%d of %d River jobs completed in the table", done, b.N)
	}
	return reportRate(b, handled.duplicates())
}

// riverDatabase opens a pool on a fresh database for b and runs River's
// migrations in it.
func riverDatabase(b *testing.B) *pgxpool.Pool {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(storetest.Source(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = riverPoolConns()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatalf("River's migrations: %v", err)
	}
	return pool
}

// startRiver starts shape.consumers River clients on pool whose workers add
// to handled, and returns them with a channel closed once b.N
// job_completed events have arrived. They stop when b ends.
func startRiver(b *testing.B, pool *pgxpool.Pool, shape benchShape, handled *tally[int64]) ([]*river.Client[pgx.Tx], <-chan struct{}) {
	ctx := context.Background()
	var completed atomic.Int64
	all := make(chan struct{})
	clients := make([]*river.Client[pgx.Tx], shape.consumers)
	for i := range clients {
		workers := river.NewWorkers()
		river.AddWorker(workers, &riverWorker{handled: handled})
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
			FetchCooldown:     2 * time.Millisecond,
			FetchPollInterval: 20 * time.Millisecond,
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: shape.slots}},
			Workers:           workers,
		})
		if err != nil {
			b.Fatal(err)
		}
		// Sized for every job, so that no event is dropped.
		ch, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: b.N + 1, Kinds: []river.EventKind{river.EventKindJobCompleted}})
		counted := make(chan struct{})
		go func() {
			defer close(counted)
			for range ch {
				if completed.Add(1) == int64(b.N) {
					close(all)
				}
			}
		}()
		if err := client.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := client.Stop(ctx); err != nil {
				b.Error(err)
			}
			cancel()
			<-counted
		})
		clients[i] = client
	}
	return clients, all
}
