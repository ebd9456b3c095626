package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mymmrac/telego"
	"golang.org/x/time/rate"

	"switchyard/loadtest"
	"switchyard/referral"
	"switchyard/store/storetest"
	"switchyard/telegram"
	"switchyard/telegram/fakebot"
	"switchyard/testwait"
)

// TestFleet is the crash suite for several instances: three processes of
// the real binary on one PostgreSQL database (two on one SQLite file), with
// the same secrets and one fake Bot API that enforces Telegram's limits,
// behind the test's own round-robin client. Mixed load goes through every
// instance on all three flows, operators' replies included; five times a
// random instance is killed with SIGKILL and restarted. Then the fleet drains, and the test checks from the
// outside that every acknowledged webhook, emit, publish and reply took
// effect once and in order (per thread, per user, per key), that the referral group's
// partitions were owned by live instances only and moved to the survivors
// within the lease time after each kill, and that the fake Bot API saw no
// more than Telegram allows, with no 429.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("the fleet test takes minutes; it runs without -short (and always in CI)")
	}
	t.Parallel()
	n := 2 // two processes on one SQLite file
	if storetest.Postgres() {
		n = 3
	}
	limits := telegram.DefaultLimits()
	killRounds(t, roundsOpts{
		instances: n,
		limits:    &limits,
		// Modest rates: the point is correctness under kills, not
		// throughput. Forty users at 15 emits a second keep the DMs below
		// the bot's 30 a second and each user's below one a second.
		rate: 15, users: 40,
		// The load's connections per path, spread over the instances.
		concurrency: 6,
		// Long enough a round that each path's load reaches its
		// follow-up publishes (loadtest.TopicPlan), and goes on while the
		// killed instance restarts.
		killAfter: [2]time.Duration{2 * time.Second, 6 * time.Second},
		loadAfter: time.Second,
	})
}

// roundsOpts shape a run of kill rounds.
type roundsOpts struct {
	instances int
	// faults are Telegram's random failures while the rounds last.
	faults []fakebot.Fault
	// limits, when set, has the fake Bot API enforce them (forgiving
	// limitSlack) and the test check its call log against them.
	limits *telegram.Limits
	// rate is requests per second per path; users how many Telegram users
	// outbox events name; concurrency the connections per path.
	rate        float64
	users       int
	concurrency int
	// killAfter is the range of the random moment of each round's kill
	// after its load began; loadAfter how long the load goes on after the
	// restart.
	killAfter [2]time.Duration
	loadAfter time.Duration
}

const (
	killRoundsN = 5
	// limitSlack is the timing jitter the fake Bot API forgives when it
	// enforces limits, and the window checks with it: on a loaded two-core
	// machine its own goroutines stall now and then and serve a few paced
	// sends within a millisecond of each other (TestTwoServesShareOneBot).
	limitSlack = 250 * time.Millisecond
	// partitionLeaseTTL is the referral group's partition lease (the queue
	// package's default). A survivor looks for free partitions every third
	// of it, so a dead instance's partitions are taken within the TTL and
	// a third of it after its last renewal; the bound adds load's slack.
	partitionLeaseTTL = 30 * time.Second
	takeoverBound     = partitionLeaseTTL*4/3 + 5*time.Second
)

