// Package alerts is Switchyard's alert conditions, each written once: its
// threshold, its window and its runbook. The Prometheus rules file,
// docs/alerts/switchyard-rules.yml, is generated from Rules (go generate
// ./alerts; a test fails while the committed file differs), and the
// console's Overview decides its warnings with Check on the same values, from
// what one instance knows: its database and its own counters (Sampler).
//
// Prometheus evaluates the rules over the whole fleet with their `for`
// durations; the Overview shows the conditions as they hold now, on the
// database every instance shares and on this process's counters.
package alerts

//go:generate go run gen.go

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"switchyard/referral"
)

// Name is an alert's name, the alertname label of what Prometheus fires.
type Name string

// The alerts.
const (
	ReferralConsumerLag     Name = "SwitchyardReferralConsumerLag"
	DeadLetters             Name = "SwitchyardDeadLetters"
	OutboxDeadLetters       Name = "SwitchyardOutboxDeadLetters"
	ReferralLinkNotFound    Name = "SwitchyardReferralLinkNotFound"
	OutboundFailures        Name = "SwitchyardOutboundFailures"
	TelegramTooManyRequests Name = "SwitchyardTelegramTooManyRequests"
	WebhookErrors           Name = "SwitchyardWebhookErrors"
	NotReady                Name = "SwitchyardNotReady"
	DatabaseDiskAlmostFull  Name = "SwitchyardDatabaseDiskAlmostFull"
)

// Severity is an alert's severity label.
type Severity string

// The severities: critical pages someone, warning waits for working hours.
const (
	Critical Severity = "critical"
	Warning  Severity = "warning"
)

// The thresholds. Each is used by the rule that Rules renders and by Check;
// docs/alerts/README.md says why each has its value.
const (
	// ReferralLagMax is the spec's "consumer lag (alert > 5 мин)": the age
	// of the oldest record of pin.identity.users.v1 the group
	// referral-identity-users has not finished. ReferralLagFor is how long
	// Prometheus waits before it fires (two refreshes of the gauge).
	ReferralLagMax = 5 * time.Minute
	ReferralLagFor = time.Minute

	// DeadLetterWindow: a message or record dead-lettered within it, on
	// any queue, consumer group or the bot outbox, is an alert until the
	// window has passed it.
	DeadLetterWindow = 15 * time.Minute

	// LinkNotFoundShareMax is the largest share of G1 (no live link has the
	// referrer slug: a broken cookie or a deleted link) among the upserts
	// that looked a link up (referral.LinkLookupOutcomes) in
	// LinkNotFoundWindow; LinkNotFoundMin G1s at least, so that a few broken
	// cookies in a quiet hour stay quiet.
	LinkNotFoundWindow   = time.Hour
	LinkNotFoundShareMax = 0.10
	LinkNotFoundMin      = 5

	// OutboundFailureShareMax is the largest share of the chat platform's
	// delivery attempts (sendMessage calls) that may fail, to be retried or
	// for good, in OutboundWindow; OutboundFailuresMin failures at least.
	OutboundWindow          = 15 * time.Minute
	OutboundFailureShareMax = 0.10
	OutboundFailuresMin     = 5

	// TooManyRequestsWindow: a 429 from the Bot API within it is an alert.
	// The limiter keeps every send under Telegram's limits; the goal is
	// zero 429s.
	TooManyRequestsWindow = 15 * time.Minute

	// WebhookErrorShareMax is the largest share of a webhook's requests that
	// may be answered 5xx in WebhookWindow; WebhookErrorsMin at least.
	// Telegram retries a failed webhook, so a short outage loses nothing,
	// but updates wait, and a long one makes Telegram give up.
	WebhookWindow        = 5 * time.Minute
	WebhookErrorShareMax = 0.05
	WebhookErrorsMin     = 3

	// NotReadyFor is how long an instance's readiness (/readyz,
	// switchyard_store_ready) may fail before Prometheus fires.
	NotReadyFor = time.Minute

	// DiskAvailableShareMin is the least share of the file system that
	// holds the SQLite file that must stay available: below it the file,
	// its WAL or a compact's copy may soon find none, and SQLite answers
	// "database or disk is full". DiskFor is how long it may stay below.
	DiskAvailableShareMin = 0.10
	DiskFor               = 5 * time.Minute
)

// RunbookDir is where the runbooks are, from the repository's root.
const RunbookDir = "docs/runbooks/"

// Rule is one Prometheus alerting rule.
type Rule struct {
	Alert Name
	// Expr is the PromQL expression; every series it returns is an alert.
	Expr string
	// For is how long Expr must hold before the alert fires (0: at once).
	For      time.Duration
	Severity Severity
	// Labels are extra labels besides severity.
	Labels map[string]string
	// Summary and Description are the annotations, Prometheus templates.
	Summary, Description string
	// Runbook is the runbook's file name in RunbookDir.
	Runbook string
}

