// Package loadtest drives a running Switchyard through its public paths only
// — Telegram webhooks, outbox emits drained by a client of the /bot/* contract,
// and topic publishes — and measures what it sees: per path the throughput,
// p50/p95/p99 latency and errors, and for consumers the delay from an accepted
// request to its effect being visible (accepted → handled).
//
// A soak (Opts.ReportEvery, Opts.TopicUsers, Opts.Tally) runs a fixed rate
// for a long time over a bounded key space and closes an Interval row every
// ReportEvery — per path the throughput, p99 and accepted → handled lag of
// that interval, and the instance's RSS, database and WAL size — and at the
// end counts, through the public APIs, that every accepted request took
// effect once (Tally).
//
// It drives one instance or several instances of one deployment, each
// request to the next in turn (RoundRobin), as a load balancer would. It is
// the engine of `switchyard loadtest` and of the crash and fleet suites,
// which use OnAccepted to remember every request the server acknowledged,
// and read what the load promised from what each request carries: a
// webhook's customer and message, an emit's partner (PartnerName, which the
// DM names), a publish's snapshot (TopicPlan).
package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Path is one public path the load goes through.
type Path string

// The paths.
const (
	PathWebhook Path = "webhook" // POST /webhooks/telegram, business messages
	PathOutbox  Path = "outbox"  // POST /admin/api/bot/events, drained via /bot/events/pending + ack
	PathTopic   Path = "topic"   // POST /admin/api/topics/pin.identity.users.v1/messages
)

// AllPaths is every path, in report order.
var AllPaths = []Path{PathWebhook, PathOutbox, PathTopic}

