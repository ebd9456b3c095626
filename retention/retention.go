// Package retention runs the prunes that keep the database from growing
// for ever: on every interval, each rule deletes its tables' rows older
// than its setting, in small batches (one transaction each, at most
// BatchSize rows, by an indexed age column), so that no batch holds the
// writer for long; then the SQLite file gives the pages it freed back to
// the file system in small steps (store.DB.ReclaimSpace). One process of
// the database prunes at a time (the lease LeaseName); every process keeps
// the space gauges current.
//
// The rules are the tables' owners' prune functions (omni, queue, bot,
// referral), handed to New by the wiring: this package names no table.
// What each pass did per rule is kept in the store's settings, so the
// console of any process shows it.
package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"switchyard/store"
)

// LeaseName is the lease of the process that prunes.
const LeaseName = "retention"

// lastKey is the store setting that holds the last pass's results.
const lastKey = "retention.last"

// Defaults of Opts.
const (
	DefaultInterval     = time.Minute
	DefaultBatchSize    = 1000
	DefaultReclaimPages = 256
)

var (
	metricRemoved = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_retention_removed_rows_total",
		Help: "Rows the retention runner deleted, per rule.",
	}, []string{"rule"})
	metricBatch = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchyard_retention_batch_seconds",
		Help:    "Time one prune batch (one transaction) took, per rule; rule free-pages is one step of returning free pages.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"rule"})
)

// reclaimRule is the label of the free-page steps in metricBatch.
const reclaimRule = "free-pages"

// PruneFunc deletes, in one transaction, at most limit rows older than
// cutoff, oldest first, and returns how many it deleted: fewer than limit
// means there are no more.
type PruneFunc func(ctx context.Context, cutoff time.Time, limit int) (int64, error)

// Part is one table of a rule.
type Part struct {
	// Table names what is pruned, for the console ("omni_inbound_events").
	Table string
	Prune PruneFunc
}

// Rule is one retention setting and the tables it prunes.
type Rule struct {
	// Name is the rule's label in metrics and the console ("webhook-ledger").
	Name string
	// Option is the flag that sets Keep, for the console ("--retention-webhook-ledger").
	Option string
	// Keep is how long rows are kept; 0 keeps them for ever (the rule is off).
	Keep  time.Duration
	Parts []Part
}

// Opts configure New. Zero values get defaults.
type Opts struct {
	DB    *store.DB
	Rules []Rule
	// Interval between passes (DefaultInterval).
	Interval time.Duration
	// BatchSize is the most rows one transaction deletes (DefaultBatchSize).
	BatchSize int
	// ReclaimPages is the most free pages one step returns (DefaultReclaimPages).
	ReclaimPages int
	// LeaseTTL of LeaseName (store.DefaultLeaseTTL).
	LeaseTTL time.Duration
	Logger   *slog.Logger
}

// Runner prunes by its rules. It is a worker: Name and Run.
type Runner struct {
	opts Opts
	log  *slog.Logger
}

