package queue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
	"switchyard/testwait"
)

// completes fails t unless op returns nil within 20 s, however loaded the
// machine; op runs in a goroutine of its own, so a call that hangs fails the
// test instead of hanging it.
func completes(t *testing.T, what string, op func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not complete within 20 s: it waits for a writer the blocked consumer holds", what)
	}
}

func TestProcess(t *testing.T) {
	t.Parallel()

	// The reason for Process: a transactional Handler runs on the writer,
	// so one that waits for anything but the database (here a channel; in
	// life an acknowledgement from a client, a network call) holds every
	// other writer of the SQLite file — the Subscribe, the CreateGroup and
	// the Publish below would all time out. Process holds nothing.
	t.Run("a record whose Process blocks holds up no other writer: another group subscribes, a group is created and records are published meanwhile", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "process.blocked", 2)
		entered := make(chan struct{})
		release := make(chan struct{})
		var processed atomic.Int64
		subscribe(t, topic, queue.SubscribeOpts{Group: "slow", Process: func(ctx context.Context, r queue.Record) error {
			if r.Key == "first" {
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			processed.Add(1)
			return nil
		}})
		releaseOnce := sync.OnceFunc(func() { close(release) })
		t.Cleanup(releaseOnce) // before the subscription's Stop
		if _, err := topic.Publish(t.Context(), "first", []byte("1")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatal("the first record was not processed within 20 s")
		}

		var handled atomic.Int64
		completes(t, "another group subscribing", func() error {
			s, err := topic.Subscribe(context.Background(), queue.SubscribeOpts{Group: "other", PollInterval: 50 * time.Millisecond,
				Handler: func(context.Context, *sql.Tx, queue.Record) error {
					handled.Add(1)
					return nil
				}})
			if err == nil {
				t.Cleanup(func() { _ = s.Stop(context.Background()) })
			}
			return err
		})
		completes(t, "creating a group", func() error {
			_, err := topic.CreateGroup(context.Background(), "created", queue.StartEarliest)
			return err
		})
		completes(t, "publishing ten records", func() error {
			for i := range 10 {
				if _, err := topic.Publish(context.Background(), fmt.Sprintf("k%d", i), []byte("v")); err != nil {
					return err
				}
			}
			return nil
		})
		testwait.Until(t, 20*time.Second, "the other group handled and committed all eleven records", func() bool {
			return groupLag(t, topic, "other") == 0 && handled.Load() >= 11
		})
		if lag := groupLag(t, topic, "created"); lag != 11 {
			t.Errorf("the created group's lag is %d, want 11", lag)
		}
		if lag := groupLag(t, topic, "slow"); lag == 0 {
			t.Errorf("the slow group has no lag while its first record is still being processed")
		}

		releaseOnce()
		testwait.Until(t, 20*time.Second, "the slow group processed and committed every record", func() bool {
			return groupLag(t, topic, "slow") == 0
		}, func() string {
			return fmt.Sprintf("lag %d, %d processed", groupLag(t, topic, "slow"), processed.Load())
		})
		if n := processed.Load(); n != 11 {
			t.Errorf("%d records processed, want each of the 11 once", n)
		}
	})

	// A crash between Process and the commit of its outcome: the process
	// is stopped hard and its database handle closed (nothing it writes
	// from then on lands) while a record's Process runs, after the records
	// before it in its chunk were processed. None of the chunk's outcomes is
	// committed, so the next owner, on another handle, processes those
	// records again — at least once, never lost — and then the rest.
	t.Run("records processed but not committed when their owner dies are processed again by the next owner, and none is lost", func(t *testing.T) {
		t.Parallel()
		const records = 6
		dbA := storetest.New(t)
		dbB := storetest.NewWith(t, store.Options{Path: dbA.Path()})
		topicA := newTopic(t, dbA, "process.crash", 1)
		topicB := newTopic(t, dbB, "process.crash", 1)
		for i := range records {
			if _, err := topicA.Publish(t.Context(), fmt.Sprintf("k%d", i%2), fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu   sync.Mutex
			seen = map[string][]queue.Record{}
		)
		saw := func(who string, r queue.Record) {
			mu.Lock()
			defer mu.Unlock()
			seen[who] = append(seen[who], r)
		}
		inThird := make(chan struct{})
		resume := make(chan struct{})
		ctxA, kill := context.WithCancel(context.Background())
		defer kill()
		subA, err := topicA.Subscribe(ctxA, queue.SubscribeOpts{Group: "g", Process: func(ctx context.Context, r queue.Record) error {
			saw("A", r)
			if r.Offset == 2 {
				close(inThird)
				<-resume
			}
			return nil
		}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-inThird:
		case <-time.After(20 * time.Second):
			t.Fatal("the third record was not processed within 20 s")
		}
		kill()
		if err := subA.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := dbA.Close(); err != nil {
			t.Fatal(err)
		}
		close(resume)

		subscribe(t, topicB, queue.SubscribeOpts{Group: "g", Process: func(ctx context.Context, r queue.Record) error {
			saw("B", r)
			return nil
		}})
		testwait.Until(t, 20*time.Second, "the next owner committed every record", func() bool {
			return groupLag(t, topicB, "g") == 0
		})
		mu.Lock()
		defer mu.Unlock()
		offsets := func(rs []queue.Record) []int64 {
			var out []int64
			for _, r := range rs {
				out = append(out, r.Offset)
			}
			return out
		}
		if got := offsets(seen["A"]); !slices.Equal(got, []int64{0, 1, 2}) {
			t.Errorf("the first owner processed %v, want 0 1 2 before it died", got)
		}
		if got := offsets(seen["B"]); !slices.Equal(got, []int64{0, 1, 2, 3, 4, 5}) {
			t.Errorf("the next owner processed %v, want every record once, in order, those the first owner processed included", got)
		}
		for _, r := range seen["B"] {
			if r.Attempt != 1 {
				t.Errorf("record %d came again at attempt %d, want 1: no outcome of the dead owner was recorded", r.Offset, r.Attempt)
			}
		}
	})

	t.Run("each key's records are processed in offset order across retries, a permanent failure is dead-lettered, and a retrying key holds back no other", func(t *testing.T) {
		t.Parallel()
		const (
			keys     = 8
			perKey   = 60
			stuckKey = "key-0"
			deadKey  = "key-1"
			deadSeq  = 7
		)
		db := storetest.New(t)
		topic := newTopic(t, db, "process.order", 3)
		labels := map[string]string{"queue": "process.order", "group": "g"}
		metric := func(name string) float64 { return metricValue(t, "switchyard_queue_messages_"+name+"_total", labels) }
		before := map[string]float64{"succeeded": metric("succeeded"), "dead_lettered": metric("dead_lettered"), "retried": metric("retried")}
		var (
			mu       sync.Mutex
			tried    = map[string][]int{} // every call, by key
			finished = map[string][]int{} // calls that returned nil
			stuck    atomic.Bool
		)
		stuck.Store(true)
		subscribe(t, topic, queue.SubscribeOpts{
			Group:       "g",
			Concurrency: 2,
			Retry:       queue.RetryPolicy{MaxAttempts: 100000, MinBackoff: time.Millisecond, MaxBackoff: 3 * time.Millisecond},
			Process: func(ctx context.Context, r queue.Record) error {
				var seq int
				if _, err := fmt.Sscanf(string(r.Value), "%d", &seq); err != nil {
					return queue.Permanent(err)
				}
				mu.Lock()
				defer mu.Unlock()
				tried[r.Key] = append(tried[r.Key], seq)
				switch {
				case r.Key == stuckKey && stuck.Load():
					return queue.RetryAfter(20*time.Millisecond, errors.New("downstream unavailable"))
				case r.Key == deadKey && seq == deadSeq:
					return queue.Permanent(errors.New("rejected downstream"))
				case rand.N(10) < 3:
					return errors.New("transient")
				}
				finished[r.Key] = append(finished[r.Key], seq)
				return nil
			},
		})
		var wg sync.WaitGroup
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			wg.Go(func() {
				for i := range perKey {
					if _, err := topic.Publish(context.Background(), key, fmt.Appendf(nil, "%d", i)); err != nil {
						t.Errorf("publish %s %d: %v", key, i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		finishedCount := func() int {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for k, seqs := range finished {
				if k != stuckKey {
					n += len(seqs)
				}
			}
			return n
		}
		testwait.Until(t, 60*time.Second, "every key but the stuck one processed", func() bool {
			return finishedCount() == (keys-1)*perKey-1
		}, func() string { return fmt.Sprintf("%d finished", finishedCount()) })
		mu.Lock()
		if n := len(finished[stuckKey]); n != 0 {
			t.Errorf("the stuck key has %d records finished while its first one retries", n)
		}
		mu.Unlock()
		stuck.Store(false)
		testwait.Until(t, 60*time.Second, "the group committed every record", func() bool {
			return groupLag(t, topic, "g") == 0
		})

		mu.Lock()
		defer mu.Unlock()
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			var want []int
			for i := range perKey {
				if key != deadKey || i != deadSeq {
					want = append(want, i)
				}
			}
			if !slices.Equal(finished[key], want) {
				t.Errorf("%s finished %v, want each record once in offset order", key, finished[key])
			}
			if !slices.IsSorted(tried[key]) {
				t.Errorf("%s was processed out of offset order: %v", key, tried[key])
			}
		}
		if n := count(t, db, `select count(*) from queue_dead where queue = 'process.order' and grp = 'g'`); n != 1 {
			t.Errorf("%d dead letters, want the permanent failure's", n)
		}
		// The counters are counted once the subscriber has the commit's
		// result, a moment after the commit the lag shows.
		testwait.Until(t, 30*time.Second, "the succeeded counter counts every finished record", func() bool {
			return metric("succeeded")-before["succeeded"] == keys*perKey-1
		}, func() string {
			return fmt.Sprintf("succeeded counter rose by %v, want %d", metric("succeeded")-before["succeeded"], keys*perKey-1)
		})
		if n := metric("dead_lettered") - before["dead_lettered"]; n != 1 {
			t.Errorf("dead-lettered counter rose by %v, want 1", n)
		}
		if n := metric("retried") - before["retried"]; n == 0 {
			t.Error("retried counter did not rise, want the failures counted")
		}
	})

	t.Run("a hard stop cancels Process's context, its error counts no attempt, and the next subscriber gets the record at attempt 1", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "process.hard", 1)
		if _, err := topic.Publish(t.Context(), "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		entered := make(chan struct{})
		first := subscribe(t, topic, queue.SubscribeOpts{Group: "g", Process: func(ctx context.Context, r queue.Record) error {
			close(entered)
			<-ctx.Done()
			return ctx.Err()
		}})
		select {
		case <-entered:
		case <-time.After(20 * time.Second):
			t.Fatal("the record was not processed within 20 s")
		}
		expired, cancel := context.WithCancel(t.Context())
		cancel()
		if err := first.Stop(expired); !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop with an ended context = %v, want context.Canceled", err)
		}
		attempts := make(chan int, 1)
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Process: func(ctx context.Context, r queue.Record) error {
			attempts <- r.Attempt
			return nil
		}})
		select {
		case a := <-attempts:
			if a != 1 {
				t.Errorf("the next subscriber got the record at attempt %d, want 1", a)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the next subscriber did not get the record within 20 s")
		}
		if n := count(t, db, `select count(*) from queue_failures where queue = 'process.hard'`); n != 0 {
			t.Errorf("%d failures recorded for a record abandoned by a hard stop", n)
		}
	})

	t.Run("a graceful stop lets the record being processed finish and commits it, and the next subscriber processes every other record once", func(t *testing.T) {
		t.Parallel()
		const records = 5
		db := storetest.New(t)
		topic := newTopic(t, db, "process.graceful", 1)
		for i := range records {
			if _, err := topic.Publish(t.Context(), "k", fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu   sync.Mutex
			seen []int64
		)
		entered := make(chan struct{})
		release := make(chan struct{})
		first := subscribe(t, topic, queue.SubscribeOpts{Group: "g", Process: func(ctx context.Context, r queue.Record) error {
			mu.Lock()
			seen = append(seen, r.Offset)
			mu.Unlock()
			if r.Offset == 0 {
				close(entered)
				<-release
			}
			return nil
		}})
		<-entered
		stopped := make(chan error, 1)
		go func() { stopped <- first.Stop(t.Context()) }()
		close(release)
		if err := <-stopped; err != nil {
			t.Fatal(err)
		}
		if lag := groupLag(t, topic, "g"); lag >= records {
			t.Errorf("lag %d after a graceful stop: the record being processed was not committed", lag)
		}
		subscribe(t, topic, queue.SubscribeOpts{Group: "g", Process: func(ctx context.Context, r queue.Record) error {
			mu.Lock()
			seen = append(seen, r.Offset)
			mu.Unlock()
			return nil
		}})
		testwait.Until(t, 20*time.Second, "every record committed", func() bool { return groupLag(t, topic, "g") == 0 })
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(seen, []int64{0, 1, 2, 3, 4}) {
			t.Errorf("processed %v, want each record once, in order, across the two subscribers", seen)
		}
	})

	t.Run("Subscribe needs exactly one of Handler and Process", func(t *testing.T) {
		t.Parallel()
		db := storetest.New(t)
		topic := newTopic(t, db, "process.opts", 1)
		for name, opts := range map[string]queue.SubscribeOpts{
			"neither": {Group: "g"},
			"both": {Group: "g", Handler: func(context.Context, *sql.Tx, queue.Record) error { return nil },
				Process: func(context.Context, queue.Record) error { return nil }},
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("Subscribe with %s did not panic", name)
					}
				}()
				_, _ = topic.Subscribe(t.Context(), opts)
			}()
		}
	})
}