// killRounds starts the instances, loads them, and five times kills one at
// a random moment and restarts it on the same address; then it lets the
// fleet drain and checks what the load was promised.
func killRounds(t *testing.T, o roundsOpts) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d instances", seed, o.instances)
	rng := rand.New(rand.NewPCG(seed, 1))

	f := newFleet(t, o)
	for i := range o.instances {
		f.start(i)
	}
	// The users outbox events name have started the bot, so it can DM them.
	bot := f.fake.Bot(f.botToken)
	for i := range o.users {
		id, _ := strconv.ParseInt(loadtest.OutboxTelegramID(int64(i)), 10, 64)
		if _, err := bot.Start(telego.User{ID: id, FirstName: "User", Username: fmt.Sprintf("crash_user_%d", i)}, ""); err != nil {
			t.Fatalf("start user %d: %v", i, err)
		}
	}
	conn, threads := f.connectCustomers(crashCustomers)
	for _, fault := range o.faults {
		f.fake.AddFault(fault)
	}

	watchCtx, stopWatch := context.WithCancel(context.Background())
	owners := f.watchOwners(watchCtx)
	acc := &accepted{items: map[loadtest.Path][]loadtest.Item{}}
	runBase := time.Now().Unix() % 100_000 * 100
	// The victims are random, each instance in turn before any twice, so
	// whichever holds the single-flight work and the partitions dies.
	var victims []int
	for len(victims) < killRoundsN {
		victims = append(victims, rng.Perm(o.instances)...)
	}
	for round := range killRoundsN {
		ctx, cancel := context.WithCancel(context.Background())
		run := runBase + int64(round)
		done := make(chan error, 1)
		go func() {
			_, err := loadtest.Run(ctx, loadtest.Opts{
				BaseURLs: f.bases(), AdminToken: crashAdmin, BotSecret: crashBotSec, WebhookSecret: crashOmniHook,
				Rate: o.rate, Duration: time.Minute, Concurrency: o.concurrency, Customers: crashCustomers, OutboxUsers: o.users,
				BusinessConnection: conn, RunID: run, OnAccepted: acc.add, Drain: time.Millisecond,
			})
			done <- err
		}()
		replied := make(chan struct{})
		go func() {
			defer close(replied)
			replyLoad(ctx, f.bases(), threads, replyRate, run, acc.add)
		}()
		time.Sleep(o.killAfter[0] + time.Duration(rng.Int64N(int64(o.killAfter[1]-o.killAfter[0])))) // a random moment
		victim := victims[round]
		f.kill(victim)
		// The others carry the load while it restarts.
		f.start(victim)
		time.Sleep(o.loadAfter)
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("round %d: the load: %v", round+1, err)
		}
		<-replied
		acc.mu.Lock()
		t.Logf("round %d: killed and restarted instance %d; acknowledged so far: webhook %d, outbox %d, topic %d, reply %d", round+1, victim,
			len(acc.items[loadtest.PathWebhook]), len(acc.items[loadtest.PathOutbox]), len(acc.items[loadtest.PathTopic]), len(acc.items[pathReply]))
		acc.mu.Unlock()
	}
	f.fake.ClearFaults()

	// Drain: a send claimed when its process died is retried once its
	// claim (30 s) runs out, and a dead instance's partitions and leases
	// are taken when theirs do, so allow for that.
	v := newVerifier(t, f.bases())
	testwait.Until(t, 50*time.Second, "drained", func() bool { return v.drained(t) }, func() string { return v.lastWhy })
	t.Run("every acknowledged webhook is stored once, in order per thread", func(t *testing.T) {
		v.checkWebhooks(t, acc.items[loadtest.PathWebhook])
	})
	t.Run("every acknowledged publish is consumed once, in order per key", func(t *testing.T) {
		v.checkTopic(t, acc.items[loadtest.PathTopic])
	})
	t.Run("every acknowledged emit is processed in order per user, and its DM sent", func(t *testing.T) {
		v.checkOutbox(t, acc.items[loadtest.PathOutbox], f.fake, f.botToken, o.faults != nil)
	})
	t.Run("every acknowledged operator reply is stored once and delivered, in order per thread", func(t *testing.T) {
		v.checkReplies(t, acc.items[pathReply], f.fake, f.omniTok)
	})
	t.Run("partitions are owned by live instances only and move to the survivors within the lease after each kill", func(t *testing.T) {
		owners.check(t, f)
	})
	stopWatch()
	if o.limits != nil {
		t.Run("Telegram's limits held for the whole fleet, with no 429", func(t *testing.T) {
			if !checkTelegramLimits(t, f.fake, *o.limits) {
				f.logLeases(t)
			}
		})
	}
	for _, p := range f.procs {
		p.stop(t)
	}
}

// fleet is instances of the binary on one database, each on its own
// address, with the same secrets and one fake Bot API.
type fleet struct {
	t                 *testing.T
	db                string
	env               []string
	addrs             []string
	procs             []*process // the running one of each instance
	all               []*process // every process started, for diagnostics
	fake              *fakebot.Server
	botToken, omniTok string

	mu    sync.Mutex
	lives map[int]life // by pid
}