// New returns a Runner; a nil DB or a rule without a name panics.
func New(opts Opts) *Runner {
	if opts.DB == nil {
		panic("retention: New needs a DB")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.ReclaimPages <= 0 {
		opts.ReclaimPages = DefaultReclaimPages
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	for _, r := range opts.Rules {
		if r.Name == "" {
			panic("retention: a rule needs a name")
		}
		metricRemoved.WithLabelValues(r.Name)
	}
	return &Runner{opts: opts, log: opts.Logger}
}

// Name is the worker's name.
func (r *Runner) Name() string { return "retention" }

// Run prunes every Interval while it holds the lease, and keeps the space
// gauges current in every process, until ctx ends.
func (r *Runner) Run(ctx context.Context) error {
	go r.measure(ctx)
	return r.opts.DB.RunExclusive(ctx, store.LeaseOpts{Name: LeaseName, TTL: r.opts.LeaseTTL, Logger: r.log},
		func(ctx context.Context, _ store.Lease) error {
			for {
				if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
					r.log.Error("retention pass failed", slog.Any("err", err))
				}
				// A clock moved by hand (a test's) runs the next pass now.
				if !r.opts.DB.Sleep(ctx, r.opts.Interval) {
					return nil
				}
			}
		})
}

// measure sets the space gauges every Interval.
func (r *Runner) measure(ctx context.Context) {
	for {
		if _, err := r.opts.DB.Space(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("measure the database", slog.Any("err", err))
		}
		if !store.Sleep(ctx, r.opts.Interval) {
			return
		}
	}
}

// Result is what one pass did for one rule.
type Result struct {
	Rule string `json:"rule"`
	// At is when the rule's pass began.
	At time.Time `json:"at"`
	// Rows it deleted, in Batches transactions.
	Rows    int64 `json:"rows"`
	Batches int   `json:"batches"`
	// Took is the whole pass of the rule; LongestBatch its longest transaction.
	Took         time.Duration `json:"took"`
	LongestBatch time.Duration `json:"longestBatch"`
	// Error is why the pass stopped early; empty when it finished.
	Error string `json:"error,omitempty"`
}

// Pass runs every rule once, then returns the free pages; it records and
// returns what each rule did (a rule that is off does nothing). The first
// rule error is returned after the other rules ran.
func (r *Runner) Pass(ctx context.Context) ([]Result, error) {
	var (
		results []Result
		errs    []error
	)
	for _, rule := range r.opts.Rules {
		if rule.Keep <= 0 {
			continue
		}
		res, err := r.prune(ctx, rule)
		results = append(results, res)
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	reclaim, err := r.reclaim(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	results = append(results, reclaim)
	if err := r.record(ctx, results); err != nil && ctx.Err() == nil {
		errs = append(errs, err)
	}
	for _, res := range results {
		if res.Rows > 0 {
			r.log.Info("retention pruned", slog.String("rule", res.Rule), slog.Int64("rows", res.Rows),
				slog.Int("batches", res.Batches), slog.Duration("took", res.Took), slog.Duration("longest_batch", res.LongestBatch))
		}
	}
	return results, errors.Join(errs...)
}

// prune runs one rule's batches until each of its tables has no more rows
// to delete.
func (r *Runner) prune(ctx context.Context, rule Rule) (Result, error) {
	start := time.Now()
	res := Result{Rule: rule.Name, At: r.opts.DB.Now()}
	cutoff := res.At.Add(-rule.Keep)
	var err error
	for _, p := range rule.Parts {
		for ctx.Err() == nil {
			began := time.Now()
			var n int64
			n, err = p.Prune(ctx, cutoff, r.opts.BatchSize)
			took := time.Since(began)
			metricBatch.WithLabelValues(rule.Name).Observe(took.Seconds())
			res.Batches++
			res.LongestBatch = max(res.LongestBatch, took)
			if err != nil {
				err = fmt.Errorf("retention %s: %s: %w", rule.Name, p.Table, err)
				break
			}
			res.Rows += n
			metricRemoved.WithLabelValues(rule.Name).Add(float64(n))
			if n < int64(r.opts.BatchSize) {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		res.Error = err.Error()
	}
	res.Took = time.Since(start)
	return res, err
}

// reclaim returns the free pages of the SQLite file in steps of
// ReclaimPages; Rows counts the pages.
func (r *Runner) reclaim(ctx context.Context) (Result, error) {
	start := time.Now()
	res := Result{Rule: reclaimRule, At: r.opts.DB.Now()}
	var err error
	for ctx.Err() == nil {
		began := time.Now()
		var n int64
		if n, err = r.opts.DB.ReclaimSpace(ctx, r.opts.ReclaimPages); err != nil {
			res.Error = err.Error()
			break
		}
		if n == 0 {
			break
		}
		took := time.Since(began)
		metricBatch.WithLabelValues(reclaimRule).Observe(took.Seconds())
		res.Batches++
		res.Rows += n
		res.LongestBatch = max(res.LongestBatch, took)
	}
	res.Took = time.Since(start)
	return res, err
}

// record keeps the pass's results, merged into the earlier ones (a rule
// that did not run keeps its last result).
func (r *Runner) record(ctx context.Context, results []Result) error {
	last, err := readLast(ctx, r.opts.DB)
	if err != nil {
		return err
	}
	for _, res := range results {
		last[res.Rule] = res
	}
	b, err := json.Marshal(last)
	if err != nil {
		return err
	}
	if err := r.opts.DB.SetSetting(context.WithoutCancel(ctx), lastKey, string(b)); err != nil {
		return fmt.Errorf("retention: record the pass: %w", err)
	}
	return nil
}

func readLast(ctx context.Context, db *store.DB) (map[string]Result, error) {
	last := map[string]Result{}
	v, ok, err := db.Setting(ctx, lastKey)
	if err != nil {
		return nil, fmt.Errorf("retention: read the last pass: %w", err)
	}
	if ok {
		if err := json.Unmarshal([]byte(v), &last); err != nil {
			return map[string]Result{}, nil // written by another version: start again
		}
	}
	return last, nil
}

// RuleStatus is a rule's setting and what it did last.
type RuleStatus struct {
	Name, Option string
	Keep         time.Duration
	Tables       []string
	// Last is the rule's last pass; nil when it never ran.
	Last *Result
}

// Status is what the console shows: the database's space, and each rule.
type Status struct {
	Space    store.Space
	Interval time.Duration
	Rules    []RuleStatus
	// FreePages is the last pass's return of free pages (Rows are pages);
	// nil when none ran.
	FreePages *Result
}

// Status reads the space and the last pass's results, in any process.
func (r *Runner) Status(ctx context.Context) (Status, error) {
	sp, err := r.opts.DB.Space(ctx)
	if err != nil {
		return Status{}, err
	}
	last, err := readLast(ctx, r.opts.DB)
	if err != nil {
		return Status{}, err
	}
	st := Status{Space: sp, Interval: r.opts.Interval}
	for _, rule := range r.opts.Rules {
		rs := RuleStatus{Name: rule.Name, Option: rule.Option, Keep: rule.Keep}
		for _, p := range rule.Parts {
			rs.Tables = append(rs.Tables, p.Table)
		}
		if res, ok := last[rule.Name]; ok {
			rs.Last = &res
		}
		st.Rules = append(st.Rules, rs)
	}
	if res, ok := last[reclaimRule]; ok {
		st.FreePages = &res
	}
	return st, nil
}