// The series the rules read. Each exists, at 0 where it counts, from the
// start of the process (or the role) that exports it.
var (
	referralLagSeries = Series{Metric: "switchyard_referral_consumer_lag_seconds"}
	deadLetterSeries  = Series{Metric: "switchyard_queue_messages_dead_lettered_total"}
	outboxDeadSeries  = Series{Metric: "switchyard_bot_outbox_acked_events_total", Match: map[string]string{"outcome": "dead_letter"}}
	linkLookupSeries  = Series{Metric: "switchyard_referral_attach_outcomes_total",
		Match: map[string]string{"outcome": alternation(referral.LinkLookupOutcomes)}}
	linkMissingSeries = Series{Metric: "switchyard_referral_attach_outcomes_total",
		Match: map[string]string{"outcome": string(referral.OutcomeG1)}}
	outboundFailedSeries   = Series{Metric: "switchyard_omni_outbound_sends_total", Match: map[string]string{"outcome": "retry|failed"}}
	outboundAttemptsSeries = Series{Metric: "switchyard_omni_outbound_sends_total", Match: map[string]string{"outcome": "sent|retry|failed"}}
	tooManyRequestsSeries  = Series{Metric: "switchyard_telegram_too_many_requests_total"}
	webhookErrorSeries     = Series{Metric: "switchyard_http_requests_total", Match: map[string]string{"route": "/webhooks/.+", "code": "5.."}}
	webhookRequestSeries   = Series{Metric: "switchyard_http_requests_total", Match: map[string]string{"route": "/webhooks/.+"}}
	readySeries            = Series{Metric: "switchyard_store_ready"}
	diskAvailableSeries    = Series{Metric: "switchyard_store_filesystem_available_bytes"}
	diskSizeSeries         = Series{Metric: "switchyard_store_filesystem_size_bytes"}
)

// SeriesRead lists every series a rule reads, for a test that each exists
// on a live /metrics.
func SeriesRead() []Series {
	return []Series{
		referralLagSeries, deadLetterSeries, outboxDeadSeries, linkLookupSeries, linkMissingSeries,
		outboundFailedSeries, outboundAttemptsSeries, tooManyRequestsSeries, webhookErrorSeries,
		webhookRequestSeries, readySeries, diskAvailableSeries, diskSizeSeries,
	}
}

// The ratio rules, evaluated alike by Prometheus (Expr) and by the Sampler.
var (
	linkNotFoundRatio = ratio{bad: linkMissingSeries, all: linkLookupSeries, window: LinkNotFoundWindow,
		maxShare: LinkNotFoundShareMax, minBad: LinkNotFoundMin}
	outboundRatio = ratio{bad: outboundFailedSeries, all: outboundAttemptsSeries, window: OutboundWindow,
		maxShare: OutboundFailureShareMax, minBad: OutboundFailuresMin}
	webhookRatio = ratio{bad: webhookErrorSeries, all: webhookRequestSeries, by: []string{"route"}, window: WebhookWindow,
		maxShare: WebhookErrorShareMax, minBad: WebhookErrorsMin}
)