// life is when a process started and when it was killed (zero: never).
type life struct{ started, killed time.Time }

func newFleet(t *testing.T, o roundsOpts) *fleet {
	fake := fakebot.New(fakebot.Opts{MaxCalls: 1_000_000, Limits: o.limits, LimitSlack: limitSlack})
	tg := httptest.NewServer(fake)
	t.Cleanup(func() { tg.Close(); fake.Close() })
	f := &fleet{
		t: t, db: storetest.Source(t), fake: fake,
		botToken: fakebot.Token(7100000001), omniTok: fakebot.Token(7100000002),
		procs: make([]*process, o.instances), lives: map[int]life{},
	}
	f.env = []string{
		"SWITCHYARD_ADMIN_TOKEN=" + crashAdmin, "BOT_TO_BACKEND_SECRET=" + crashBotSec,
		"OMNI_WEBHOOK_SECRET=" + crashOmniHook, "BOT_TELEGRAM_WEBHOOK_SECRET=" + crashBotHook,
		"BOT_TELEGRAM_TOKEN=" + f.botToken, "OMNI_TELEGRAM_TOKEN=" + f.omniTok, "TELEGRAM_API_URL=" + tg.URL,
	}
	for range o.instances {
		f.addrs = append(f.addrs, freeAddr(t))
	}
	return f
}

// bases are the instances' base URLs, in instance order.
func (f *fleet) bases() []string {
	var out []string
	for _, a := range f.addrs {
		out = append(out, "http://"+a)
	}
	return out
}

// start runs instance i on its address and waits until it is healthy.
func (f *fleet) start(i int) {
	f.t.Helper()
	p := startArgs(f.t, []string{"serve", "--db", f.db, "--addr", f.addrs[i], "--log-format", "json", "--log-level", "info"}, f.env)
	f.mu.Lock()
	f.procs[i] = p
	f.all = append(f.all, p)
	f.lives[p.cmd.Process.Pid] = life{started: time.Now()}
	f.mu.Unlock()
	waitHealthy(f.t, "http://"+f.addrs[i])
}

// kill sends instance i SIGKILL and waits for it to exit.
func (f *fleet) kill(i int) {
	f.t.Helper()
	p := f.procs[i]
	f.mu.Lock()
	l := f.lives[p.cmd.Process.Pid]
	l.killed = time.Now()
	f.lives[p.cmd.Process.Pid] = l
	f.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil {
		f.t.Fatal(err)
	}
	p.done <- <-p.done // wait for the exit; keep it for the cleanup
}

// livesNow is every process's start and, if it was killed, its kill.
func (f *fleet) livesNow() map[int]life {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.lives)
}

// livePids are the processes running now.
func (f *fleet) livePids() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int
	for _, p := range f.procs {
		out = append(out, p.cmd.Process.Pid)
	}
	return out
}

// connectCustomers connects the business account to the inbox bot and has
// each of n load-test customers (and the load's probe) write once through
// the fake Bot API, so that it knows the chats the acknowledgements and the
// operators' replies go to; it returns the connection's id and the
// customers' threads.
func (f *fleet) connectCustomers(n int) (string, []int64) {
	t := f.t
	t.Helper()
	inbox := f.fake.Bot(f.omniTok)
	testwait.Until(t, 30*time.Second, "the inbox webhook is set", func() bool { return webhookSet(f.fake, f.omniTok) })
	conn, err := inbox.ConnectBusiness(telego.User{ID: 900, FirstName: "Shop"}, telego.BusinessBotRights{CanReply: true})
	if err != nil {
		t.Fatal(err)
	}
	// The customers write at once: the chat role may take a message before
	// the connection, whose order key is another, and then holds it back
	// until the connection is in, so every first message is acknowledged.
	v := newVerifier(t, f.bases())
	customers := []int64{loadtest.ProbeChatID}
	for i := range n {
		customers = append(customers, loadtest.CustomerChatID(int64(i)))
	}
	for _, id := range customers {
		if _, err := inbox.BusinessMessage(conn.ID, telego.User{ID: id, FirstName: "Customer"}, "hello"); err != nil {
			t.Fatal(err)
		}
	}
	var threads []int64
	testwait.Until(t, 30*time.Second, "every customer's thread, acknowledged", func() bool {
		var list struct {
			Threads []struct{ ID int64 }
		}
		v.get(t, "/admin/api/omni/threads?limit=500", &list)
		threads = threads[:0]
		for _, th := range list.Threads {
			threads = append(threads, th.ID)
		}
		return len(threads) == len(customers) && len(sendsOf(f.fake, f.omniTok)) >= len(customers)
	}, func() string {
		return fmt.Sprintf("%d threads, %d acknowledgements", len(threads), len(sendsOf(f.fake, f.omniTok)))
	})
	return conn.ID, threads
}

