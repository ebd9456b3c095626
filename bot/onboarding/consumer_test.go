package onboarding

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mymmrac/telego"

	"switchyard/bot/backend"
	"switchyard/bot/contract"
	"switchyard/queue"
	"switchyard/store"
	"switchyard/store/storetest"
)

// emitNft emits status_nft_activated for target in its own transaction.
func (e *onbEnv) emitNft(target backend.Target) contract.EventID {
	e.t.Helper()
	id, err := e.be.Outbox().EmitStatusNftActivated(context.Background(), target, contract.StatusNftActivatedPayload{Level: contract.NftLP1})
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// emitPartner emits new_partner to the leader (uid, tg) naming partner.
func (e *onbEnv) emitPartner(uid contract.UID, tg contract.TelegramID, partner string) contract.EventID {
	e.t.Helper()
	id, err := e.be.Outbox().EmitNewPartner(context.Background(), backend.Target{MagnetUID: uid, TelegramID: tg},
		contract.NewPartnerPayload{PartnerUID: 1, PartnerName: partner, PartnerLink: partner})
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

func TestGroupByUser(t *testing.T) {
	t.Parallel()
	t.Run("keeps groups in page order, sorts each by id and keeps events about nobody apart", func(t *testing.T) {
		t.Parallel()
		uid := func(n int64) *contract.UID { u := contract.UID(n); return &u }
		tg := func(s string) *contract.TelegramID { x := contract.TelegramID(s); return &x }
		page := []contract.Event{
			{ID: 7, MagnetUID: uid(2)}, {ID: 3, MagnetUID: uid(2)}, {ID: 5, TelegramID: tg("9")},
			{ID: 1}, {ID: 4, MagnetUID: uid(2), TelegramID: tg("9")}, {ID: 2}, {ID: 6, TelegramID: tg("9")},
		}
		var got [][]contract.EventID
		for _, g := range groupByUser(page) {
			got = append(got, eventIDs(g))
		}
		want := "[[3 4 7] [5 6] [1] [2]]"
		if fmt.Sprint(got) != want {
			t.Fatalf("groups %v, want %s", got, want)
		}
	})
}

func TestConsumerPoll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("returns without fetching while another owner holds the lease, then drains every page", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		for i := range 250 {
			e.emitNft(backend.Target{TelegramID: contract.TelegramID(fmt.Sprint(10_000 + i%25))})
		}
		if held, err := e.db.AcquireLease(ctx, OutboxLeaseName, "another-process", time.Minute); err != nil || !held {
			t.Fatalf("take the lease: %v %v", held, err)
		}
		b.poll(ctx)
		if n := e.unprocessed(); n != 250 || b.handled.Load() != 0 {
			t.Fatalf("with the lease taken: %d unprocessed, %d handled", n, b.handled.Load())
		}
		if err := e.db.ReleaseLease(ctx, OutboxLeaseName, "another-process"); err != nil {
			t.Fatal(err)
		}
		b.poll(ctx)
		if n := e.unprocessed(); n != 0 || b.handled.Load() != 250 {
			t.Fatalf("after one poll: %d unprocessed, %d handled; want a drain of all 3 pages", n, b.handled.Load())
		}
		if held, _ := e.db.AcquireLease(ctx, OutboxLeaseName, "another-process", time.Minute); !held {
			t.Fatal("the poll kept the lease after it finished")
		}
	})

	t.Run("an event already in the ledger is acked without its handler", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		id := e.emitPartner(0, "5001", "Борис")
		err := e.db.Tx(ctx, func(tx *sql.Tx) error {
			_, err := tryMark(ctx, tx, contract.Event{ID: id, EventType: contract.EventNewPartner, CreatedAt: time.Now()}, time.Now())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		b.poll(ctx)
		if e.unprocessed() != 0 || b.handled.Load() != 0 || e.dms() != 0 {
			t.Fatalf("a marked event: %d unprocessed, %d handled, %d outgoing", e.unprocessed(), b.handled.Load(),
				e.dms())
		}
	})

	t.Run("a handler error rolls back that event alone, retries it and stops its user while others go on", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		a1 := e.emitNft(backend.Target{TelegramID: "111"})
		a2 := e.emitNft(backend.Target{TelegramID: "111"})
		c1 := e.emitNft(backend.Target{TelegramID: "222"})
		b.beforeHandle = func(ev contract.Event) error {
			if ev.ID == a1 {
				return errors.New("injected failure")
			}
			return nil
		}
		b.poll(ctx)
		rec := func(id contract.EventID) backend.EventRecord {
			r, err := e.be.Outbox().GetEvent(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		if r := rec(a1); r.Attempts != 1 || r.LastError == nil || *r.LastError != "injected failure" || r.ProcessedAt != nil {
			t.Fatalf("failed event %+v", r)
		}
		if r := rec(a2); r.Attempts != 0 || r.ProcessedAt != nil {
			t.Fatalf("the failed user's next event was touched: %+v", r)
		}
		if r := rec(c1); r.ProcessedAt == nil {
			t.Fatalf("another user's event was not processed: %+v", r)
		}
		if n := e.count(`select count(*) from bot_processed_events where outbox_event_id = ?`, a1); n != 0 {
			t.Fatal("the failed event's mark was kept")
		}
		if f := e.funnel("111"); f.Stage != StageNone {
			t.Fatalf("the failed event's funnel write was kept: %+v", f)
		}
	})
}

func TestTwoConsumers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// leaders makes 10 backend users who started the bot.
	leaders := func(t *testing.T, e *onbEnv) []backend.User {
		var list []backend.User
		for i := range 10 {
			tg := contract.TelegramID(fmt.Sprint(7000 + i))
			list = append(list, e.createUser(fmt.Sprint("lead", i), "Leader", tg))
			if _, err := e.tgBot().Send(telego.User{ID: int64(7000 + i), FirstName: "L"}, "hi"); err != nil {
				t.Fatal(err)
			}
		}
		return list
	}
	// setup emits two new_partner per leader and stage events for 30 users,
	// and returns the partners by leader and how many events it emitted.
	setup := func(e *onbEnv, leaders []backend.User, half int) (partners map[contract.TelegramID][]string, total int) {
		partners = map[contract.TelegramID][]string{}
		for i, u := range leaders {
			tg := *u.TelegramID
			for j := range 2 {
				name := fmt.Sprintf("Партнёр-%d-%d-%d", half, i, j)
				e.emitPartner(u.UID, tg, name)
				partners[tg] = append(partners[tg], name)
				total++
			}
		}
		for i := range 90 {
			e.emitNft(backend.Target{TelegramID: contract.TelegramID(fmt.Sprint(8000 + i%30))})
			total++
		}
		return partners, total
	}
	// checkDMs asserts every partner's DM reached its leader exactly once.
	checkDMs := func(t *testing.T, e *onbEnv, partners map[contract.TelegramID][]string) {
		for tg, names := range partners {
			var id int64
			fmt.Sscan(string(tg), &id)
			for _, name := range names {
				if n := e.countBotMessages(id, name+"!"); n != 1 {
					t.Fatalf("leader %s got %d DMs about %s, want 1", tg, n, name)
				}
			}
		}
	}

	t.Run("two instances on one database file hand over and handle every event once", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		db2 := storetest.NewWith(t, store.Options{Path: e.db.Path()})
		fast := func(o *Opts) { o.PollInterval = 100 * time.Millisecond }
		a := e.newBot(e.db, fast, func(o *Opts) { o.Instance = "a" })
		b := e.newBot(db2, fast, func(o *Opts) { o.Instance = "b" })
		ra := e.start(a)
		ls := leaders(t, e)
		first, n1 := setup(e, ls, 0)
		e.waitDB("the first half handled", func() bool { return e.unprocessed() == 0 })
		e.start(b)
		ra.stop()
		second, n2 := setup(e, ls, 1)
		e.waitDB("the second half handled and every call made", func() bool { return e.unprocessed() == 0 && e.unfinished() == 0 })
		if a.handled.Load() == 0 || b.handled.Load() == 0 || a.handled.Load()+b.handled.Load() != int64(n1+n2) {
			t.Fatalf("instance a handled %d, b %d; want both some and %d together", a.handled.Load(), b.handled.Load(), n1+n2)
		}
		if n := e.count(`select count(*) from bot_processed_events`); n != n1+n2 {
			t.Fatalf("ledger has %d events, want %d", n, n1+n2)
		}
		checkDMs(t, e, first)
		checkDMs(t, e, second)
		if n := e.count(`select count(*) from bot_funnel_history where change = 'stage'`); n != 30 {
			t.Fatalf("%d stage changes, want one for each of the 30 users", n)
		}
	})

	t.Run("even without the lease, two consumers fetching the same pages handle each event once", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		db2 := storetest.NewWith(t, store.Options{Path: e.db.Path()})
		a := e.newBot(e.db, func(o *Opts) { o.Instance = "a" })
		b := e.newBot(db2, func(o *Opts) { o.Instance = "b" })
		partners, total := setup(e, leaders(t, e), 0)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, x := range []*Bot{a, b} {
			wg.Go(func() {
				<-start
				for range 50 {
					n, err := x.processOnce(ctx, 0)
					if err != nil {
						errs[i] = err
						return
					}
					if n == 0 {
						return
					}
				}
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if e.unprocessed() != 0 || a.handled.Load()+b.handled.Load() != int64(total) {
			t.Fatalf("%d unprocessed; a handled %d, b %d, want %d together", e.unprocessed(), a.handled.Load(), b.handled.Load(), total)
		}
		// The records are there once; a sender makes each call once.
		if n := e.dms(); n != 20 {
			t.Fatalf("%d outgoing records, want 20", n)
		}
		e.run(a)
		e.waitDB("every call made", func() bool { return e.unfinished() == 0 })
		checkDMs(t, e, partners)
	})
}

// failHash is a fixed pseudo-random number in [0, 100) for an event's attempt.
func failHash(id contract.EventID, attempts int) int {
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d", id, attempts)
	return int(h.Sum32() % 100)
}

func TestPerUserOrderWithFailures(t *testing.T) {
	t.Parallel()
	t.Run("30% injected handler failures never reorder a user's events across retries and pages", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t, func(o *onbEnvOpts) { o.manualClock = true })
		b := e.newBot(e.db, func(o *Opts) { o.PollInterval = 200 * time.Millisecond })
		var failures sync.Map
		b.beforeHandle = func(ev contract.Event) error {
			if failHash(ev.ID, ev.Attempts) < 30 {
				failures.Store(fmt.Sprint(ev.ID, "/", ev.Attempts), true)
				return errors.New("injected failure")
			}
			return nil
		}
		targets := make([]backend.Target, 20)
		for i := range targets {
			switch i % 3 {
			case 0:
				targets[i] = backend.Target{MagnetUID: contract.UID(100 + i)}
			case 1:
				targets[i] = backend.Target{TelegramID: contract.TelegramID(fmt.Sprint(9000 + i))}
			default:
				targets[i] = backend.Target{MagnetUID: contract.UID(100 + i), TelegramID: contract.TelegramID(fmt.Sprint(9000 + i))}
			}
		}
		const perUser = 12
		e.start(b)
		for round := range perUser {
			for _, tg := range targets {
				e.emitNft(tg)
			}
			if round%4 == 3 {
				e.clock.Advance(time.Second)
			}
		}
		total := perUser * len(targets)
		e.waitDB("every event handled", func() bool {
			if e.unprocessed() == 0 {
				return true
			}
			e.clock.Advance(5 * time.Minute) // retries come due
			return false
		})
		if n := e.count(`select count(*) from bot_event_outbox where dead_lettered_at is not null or attempts >= 10`); n != 0 {
			t.Fatalf("%d events ran out of attempts", n)
		}
		rows, err := e.db.Read.Query(`select outbox_event_id, user_key from bot_processed_events order by id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		last := map[string]contract.EventID{}
		handled := 0
		for rows.Next() {
			var (
				id  contract.EventID
				key string
			)
			if err := rows.Scan(&id, &key); err != nil {
				t.Fatal(err)
			}
			if id <= last[key] {
				t.Fatalf("user %s: event %d took effect after %d", key, id, last[key])
			}
			last[key], handled = id, handled+1
		}
		if handled != total || b.handled.Load() != int64(total) {
			t.Fatalf("ledger %d, handled %d, want %d", handled, b.handled.Load(), total)
		}
		n := 0
		failures.Range(func(any, any) bool { n++; return true })
		if n < total/5 {
			t.Fatalf("only %d injected failures for %d events; the test did not exercise retries", n, total)
		}
	})
}

// ackDropper is a proxy to the backend that drops the connection of every
// ack, as if the consumer died between its commit and its ack.
func ackDropper(t *testing.T, backend string) *httptest.Server {
	t.Helper()
	target, err := url.Parse(backend)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bot/events/ack" {
			panic(http.ErrAbortHandler)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestConsumerStoppedMidBatch(t *testing.T) {
	t.Parallel()

	t.Run("a stop in the middle of a batch finishes and acks that batch before Run returns", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		b := e.newBot(e.db)
		for i := range 60 {
			e.emitNft(backend.Target{TelegramID: contract.TelegramID(fmt.Sprint(3000 + i%6))})
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var begun atomic.Int64
		b.beforeHandle = func(ev contract.Event) error {
			if begun.Add(1) == 11 {
				cancel() // the process is told to stop in the middle of the page
			}
			return nil
		}
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return")
		}
		if e.unprocessed() != 0 || b.handled.Load() != 60 {
			t.Fatalf("after a stop mid-batch: %d unprocessed, %d handled", e.unprocessed(), b.handled.Load())
		}
	})

	t.Run("a consumer that dies between commit and ack loses nothing and the next one handles nothing twice", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t)
		proxy := ackDropper(t, e.srv.URL)
		a := e.newBot(e.db, func(o *Opts) { o.BackendURL = proxy.URL })
		leader := e.createUser("lead", "Лидия", "5001")
		if _, err := e.tgBot().Send(telego.User{ID: 5001, FirstName: "Лидия"}, "hi"); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			e.emitPartner(leader.UID, "5001", fmt.Sprint("Партнёр-", i))
		}
		for i := range 20 {
			e.emitNft(backend.Target{TelegramID: contract.TelegramID(fmt.Sprint(4000 + i%4))})
		}
		stopA := e.run(a)
		e.waitDB("the batch committed by the first consumer", func() bool {
			return e.count(`select count(*) from bot_processed_events`) == 25
		})
		stopA()
		if e.unprocessed() != 25 {
			t.Fatalf("%d events unprocessed after the lost ack, want 25", e.unprocessed())
		}
		b := e.newBot(e.db)
		e.run(b)
		e.waitDB("the next consumer acks everything and the calls are made", func() bool {
			return e.unprocessed() == 0 && e.unfinished() == 0
		})
		if b.handled.Load() != 0 || a.handled.Load() != 25 {
			t.Fatalf("first consumer handled %d, second %d; want 25 and 0", a.handled.Load(), b.handled.Load())
		}
		for i := range 5 {
			if n := e.countBotMessages(5001, fmt.Sprint("Партнёр-", i, "!")); n != 1 {
				t.Fatalf("the leader got %d DMs about partner %d, want 1", n, i)
			}
		}
	})
}

func TestPrune(t *testing.T) {
	t.Parallel()
	t.Run("deletes only ledger rows, handled updates and finished calls older than 30 days", func(t *testing.T) {
		t.Parallel()
		e := newOnbEnv(t, func(o *onbEnvOpts) { o.manualClock = true })
		b := e.newBot(e.db)
		ctx := context.Background()
		now := e.clock.Now()
		ages := map[string]time.Duration{
			"31 days":          31 * 24 * time.Hour,
			"30 days and 1 µs": 30*24*time.Hour + time.Microsecond,
			"30 days":          30 * 24 * time.Hour,
			"29 days":          29 * 24 * time.Hour,
			"new":              0,
		}
		id := int64(0)
		err := e.db.Tx(ctx, func(tx *sql.Tx) error {
			for _, age := range ages {
				id++
				at := store.TS(now.Add(-age))
				if _, err := tx.Exec(`insert into bot_processed_events (outbox_event_id, event_type, user_key, outcome, emitted_at, processed_at)
					values (?, 'registered', 'uid:1', 'handled', ?, ?)`, id, at, at); err != nil {
					return err
				}
				if _, err := tx.Exec(`insert into bot_updates (bot_id, update_id, chat_id, kind, payload, status, next_attempt_at, received_at, done_at)
					values (1, ?, '1', 'message', '{}', 'done', ?, ?, ?)`, id, at, at, at); err != nil {
					return err
				}
				if _, err := tx.Exec(`insert into bot_deliveries (dm_key, method, chat_id, text, outcome, attempts, delivered_at)
					values (?, 'sendMessage', '1', 'hi', 'sent', 0, ?)`, fmt.Sprint("sent", id), at); err != nil {
					return err
				}
			}
			// A pending update received long ago is never pruned.
			_, err := tx.Exec(`insert into bot_updates (bot_id, update_id, chat_id, kind, payload, status, next_attempt_at, received_at)
				values (1, 999, '1', 'message', '{}', 'pending', ?, ?)`, store.TS(now.AddDate(-1, 0, 0)), store.TS(now.AddDate(-1, 0, 0)))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// Five calls that failed for good: DMQueue's dead letters.
		failed := deadDMs(t, e, 5)
		res, err := b.prune(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res != (PruneResult{ProcessedEvents: 2}) {
			t.Fatalf("pruned %+v, want the 2 ledger rows older than 30 days", res)
		}
		// Updates and deliveries are the retention runner's (retention.go).
		if n := e.count(`select count(*) from bot_updates`) + e.count(`select count(*) from bot_deliveries`); n != 2*len(ages)+1 {
			t.Fatalf("the daily prune left %d updates and deliveries, want all %d", n, 2*len(ages)+1)
		}
		var left []string
		rows, err := e.db.Read.Query(`select processed_at from bot_processed_events order by processed_at`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var at string
			if err := rows.Scan(&at); err != nil {
				t.Fatal(err)
			}
			left = append(left, at)
		}
		want := []string{
			now.Add(-30 * 24 * time.Hour).Format(store.TimeLayout),
			now.Add(-29 * 24 * time.Hour).Format(store.TimeLayout),
			now.Format(store.TimeLayout),
		}
		if !slices.Equal(left, want) {
			t.Fatalf("ledger left %v, want %v", left, want)
		}
		if n := failed(); n != 5 {
			t.Fatalf("%d failed calls left, want all 5 (an operator may redrive them)", n)
		}
		if n := e.count(`select count(*) from bot_updates where status = 'pending'`); n != 1 {
			t.Fatal("a pending update was pruned")
		}
		e.clock.Advance(24 * time.Hour)
		if res, err := b.prune(ctx); err != nil || res.ProcessedEvents != 1 {
			t.Fatalf("a day later pruned %+v, %v; want the 30-day-old row", res, err)
		}
	})
}

// deadDMs makes n calls of DMQueue fail for good, with a worker of the
// queue's own whose handler refuses them, and returns a count of DMQueue's
// dead letters.
func deadDMs(t *testing.T, e *onbEnv, n int) func() int {
	t.Helper()
	ctx := context.Background()
	q := queue.New(queue.NewOpts{DB: e.db, Name: DMQueue})
	for i := range n {
		if _, err := q.Send(ctx, queue.Message{Body: []byte(`{}`), Key: fmt.Sprint("failed", i), OrderKey: "chat:1"}); err != nil {
			t.Fatal(err)
		}
	}
	w := q.Start(ctx, queue.WorkerOpts{Handler: func(context.Context, queue.Message) error {
		return queue.Permanent(errors.New("injected failure"))
	}})
	count := func() int { return int(e.dmQueue().Dead) }
	e.waitDB("the failed calls dead-lettered", func() bool { return count() == n })
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	return count
}

// rawEvent builds an Event as the pending endpoint answers it.
func rawEvent(id contract.EventID, typ contract.EventType, uid contract.UID, tg contract.TelegramID, payload any) contract.Event {
	ev := contract.Event{ID: id, EventType: typ, CreatedAt: time.Now()}
	if uid != 0 {
		ev.MagnetUID = &uid
	}
	if tg != "" {
		ev.TelegramID = &tg
	}
	if payload != nil {
		b, _ := json.Marshal(payload)
		ev.Payload = b
	}
	return ev
}