// ParsePaths reads a comma-separated list such as "webhook,topic" or "all".
func ParsePaths(s string) ([]Path, error) {
	if s == "" || s == "all" {
		return slices.Clone(AllPaths), nil
	}
	var out []Path
	for _, p := range strings.Split(s, ",") {
		p := Path(strings.TrimSpace(p))
		if !slices.Contains(AllPaths, p) {
			return nil, fmt.Errorf("unknown path %q (known: webhook, outbox, topic, all)", p)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Item is one request the server acknowledged.
type Item struct {
	Path Path
	// Key identifies what was accepted: the webhook's update_id, the emitted
	// event's id, or the published messageId.
	Key string
	// Subject is the entity the request concerns: the customer's chat id, the
	// event's Telegram id, or the identity event's UserId.
	Subject string
	// Seq orders the items of one subject as they were acknowledged.
	Seq int64
	// Run is the RunID of the run that sent it.
	Run int64
	// Sent and Acked are when the request went out and when its
	// acknowledgement came back. Requests of one subject that overlapped have
	// no order between them; one acknowledged before another was sent must
	// take effect first.
	Sent, Acked time.Time
}

// Opts configure Run.
type Opts struct {
	// BaseURL of the running instance, e.g. http://127.0.0.1:8080.
	BaseURL string
	// BaseURLs are several instances of one deployment (after BaseURL, when
	// both are set): the requests go to each in turn, and one an instance
	// refuses to connect goes to the next (RoundRobin).
	BaseURLs []string
	// AdminToken authorises the admin API (emits, publishes, probes).
	AdminToken string
	// BotSecret is BOT_TO_BACKEND_SECRET, for the outbox consumer client.
	BotSecret string
	// WebhookSecret is OMNI_WEBHOOK_SECRET, sent as Telegram sends it.
	WebhookSecret string

	// Paths to load; all when empty.
	Paths []Path
	// Rate is requests per second per path; 0 is flat out.
	Rate float64
	// Duration bounds the run; Count bounds requests per path. Whichever
	// comes first ends it; with neither, the run lasts 10 s.
	Duration time.Duration
	Count    int
	// Concurrency is the number of connections per path (default 64 for
	// webhooks, 16 otherwise).
	Concurrency int
	// Batch is how many records one request of the topic path publishes
	// (default 1: one JSON object a request); above 1, the records go as
	// one JSON-lines batch. Rate and Count then count records, and each
	// record's latency is its request's.
	Batch int
	// Consume runs a consumer of the outbox contract that drains what the
	// outbox path emits and measures emit → acknowledged. Run the instance
	// without the bot role, or the two consumers share the events.
	Consume bool
	// NoWebhookProbes sends no webhook probes: accepted → handled is not
	// measured for webhooks and the operators' API is not polled, for an
	// instance that runs the inbound role without the chat role (an ingest
	// benchmark), where no probe would ever be handled.
	NoWebhookProbes bool
	// Customers is how many Telegram customers write to the business inbox
	// (default 50); OutboxUsers how many Telegram users outbox events name
	// (default 1000). Identity events upsert a new user per request, unless
	// TopicUsers bounds them.
	Customers   int
	OutboxUsers int
	// TopicUsers, when above zero, has the topic path cycle through that
	// many identity users of the run, each publish the user's next version
	// (SoakTopicPlan), instead of a new user per request (TopicPlan): with
	// every path on a bounded key space, what stays in the database is
	// bounded by retention, so a soak can see its size level off.
	TopicUsers int
	// BusinessConnection is the Telegram Business connection customers
	// write through (default BusinessConnectionID): a test whose fake Bot
	// API has a connection passes its id, so that replies to the customers
	// can be delivered.
	BusinessConnection string
	// Drain is how long to wait after the load for consumers to catch up
	// (default 30 s).
	Drain time.Duration
	// RunID makes this run's ids unique (default: the start time).
	RunID int64

	// ReportEvery, when above zero, closes an Interval every ReportEvery
	// while the load runs, and one for the rest when it ends (Report.Intervals).
	ReportEvery time.Duration
	// OnInterval gets each Interval as it closes, from one goroutine.
	OnInterval func(Interval)
	// PID is the instance's process, whose VmRSS an Interval reads when
	// /metrics has no process_resident_memory_bytes (0: none). Database is
	// its --db: a SQLite file whose size (and its -wal's) an Interval reads
	// when /metrics has no store gauges ("" or a postgres:// URL: none).
	PID      int
	Database string
	// Tally counts, after the drain, the effect of every accepted request
	// through the operators' APIs (Report.Tally, see Tally). It needs
	// Consume for the outbox path, and at most MaxTallyCustomers customers.
	Tally bool

	// Progress gets a line a second while the run lasts; nil is silent.
	Progress io.Writer
	// OnAccepted is called for every acknowledged request (any goroutine).
	OnAccepted func(Item)
	// Client sends the requests (default: one with keep-alive for all
	// connections); with several base URLs Run balances through a copy of it
	// whose transport is a RoundRobin over its own.
	Client *http.Client
}

// Report is what a run measured.
type Report struct {
	Elapsed time.Duration
	Paths   []PathReport
	// Intervals are the rows of Opts.ReportEvery, in order.
	Intervals []Interval
	// Tally is the count of effects (Opts.Tally), nil without it.
	Tally *Tally
}

// PathReport is one path's figures.
type PathReport struct {
	Path      Path
	Sent      int64
	Accepted  int64
	Errors    map[string]int64 // by status code or "network"
	PerSecond float64
	P50, P95  time.Duration
	P99, Max  time.Duration
	// EndToEnd is accepted → handled, measured on every item (outbox) or on
	// probes sent during the run (webhook, topic).
	EndToEnd Latency
	// Batch is the records a request carried, when more than 1 (Opts.Batch):
	// the counts and rates are records', the latencies their requests'.
	Batch int
}

// Latency summarises a set of delays.
type Latency struct {
	Count         int
	P50, P95, P99 time.Duration
	Max           time.Duration
}

func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Latency{Count: len(ds), P50: at(.50), P95: at(.95), P99: at(.99), Max: ds[len(ds)-1]}
}

// recorder collects one path's results.
type recorder struct {
	path     Path
	sent     atomic.Int64
	accepted atomic.Int64
	mu       sync.Mutex
	errors   map[string]int64
	lat      []time.Duration
	e2e      []time.Duration
	// cut is where the open interval began: the lengths of lat and e2e and
	// the errors counted by then.
	cut struct {
		lat, e2e int
		errors   int64
	}
}

func newRecorder(p Path) *recorder { return &recorder{path: p, errors: map[string]int64{}} }

func (r *recorder) ok(d time.Duration) {
	r.accepted.Add(1)
	r.mu.Lock()
	r.lat = append(r.lat, d)
	r.mu.Unlock()
}

func (r *recorder) failN(kind string, n int) {
	r.mu.Lock()
	r.errors[kind] += int64(n)
	r.mu.Unlock()
}

func (r *recorder) handled(d time.Duration) {
	r.mu.Lock()
	r.e2e = append(r.e2e, d)
	r.mu.Unlock()
}

// interval closes the open interval at now, which began at since: its
// figures, and a new one begins.
func (r *recorder) interval(since, now time.Time) IntervalPath {
	r.mu.Lock()
	lat, e2e := slices.Clone(r.lat[r.cut.lat:]), slices.Clone(r.e2e[r.cut.e2e:])
	nerr := r.errorCount()
	errs := nerr - r.cut.errors
	r.cut.lat, r.cut.e2e, r.cut.errors = len(r.lat), len(r.e2e), nerr
	r.mu.Unlock()
	l, e := summarize(lat), summarize(e2e)
	return IntervalPath{
		Path: r.path, Accepted: int64(len(lat)), Errors: errs,
		PerSecond: float64(len(lat)) / now.Sub(since).Seconds(),
		P99:       millis(l.P99), Handled: e.Count, HandledP99: millis(e.P99),
	}
}

func (r *recorder) report(elapsed time.Duration) PathReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := summarize(slices.Clone(r.lat))
	errs := map[string]int64{}
	for k, v := range r.errors {
		errs[k] = v
	}
	return PathReport{
		Path: r.path, Sent: r.sent.Load(), Accepted: r.accepted.Load(), Errors: errs,
		PerSecond: float64(r.accepted.Load()) / elapsed.Seconds(),
		P50:       l.P50, P95: l.P95, P99: l.P99, Max: l.Max,
		EndToEnd: summarize(slices.Clone(r.e2e)),
	}
}

// batchSender is a generator whose one request can carry several of the
// load's requests (records): sendBatch makes requests first …
// first+count-1 and sends them together, returning their items in order.
type batchSender interface {
	sendBatch(ctx context.Context, first int64, count int) ([]Item, error)
}

// generator makes and sends one path's requests.
type generator interface {
	// prepare sets up what the load needs (a referral link, say).
	prepare(ctx context.Context) error
	// send makes request n and sends it; it returns the item on a 2xx.
	send(ctx context.Context, n int64) (Item, error)
	// background runs alongside the load (consumers, probes) until ctx ends.
	background(ctx context.Context, rec *recorder)
	// drained reports whether everything accepted was handled.
	drained(ctx context.Context) bool
	// waiting is when the oldest accepted request whose effect is timed
	// (an outbox event, a probe) was accepted, zero when none waits.
	waiting() time.Time
	// tally counts what the path's accepted requests did (Opts.Tally).
	tally(ctx context.Context, t *Tally) error
}

// statusError is a non-2xx answer.
type statusError struct{ code int }

func (e statusError) Error() string { return fmt.Sprintf("HTTP %d", e.code) }

func errorKind(err error) string {
	var se statusError
	if errors.As(err, &se) {
		return fmt.Sprint(se.code)
	}
	return "network"
}

// Run drives the load and returns the report. It returns early, with what
// it measured, when ctx is cancelled.
func Run(ctx context.Context, opts Opts) (Report, error) {
	bases := opts.BaseURLs
	if opts.BaseURL != "" {
		bases = append([]string{opts.BaseURL}, bases...)
	}
	if len(bases) == 0 || opts.AdminToken == "" {
		return Report{}, errors.New("loadtest: a base URL and AdminToken are required")
	}
	if len(opts.Paths) == 0 {
		opts.Paths = slices.Clone(AllPaths)
	}
	if opts.Duration <= 0 && opts.Count <= 0 {
		opts.Duration = 10 * time.Second
	}
	if opts.Customers <= 0 {
		opts.Customers = 50
	}
	if opts.OutboxUsers <= 0 {
		opts.OutboxUsers = 1000
	}
	if opts.BusinessConnection == "" {
		opts.BusinessConnection = BusinessConnectionID
	}
	if opts.Drain <= 0 {
		opts.Drain = 30 * time.Second
	}
	if opts.RunID == 0 {
		opts.RunID = time.Now().Unix()
	}
	if opts.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		tr.MaxConnsPerHost = 0
		opts.Client = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	}
	// Every request is made to the first base URL; with several, the
	// client's transport sends each to the next instance.
	opts.BaseURL = strings.TrimRight(bases[0], "/")
	if len(bases) > 1 {
		rr, err := NewRoundRobin(bases, opts.Client.Transport)
		if err != nil {
			return Report{}, err
		}
		c := *opts.Client
		c.Transport = rr
		opts.Client = &c
	}
	if slices.Contains(opts.Paths, PathWebhook) && opts.WebhookSecret == "" {
		return Report{}, errors.New("loadtest: the webhook path needs the webhook secret (OMNI_WEBHOOK_SECRET)")
	}
	if slices.Contains(opts.Paths, PathOutbox) && opts.Consume && opts.BotSecret == "" {
		return Report{}, errors.New("loadtest: the outbox consumer needs BOT_TO_BACKEND_SECRET")
	}
	if opts.Tally && slices.Contains(opts.Paths, PathOutbox) && !opts.Consume {
		return Report{}, errors.New("loadtest: the tally counts the outbox through its own consumer: it needs Consume")
	}
	if opts.Tally && slices.Contains(opts.Paths, PathWebhook) && opts.Customers > MaxTallyCustomers {
		return Report{}, fmt.Errorf("loadtest: the tally reads every customer's thread from one page of threads: at most %d customers", MaxTallyCustomers)
	}
	// Resources are read from the first instance, past the balancer.
	res := sampler{hc: opts.Client, base: opts.BaseURL, pid: opts.PID, db: opts.Database}

	api := &client{base: opts.BaseURL, admin: opts.AdminToken, http: opts.Client}
	gens := map[Path]generator{}
	recs := map[Path]*recorder{}
	for _, p := range opts.Paths {
		recs[p] = newRecorder(p)
		switch p {
		case PathWebhook:
			gens[p] = newWebhookGen(api, opts)
		case PathOutbox:
			gens[p] = newOutboxGen(api, opts)
		case PathTopic:
			gens[p] = newTopicGen(api, opts)
		}
	}

	for _, p := range opts.Paths {
		if err := gens[p].prepare(ctx); err != nil {
			return Report{}, fmt.Errorf("loadtest: prepare %s: %w", p, err)
		}
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	if opts.Duration > 0 {
		loadCtx, stopLoad = context.WithTimeout(ctx, opts.Duration)
	}
	defer stopLoad()
	bgCtx, stopBG := context.WithCancel(ctx)
	defer stopBG()

	start := time.Now()
	var bg, load sync.WaitGroup
	for _, p := range opts.Paths {
		bg.Go(func() { gens[p].background(bgCtx, recs[p]) })
		load.Go(func() { drive(loadCtx, ctx, opts, gens[p], recs[p]) })
	}
	progressDone := make(chan struct{})
	go progress(loadCtx, opts, recs, start, progressDone)
	rows := &intervals{opts: opts, recs: recs, gens: gens, res: res, start: start, last: start}
	rowsDone := make(chan struct{})
	go rows.run(loadCtx, ctx, rowsDone)

	load.Wait()
	stopLoad()
	<-progressDone
	<-rowsDone
	elapsed := time.Since(start)
	rows.close(ctx) // the rest, once every request has its answer

	// Let the consumers catch up, so end-to-end figures include the tail.
	deadline, cancelDrain := context.WithTimeout(ctx, opts.Drain)
	drained := map[Path]bool{}
	for _, p := range opts.Paths {
		for !drained[p] && deadline.Err() == nil {
			if drained[p] = gens[p].drained(deadline); !drained[p] {
				sleep(deadline, 100*time.Millisecond)
			}
		}
	}
	cancelDrain()
	stopBG()
	bg.Wait()

	rep := Report{Elapsed: elapsed, Intervals: rows.rows}
	for _, p := range opts.Paths {
		pr := recs[p].report(elapsed)
		if _, ok := gens[p].(batchSender); ok && opts.Batch > 1 {
			pr.Batch = opts.Batch
		}
		rep.Paths = append(rep.Paths, pr)
	}
	if opts.Tally && ctx.Err() == nil {
		t := &Tally{Drained: true}
		for _, p := range opts.Paths {
			t.Drained = t.Drained && drained[p]
			if err := gens[p].tally(ctx, t); err != nil {
				return rep, fmt.Errorf("loadtest: tally %s: %w", p, err)
			}
		}
		rep.Tally = t
	}
	return rep, ctx.Err()
}

// drive sends one path's requests from opts.Concurrency workers, paced by
// opts.Rate when set, until ctx ends or opts.Count requests were made. The
// requests are sent with sendCtx, so that the end of the load lets those in
// flight have their answer: a request the server committed is then never
// left uncounted (only the end of sendCtx, Run's, abandons them). A
// batchSender's requests go opts.Batch to a call.
func drive(ctx, sendCtx context.Context, opts Opts, g generator, rec *recorder) {
	conc := opts.Concurrency
	if conc <= 0 {
		conc = 16
		if rec.path == PathWebhook {
			conc = 64
		}
	}
	size := 1
	bs, batches := g.(batchSender)
	if batches && opts.Batch > 1 {
		size = opts.Batch
	}
	var lim *rate.Limiter
	if opts.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(opts.Rate), size)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				first := next.Add(int64(size)) - int64(size) + 1
				count := size
				if opts.Count > 0 {
					count = min(count, opts.Count-int(first)+1)
				}
				if count <= 0 {
					return
				}
				if lim != nil && lim.WaitN(ctx, count) != nil {
					return
				}
				rec.sent.Add(int64(count))
				t0 := time.Now()
				var items []Item
				var err error
				if size > 1 {
					items, err = bs.sendBatch(sendCtx, first, count)
				} else {
					var item Item
					item, err = g.send(sendCtx, first)
					items = []Item{item}
				}
				if err != nil {
					if sendCtx.Err() != nil {
						return // the run ended mid-request: not the server's fault
					}
					rec.failN(errorKind(err), count)
					continue
				}
				acked := time.Now()
				for _, item := range items {
					item.Run, item.Sent, item.Acked = opts.RunID, t0, acked
					rec.ok(acked.Sub(t0))
					if opts.OnAccepted != nil {
						opts.OnAccepted(item)
					}
				}
			}
		})
	}
	wg.Wait()
}