// sendsOf are the messages the fake delivered for the bot of token.
func sendsOf(fake *fakebot.Server, token string) []fakebot.Call {
	var out []fakebot.Call
	for _, c := range okSends(fake) {
		if c.Token == token {
			out = append(out, c)
		}
	}
	return out
}

const (
	crashCustomers = 30
	// pathReply is operators' replies (POST /admin/api/omni/threads/{id}/messages),
	// posted by replyLoad next to the load tool's paths.
	pathReply loadtest.Path = "reply"
	// replyRate is operators' replies a second: each thread gets one every
	// few seconds, and a backlog after a takeover still fits the bot's rate.
	replyRate = 5
)

// replyText is reply n of a run.
func replyText(run, n int64) string {
	return fmt.Sprintf("Ответ оператора %d/%d", run, n)
}

// replyLoad posts operators' replies to threads, in turn, at replyRate a
// second, through every instance in turn, until ctx ends; add gets each
// reply answered 202 (Key its message id, Subject its thread, Seq its n).
func replyLoad(ctx context.Context, bases []string, threads []int64, perSecond float64, run int64, add func(loadtest.Item)) {
	rr, err := loadtest.NewRoundRobin(bases, nil)
	if err != nil {
		panic(err)
	}
	hc := &http.Client{Transport: rr, Timeout: 30 * time.Second}
	lim := rate.NewLimiter(rate.Limit(perSecond), 1)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for lim.Wait(ctx) == nil {
				n := next.Add(1)
				thread := threads[int(n)%len(threads)]
				body, _ := json.Marshal(map[string]string{"text": replyText(run, n)})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/admin/api/omni/threads/%d/messages", rr.Base(), thread), bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+crashAdmin)
				req.Header.Set("Content-Type", "application/json")
				sent := time.Now()
				resp, err := hc.Do(req)
				if err != nil {
					continue // an instance killed mid-request, or the round ended
				}
				var out struct{ MessageID int64 }
				ok := resp.StatusCode == http.StatusAccepted && json.NewDecoder(resp.Body).Decode(&out) == nil
				resp.Body.Close()
				if ok {
					add(loadtest.Item{Path: pathReply, Key: strconv.FormatInt(out.MessageID, 10), Subject: strconv.FormatInt(thread, 10),
						Seq: n, Run: run, Sent: sent, Acked: time.Now()})
				}
			}
		})
	}
	wg.Wait()
}

// ownerPid reads the process id out of a lease owner, which
// store.NewOwnerID makes host:pid:random (with a prefix naming its kind).
var ownerPid = regexp.MustCompile(`:(\d+):[0-9a-f]+$`)

// ownerSample is who owned each partition of the referral group, as one
// GET /admin/api/topics saw it.
type ownerSample struct {
	sent, at time.Time
	// owners maps a partition to its owner's pid: 0 when free (no owner, or
	// its lease had expired), -1 when the owner names no pid.
	owners map[int]int
	raw    map[int]string
}

// ownerWatch samples the partitions' owners until its context ends.
type ownerWatch struct {
	mu      sync.Mutex
	samples []ownerSample
	shown   bool // the API shows owners at all
	errs    []string
	done    chan struct{}
}