// Rules are Switchyard's alerting rules, in the order of the rules file.
func Rules() []Rule {
	return []Rule{
		{
			Alert:    ReferralConsumerLag,
			Expr:     fmt.Sprintf("max without (instance) (%s) > %s", referralLagSeries, number(ReferralLagMax.Seconds())),
			For:      ReferralLagFor,
			Severity: Critical,
			Summary:  "Referral consumer more than " + duration(ReferralLagMax) + " behind",
			Description: "The oldest record of pin.identity.users.v1 the group referral-identity-users has not finished is " +
				"{{ $value | humanizeDuration }} old (alert above " + duration(ReferralLagMax) + "). Registrations wait for their bonds; the spec's SLO is one minute.",
			Runbook: "referral-consumer-lag.md",
		},
		{
			Alert:    DeadLetters,
			Expr:     fmt.Sprintf("%s > 0", sumIncrease(deadLetterSeries, DeadLetterWindow, "queue", "group")),
			Severity: Warning,
			Summary:  "Dead letters on {{ $labels.queue }}{{ if $labels.group }} (group {{ $labels.group }}){{ end }}",
			Description: "Messages of {{ $labels.queue }}{{ if $labels.group }}, consumer group {{ $labels.group }},{{ end }} " +
				"went to the dead-letter queue in the last " + duration(DeadLetterWindow) + ": their attempts ran out, or they can never succeed. Nothing is lost: they wait there for an operator to redrive or purge them.",
			Runbook: "dead-letters.md",
		},
		{
			Alert:    OutboxDeadLetters,
			Expr:     fmt.Sprintf("%s > 0", sumIncrease(outboxDeadSeries, DeadLetterWindow)),
			Severity: Warning,
			Summary:  "Dead letters in the bot outbox",
			Description: "Events of the bot outbox were dead-lettered in the last " + duration(DeadLetterWindow) +
				": the onboarding bot's attempts at them ran out. They wait for an operator to redrive them.",
			Runbook: "dead-letters.md",
		},
		{
			Alert:    ReferralLinkNotFound,
			Expr:     linkNotFoundRatio.expr(),
			Severity: Warning,
			Summary:  "Referral links not found (G1) for {{ $value | humanizePercentage }} of registrations",
			Description: "In the last " + duration(LinkNotFoundWindow) + ", {{ $value | humanizePercentage }} of the registrations that came with a referral slug " +
				"found no live link (guard G1; alert above " + percent(LinkNotFoundShareMax) + ", with " + strconv.Itoa(LinkNotFoundMin) + " at least): broken referral cookies, or links deleted while still handed out. No bond is created for them.",
			Runbook: "referral-link-not-found.md",
		},
		{
			Alert:    OutboundFailures,
			Expr:     outboundRatio.expr(),
			Severity: Warning,
			Summary:  "{{ $value | humanizePercentage }} of chat deliveries to Telegram fail",
			Description: "In the last " + duration(OutboundWindow) + ", {{ $value | humanizePercentage }} of the chat platform's sendMessage attempts failed " +
				"(to be retried, or for good; alert above " + percent(OutboundFailureShareMax) + ", with " + strconv.Itoa(OutboundFailuresMin) + " failures at least). Replies to customers wait, or end in dead letters.",
			Runbook: "outbound-failures.md",
		},
		{
			Alert:    TelegramTooManyRequests,
			Expr:     fmt.Sprintf("%s > 0", sumIncrease(tooManyRequestsSeries, TooManyRequestsWindow, "bot")),
			Severity: Warning,
			Summary:  "Telegram answers 429 Too Many Requests to bot {{ $labels.bot }}",
			Description: "Telegram's flood control refused calls of bot {{ $labels.bot }} in the last " + duration(TooManyRequestsWindow) +
				". Switchyard paces every send under Telegram's limits, so a 429 means the limits are lower than it assumes, or another program uses the same bot token.",
			Runbook: "telegram-429.md",
		},
		{
			Alert:    WebhookErrors,
			Expr:     webhookRatio.expr(),
			Severity: Warning,
			Summary:  "{{ $labels.route }} answers Telegram 5xx",
			Description: "In the last " + duration(WebhookWindow) + ", {{ $value | humanizePercentage }} of the requests to {{ $labels.route }} were answered 5xx (alert above " +
				percent(WebhookErrorShareMax) + ", with " + strconv.Itoa(WebhookErrorsMin) + " errors at least). Telegram retries them: updates wait until the webhook answers 200 again, and Telegram drops those it has retried for too long.",
			Runbook: "webhook-errors.md",
		},
		{
			Alert:    NotReady,
			Expr:     fmt.Sprintf("%s == 0", readySeries),
			For:      NotReadyFor,
			Severity: Critical,
			Summary:  "Switchyard {{ $labels.instance }} is not ready",
			Description: "The instance's readiness probe (/readyz) has failed for " + duration(NotReadyFor) +
				": its database does not take writes, its file is damaged, or a migration is pending. What it is asked to store fails or waits.",
			Runbook: "not-ready.md",
		},
		{
			Alert: DatabaseDiskAlmostFull,
			Expr: fmt.Sprintf("%s / %s < %s", diskAvailableSeries, diskSizeSeries,
				number(DiskAvailableShareMin)),
			For:      DiskFor,
			Severity: Warning,
			Summary:  "The disk of the database of {{ $labels.instance }} is almost full",
			Description: "Only {{ $value | humanizePercentage }} of the file system that holds the SQLite file is available (alert below " +
				percent(DiskAvailableShareMin) + "). When it runs out, SQLite refuses every write: webhooks, publishes and emits answer 503.",
			Runbook: "database-disk-full.md",
		},
	}
}

// ratio is a rule on the share of bad events among all in a window, with a
// least number of bad ones.
type ratio struct {
	bad, all Series
	by       []string
	window   time.Duration
	maxShare float64
	minBad   float64
}

// expr is the share when it is above maxShare and the bad events number
// minBad at least; its value is the share.
func (r ratio) expr() string {
	bad, all := sumIncrease(r.bad, r.window, r.by...), sumIncrease(r.all, r.window, r.by...)
	return fmt.Sprintf("(\n  %s\n  /\n  %s\n) > %s\nand\n%s >= %s", bad, all, number(r.maxShare), bad, number(r.minBad))
}

// firing is expr on counts: bad of all events in the window.
func (r ratio) firing(bad, all float64) bool {
	return all > 0 && bad >= r.minBad && bad/all > r.maxShare
}

// alternation is a regular expression matching each outcome, as PromQL's
// =~ wants.
func alternation(os []referral.Outcome) string {
	parts := make([]string, len(os))
	for i, o := range os {
		parts[i] = string(o)
	}
	return strings.Join(parts, "|")
}

// number renders a threshold as PromQL reads it.
func number(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// percent renders a share for a person: 0.1 is "10%".
func percent(f float64) string { return number(f*100) + "%" }

// duration renders a window for a person and for PromQL: 15m, 1h.
func duration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return strconv.FormatInt(int64(d/time.Second), 10) + "s"
}