func progress(ctx context.Context, opts Opts, recs map[Path]*recorder, start time.Time, done chan<- struct{}) {
	defer close(done)
	if opts.Progress == nil {
		return
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			var b strings.Builder
			fmt.Fprintf(&b, "%5.0fs", time.Since(start).Seconds())
			for _, p := range opts.Paths {
				r := recs[p]
				r.mu.Lock()
				nerr := int64(0)
				for _, v := range r.errors {
					nerr += v
				}
				r.mu.Unlock()
				fmt.Fprintf(&b, "  %s %d ok %d err", p, r.accepted.Load(), nerr)
			}
			fmt.Fprintln(opts.Progress, b.String())
		}
	}
}

// Print writes the report as a table.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\nload ran %.1fs\n", r.Elapsed.Seconds())
	fmt.Fprintf(w, "%-8s %9s %9s %9s %8s %8s %8s %8s  %s\n", "path", "sent", "accepted", "per sec", "p50", "p95", "p99", "max", "errors")
	for _, p := range r.Paths {
		errs := "none"
		if len(p.Errors) > 0 {
			var parts []string
			for k, v := range p.Errors {
				parts = append(parts, fmt.Sprintf("%s×%d", k, v))
			}
			sort.Strings(parts)
			errs = strings.Join(parts, " ")
		}
		fmt.Fprintf(w, "%-8s %9d %9d %9.0f %8s %8s %8s %8s  %s\n", p.Path, p.Sent, p.Accepted, p.PerSecond,
			ms(p.P50), ms(p.P95), ms(p.P99), ms(p.Max), errs)
	}
	for _, p := range r.Paths {
		if p.Batch > 1 {
			fmt.Fprintf(w, "%-8s %d records a request: counts and rates are records, latencies each record's request\n", p.Path, p.Batch)
		}
	}
	fmt.Fprintln(w, "\naccepted → handled")
	for _, p := range r.Paths {
		e := p.EndToEnd
		if e.Count == 0 {
			fmt.Fprintf(w, "%-8s no measurement\n", p.Path)
			continue
		}
		fmt.Fprintf(w, "%-8s %6d measured  p50 %s  p95 %s  p99 %s  max %s\n", p.Path, e.Count, ms(e.P50), ms(e.P95), ms(e.P99), ms(e.Max))
	}
	if r.Tally != nil {
		r.Tally.Print(w)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }

// probeClock is when the probe a generator is timing was accepted (zero:
// none), for the soak's oldest-waiting reading.
type probeClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *probeClock) setProbe(at time.Time) {
	c.mu.Lock()
	c.at = at
	c.mu.Unlock()
}

func (c *probeClock) waiting() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}