// watchOwners polls the referral group's partitions every 200 ms through
// every instance in turn.
func (f *fleet) watchOwners(ctx context.Context) *ownerWatch {
	w := &ownerWatch{done: make(chan struct{})}
	rr, err := loadtest.NewRoundRobin(f.bases(), nil)
	if err != nil {
		f.t.Fatal(err)
	}
	hc := &http.Client{Transport: rr, Timeout: 10 * time.Second}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			w.sample(ctx, hc, rr.Base())
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *ownerWatch) sample(ctx context.Context, hc *http.Client, base string) {
	var out struct {
		Topics []struct {
			Name   string
			Groups []struct {
				Group      string
				Partitions []struct {
					Partition      int
					Owner          *string
					LeaseExpiresAt *time.Time
				}
			}
		}
	}
	sent := time.Now()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/api/topics", nil)
	req.Header.Set("Authorization", "Bearer "+crashAdmin)
	resp, err := hc.Do(req)
	if err != nil {
		return // every instance down or restarting, or the watch ended
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		w.mu.Lock()
		w.errs = append(w.errs, fmt.Sprintf("%s GET /admin/api/topics: %s", sent.Format(time.StampMilli), resp.Status))
		w.mu.Unlock()
		return
	}
	at := time.Now()
	s := ownerSample{sent: sent, at: at, owners: map[int]int{}, raw: map[int]string{}}
	shown := false
	for _, topic := range out.Topics {
		if topic.Name != referral.TopicIdentityUsers {
			continue
		}
		for _, g := range topic.Groups {
			if g.Group != referral.ConsumerGroup {
				continue
			}
			for _, p := range g.Partitions {
				shown = shown || p.Owner != nil
				if p.Owner == nil || *p.Owner == "" || (p.LeaseExpiresAt != nil && !p.LeaseExpiresAt.After(sent)) {
					s.owners[p.Partition] = 0
					continue
				}
				s.raw[p.Partition] = *p.Owner
				s.owners[p.Partition] = -1
				if m := ownerPid.FindStringSubmatch(*p.Owner); m != nil {
					s.owners[p.Partition], _ = strconv.Atoi(m[1])
				}
			}
		}
	}
	w.mu.Lock()
	w.shown = w.shown || shown
	w.samples = append(w.samples, s)
	w.mu.Unlock()
}

