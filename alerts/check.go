package alerts

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Facts are what one instance knows of the alerts' conditions: the
// database's, which every instance shares, and this process's own counters
// (a Sampler's). A nil field is unknown (its subsystem is not wired here),
// and Check leaves its conditions out.
type Facts struct {
	// ReferralLag is the age of the oldest record of pin.identity.users.v1
	// that the group referral-identity-users has not finished (0 when
	// caught up).
	ReferralLag *time.Duration
	// DeadLettered counts, per queue and consumer group, the messages and
	// records dead-lettered in the last DeadLetterWindow (queues and
	// groups with none may be left out).
	DeadLettered []QueueCount
	// OutboxDeadLettered counts the bot outbox's events dead-lettered in the
	// last DeadLetterWindow.
	OutboxDeadLettered *int64
	// LinkLookups counts, in the last LinkNotFoundWindow, the upserts that
	// looked a referral link up (All) and those that found none (Bad, G1).
	LinkLookups *Counts
	// Counters are this process's counters over the rules' windows.
	Counters *CounterFacts
	// Readiness is this instance's readiness now, as /readyz answers.
	Readiness *Readiness
	// Disk is the file system of the SQLite file; nil on PostgreSQL.
	Disk *Disk
}

// QueueCount is a count of one queue, or of one consumer group of a topic.
type QueueCount struct {
	Queue, Group string
	Count        int64
}

// Counts are the bad events among all in a window.
type Counts struct {
	Bad, All float64
}

// CounterFacts are a Sampler's increases of this process's counters, each
// over its rule's window, or since Since when the process is younger.
type CounterFacts struct {
	Since time.Time
	// Outbound is the chat platform's failed delivery attempts among all,
	// in the last OutboundWindow.
	Outbound Counts
	// TooManyRequests is the Bot API's 429s, by bot id, in the last
	// TooManyRequestsWindow.
	TooManyRequests map[string]float64
	// Webhooks is the 5xx answers among all requests, by webhook route, in
	// the last WebhookWindow.
	Webhooks map[string]Counts
}

// Readiness is whether the instance is ready, and why not.
type Readiness struct {
	Ready  bool
	Reason string
}

// Disk is a file system's available bytes and size.
type Disk struct {
	Available, Size int64
}

// Firing is an alert whose condition holds.
type Firing struct {
	Alert    Name
	Severity Severity
	// Subject names the queue, bot or route it is about; "" when the alert
	// has one subject only.
	Subject string
	// Text says what holds and the threshold, for a person.
	Text string
	// Runbook is the runbook's path in the repository.
	Runbook string
}

// Check returns the alerts whose conditions hold on f, by the thresholds
// the rules file has: critical ones first, an instance not ready first of
// all (it explains most others), then in the order of Rules.
func Check(f Facts) []Firing {
	var out []Firing
	fire := func(a Name, sev Severity, subject, runbook, format string, args ...any) {
		out = append(out, Firing{Alert: a, Severity: sev, Subject: subject, Text: fmt.Sprintf(format, args...), Runbook: RunbookDir + runbook})
	}
	if r := f.Readiness; r != nil && !r.Ready {
		fire(NotReady, Critical, "", "not-ready.md", "not ready: %s", r.Reason)
	}
	if f.ReferralLag != nil && *f.ReferralLag > ReferralLagMax {
		fire(ReferralConsumerLag, Critical, "", "referral-consumer-lag.md",
			"the oldest unfinished record of pin.identity.users.v1 is %s old (alert above %s)", f.ReferralLag.Round(time.Second), duration(ReferralLagMax))
	}
	for _, q := range f.DeadLettered {
		if q.Count > 0 {
			subject := q.Queue
			if q.Group != "" {
				subject += " (group " + q.Group + ")"
			}
			fire(DeadLetters, Warning, subject, "dead-letters.md",
				"%d dead-lettered in the last %s", q.Count, duration(DeadLetterWindow))
		}
	}
	if f.OutboxDeadLettered != nil && *f.OutboxDeadLettered > 0 {
		fire(OutboxDeadLetters, Warning, "", "dead-letters.md",
			"%d outbox events dead-lettered in the last %s", *f.OutboxDeadLettered, duration(DeadLetterWindow))
	}
	if c := f.LinkLookups; c != nil && linkNotFoundRatio.firing(c.Bad, c.All) {
		fire(ReferralLinkNotFound, Warning, "", "referral-link-not-found.md",
			"%s of %s registrations with a referral slug found no live link (G1) in the last %s (alert above %s, with %d at least)",
			number(c.Bad), number(c.All), duration(LinkNotFoundWindow), percent(LinkNotFoundShareMax), LinkNotFoundMin)
	}
	if c := f.Counters; c != nil {
		if o := c.Outbound; outboundRatio.firing(o.Bad, o.All) {
			fire(OutboundFailures, Warning, "", "outbound-failures.md",
				"%s of %s chat delivery attempts failed in the last %s (alert above %s, with %d at least)",
				number(o.Bad), number(o.All), duration(OutboundWindow), percent(OutboundFailureShareMax), OutboundFailuresMin)
		}
		for _, bot := range slices.Sorted(maps.Keys(c.TooManyRequests)) {
			if n := c.TooManyRequests[bot]; n > 0 {
				fire(TelegramTooManyRequests, Warning, "bot "+bot, "telegram-429.md",
					"Telegram answered 429 to %s calls in the last %s (alert on any)", number(n), duration(TooManyRequestsWindow))
			}
		}
		for _, route := range slices.Sorted(maps.Keys(c.Webhooks)) {
			if w := c.Webhooks[route]; webhookRatio.firing(w.Bad, w.All) {
				fire(WebhookErrors, Warning, route, "webhook-errors.md",
					"%s of %s requests answered 5xx in the last %s (alert above %s, with %d at least)",
					number(w.Bad), number(w.All), duration(WebhookWindow), percent(WebhookErrorShareMax), WebhookErrorsMin)
			}
		}
	}
	if d := f.Disk; d != nil && d.Size > 0 && float64(d.Available)/float64(d.Size) < DiskAvailableShareMin {
		fire(DatabaseDiskAlmostFull, Warning, "", "database-disk-full.md",
			"%s of the database's file system available (alert below %s)",
			strconv.FormatFloat(100*float64(d.Available)/float64(d.Size), 'f', 1, 64)+"%", percent(DiskAvailableShareMin))
	}
	slices.SortStableFunc(out, func(a, b Firing) int {
		if a.Severity == b.Severity {
			return 0
		}
		if a.Severity == Critical {
			return -1
		}
		return 1
	})
	return out
}