// check holds the samples against the fleet's starts and kills
// (judgeOwners), then waits until every partition has a live owner and
// every instance owns one.
func (w *ownerWatch) check(t *testing.T, f *fleet) {
	w.mu.Lock()
	samples, shown, errs := slices.Clone(w.samples), w.shown, slices.Clone(w.errs)
	w.mu.Unlock()
	for _, e := range errs {
		t.Error(e)
	}
	if !shown {
		t.Skip("GET /admin/api/topics shows no partition owner (queue.GroupPartitionStats Owner and LeaseExpiresAt, issue 17): ownership not checked")
	}
	problems, takeovers := judgeOwners(samples, f.livesNow(), takeoverBound)
	for _, p := range problems {
		t.Error(p)
	}
	for _, to := range takeovers {
		t.Log(to)
	}
	t.Logf("%d samples of the partitions' owners", len(samples))

	// In the end every partition has a live owner, and each instance has
	// its share: the last instance restarted takes partitions from the
	// others once they balance.
	rr, err := loadtest.NewRoundRobin(f.bases(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: rr, Timeout: 10 * time.Second}
	var last ownerSample
	var sampledAt time.Time
	balanced := func() bool {
		if time.Since(sampledAt) < 200*time.Millisecond {
			return false
		}
		sampledAt = time.Now()
		w.sample(context.Background(), hc, rr.Base())
		w.mu.Lock()
		last = w.samples[len(w.samples)-1]
		w.mu.Unlock()
		per := map[int]int{}
		for _, pid := range last.owners {
			per[pid]++
		}
		for _, pid := range f.livePids() {
			if per[pid] == 0 {
				return false
			}
			delete(per, pid)
		}
		return len(per) == 0 && len(last.owners) == referral.IdentityPartitions
	}
	testwait.Until(t, takeoverBound, "every partition owned by a live instance, and every instance owning one", balanced, func() string {
		return fmt.Sprintf("live pids %v, owners %v", f.livePids(), last.raw)
	})
	t.Logf("in the end: live pids %v own %v", f.livePids(), last.owners)
}

// judgeOwners holds samples of the partitions' owners against the
// processes' lives: a partition is owned only by one of the fleet's
// processes, by a killed one no longer than bound after its kill, and is
// never without a live owner for longer than bound. It returns what broke
// those rules, and how long each kill's partitions took to move.
func judgeOwners(samples []ownerSample, lives map[int]life, bound time.Duration) (problems, takeovers []string) {
	reported := map[string]bool{}
	report := func(key, format string, args ...any) {
		if !reported[key] {
			reported[key] = true
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	noLiveOwnerSince := map[int]time.Time{} // partition → first sample without a live owner
	lastOwned := map[int]time.Time{}        // pid → the last sample it owned a partition in
	for _, s := range samples {
		for p, pid := range s.owners {
			l, ours := lives[pid]
			switch {
			case pid == -1:
				report("raw "+s.raw[p], "partition %d is owned by %q, which names no process id (want store.NewOwnerID's host:pid:random)", p, s.raw[p])
			case pid != 0 && !ours:
				report("stranger "+s.raw[p], "%s: partition %d is owned by %q, not one of the fleet's processes", s.at.Format(time.StampMilli), p, s.raw[p])
			case pid != 0 && !l.killed.IsZero() && s.sent.After(l.killed.Add(bound)):
				report(fmt.Sprintf("dead %d/%d", pid, p), "%s: partition %d is still owned by pid %d, killed at %s, more than %s before",
					s.at.Format(time.StampMilli), p, pid, l.killed.Format(time.StampMilli), bound)
			}
			if pid > 0 {
				lastOwned[pid] = s.at
			}
			live := pid > 0 && ours && (l.killed.IsZero() || l.killed.After(s.at))
			since, waiting := noLiveOwnerSince[p]
			switch {
			case live:
				delete(noLiveOwnerSince, p)
			case !waiting:
				noLiveOwnerSince[p] = s.sent
			case s.at.Sub(since) > bound:
				report(fmt.Sprintf("orphan %d/%s", p, since), "partition %d had no live owner from %s to at least %s, more than %s",
					p, since.Format(time.StampMilli), s.at.Format(time.StampMilli), bound)
			}
		}
	}
	for pid, l := range lives {
		if owned, ok := lastOwned[pid]; ok && !l.killed.IsZero() && owned.After(l.killed) {
			takeovers = append(takeovers, fmt.Sprintf("pid %d killed at %s: its partitions moved within %s", pid,
				l.killed.Format(time.StampMilli), owned.Sub(l.killed).Round(100*time.Millisecond)))
		}
	}
	slices.Sort(takeovers)
	return problems, takeovers
}

// checkTelegramLimits holds the fake Bot API's log of delivered messages
// against limits: in any window of one second less limitSlack (the jitter
// the fake forgives), no bot sent more than its rate and no chat got more
// than its; and the fake answered no send with 429. It reports whether all
// held.
func checkTelegramLimits(t *testing.T, fake *fakebot.Server, limits telegram.Limits) bool {
	held := true
	fail := func(format string, args ...any) {
		t.Helper()
		held = false
		t.Errorf(format, args...)
	}
	perBot, perChat := map[int64][]fakebot.Call{}, map[string][]fakebot.Call{}
	for _, c := range fake.CallsTo("sendMessage") {
		chat := fmt.Sprintf("%d/%s", c.BotID, c.Params["chat_id"])
		if c.ErrorCode == http.StatusTooManyRequests && c.Fault == "" {
			fail("%s: a send of bot %d to chat %s was answered 429 (%s); the chat's sends before it: %s; the bot's in the second before: %d",
				c.At.Format(time.StampMilli), c.BotID, c.Params["chat_id"], c.Description, sendTimes(perChat[chat]), len(sinceCalls(perBot[c.BotID], c.At.Add(-time.Second))))
		}
		if c.OK {
			perBot[c.BotID] = append(perBot[c.BotID], c)
			perChat[chat] = append(perChat[chat], c)
		}
	}
	if n := fake.RateLimited(); n != 0 {
		fail("the fake Bot API answered %d sends with 429", n)
	}
	window := time.Second - limitSlack
	for bot, calls := range perBot {
		if peak, at := fakebot.PeakCalls(calls, window); peak > int(limits.Bot.Rate) {
			fail("bot %d: %d messages in the %s from %s, want at most %d", bot, peak, window, at.Format(time.StampMilli), int(limits.Bot.Rate))
		}
	}
	busiest := 0
	for chat, calls := range perChat {
		peak, at := fakebot.PeakCalls(calls, window)
		if peak > int(limits.Chat.Rate) {
			fail("chat %s: %d messages in the %s from %s, want at most %d", chat, peak, window, at.Format(time.StampMilli), int(limits.Chat.Rate))
		}
		busiest = max(busiest, len(calls))
	}
	t.Logf("telegram: %d messages from %d bots to %d chats (at most %d to one chat)", len(okSends(fake)), len(perBot), len(perChat), busiest)
	return held
}

// sendTimes are when the last few calls were answered.
func sendTimes(calls []fakebot.Call) string {
	var out []string
	for _, c := range calls[max(len(calls)-3, 0):] {
		out = append(out, c.At.Format(time.StampMilli))
	}
	return strings.Join(out, ", ")
}

// sinceCalls are the calls answered from since on.
func sinceCalls(calls []fakebot.Call, since time.Time) []fakebot.Call {
	i := len(calls)
	for i > 0 && calls[i-1].At.After(since) {
		i--
	}
	return calls[i:]
}

// logLeases shows every process's lease lines: who held which
// single-flight work when.
func (f *fleet) logLeases(t *testing.T) {
	for _, p := range f.all {
		var lines []string
		for line := range strings.Lines(p.stderr.String()) {
			if strings.Contains(line, `"lease`) || strings.Contains(line, "standing by") {
				lines = append(lines, strings.TrimSpace(line))
			}
		}
		t.Logf("pid %d leases:\n%s", p.cmd.Process.Pid, strings.Join(lines, "\n"))
	}
}

// TestJudgeOwners: the fleet test's ownership rules catch each way a
// partition can be owned wrongly.
func TestJudgeOwners(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// pid 10 is killed at 10 s; 11 lives throughout; 12 starts at 11 s.
	lives := map[int]life{10: {started: t0, killed: at(10)}, 11: {started: t0}, 12: {started: at(11)}}
	sample := func(s float64, owners ...int) ownerSample {
		o := ownerSample{sent: at(s - 0.1), at: at(s), owners: map[int]int{}, raw: map[int]string{}}
		for p, pid := range owners {
			o.owners[p] = pid
			o.raw[p] = fmt.Sprintf("sub/vm:%d:0badcafe", pid)
		}
		return o
	}
	const bound = 5 * time.Second
	for _, tc := range []struct {
		name    string
		samples []ownerSample
		want    string // a problem that must be reported; "" for none
	}{
		{"a dead instance's partitions taken within the bound pass", []ownerSample{
			sample(1, 10, 10, 10, 11, 11, 11), sample(12, 10, 10, 10, 11, 11, 11), sample(14, 12, 12, 11, 11, 11, 12),
		}, ""},
		{"a partition a killed instance still owns past the bound fails", []ownerSample{
			sample(1, 10, 10, 10, 11, 11, 11), sample(16, 10, 11, 11, 11, 12, 12),
		}, "partition 0 is still owned by pid 10"},
		{"a partition without a live owner for longer than the bound fails", []ownerSample{
			sample(1, 10, 10, 10, 11, 11, 11), sample(11, 0, 0, 0, 11, 11, 11), sample(14, 0, 12, 12, 11, 11, 11), sample(16.5, 0, 12, 12, 11, 11, 11),
		}, "partition 0 had no live owner"},
		{"an owner that is not one of the fleet's processes fails", []ownerSample{
			sample(1, 10, 10, 10, 11, 11, 99),
		}, "not one of the fleet's processes"},
		{"an owner that names no process id fails", []ownerSample{
			sample(1, 10, 10, 10, 11, 11, -1),
		}, "names no process id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, _ := judgeOwners(tc.samples, lives, bound)
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Fatalf("problems %q, want none", problems)
			case tc.want != "" && !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tc.want) }):
				t.Fatalf("problems %q, want one saying %q", problems, tc.want)
			}
		})
	}
}
