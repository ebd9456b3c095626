package referral

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Label values. Every series an alert may read exists at 0 from the
// consumer's start (declareMetrics), so a rate over it is 0, not "no data",
// until the first event of its kind.
const (
	// typeOther is the type label of a record that is not one of consumedTypes.
	typeOther = "other"

	// Results of one record, the result label of consumedTotal and processingSeconds.
	resultOK        = "ok"
	resultDuplicate = "duplicate"
	resultIgnored   = "ignored"
	resultRetry     = "retry"
	resultDead      = "dead"

	// Why a record failed, the reason label of retriesTotal and deadLetteredTotal.
	reasonBadPayload   = "bad-payload"
	reasonOwnerMissing = string(OutcomeOwnerMissing)
	reasonTransient    = "transient"

	// What a replica write did, the result label of replicaUpsertsTotal.
	replicaApplied = "applied"
	replicaStale   = "stale"
)

var (
	consumedTypes  = []string{string(TypeUserUpserted), string(TypeUserBlocked), typeOther}
	consumeResults = []string{resultOK, resultDuplicate, resultIgnored, resultRetry, resultDead}
	retryReasons   = []string{reasonOwnerMissing, reasonTransient} // a bad payload is never retried
	deadReasons    = []string{reasonBadPayload, reasonOwnerMissing, reasonTransient}
	replicaTypes   = []string{string(TypeUserUpserted), string(TypeUserBlocked)}
	replicaResults = []string{replicaApplied, replicaStale}
)

// Metrics on the default registry.
var (
	processingSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "switchyard_referral_processing_duration_seconds",
		Help:    "Time to apply one identity event, by message type and result (ok, duplicate, retry, dead).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"type", "result"})
	consumedTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_referral_consumed_messages_total",
		Help: "Identity events handled, by message type and result (ok, duplicate, ignored, retry, dead).",
	}, []string{"type", "result"})
	duplicatesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_referral_duplicates_total",
		Help: "Identity events acknowledged without effect because their idempotency mark existed.",
	}, []string{"type"})
	retriesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_referral_retries_total",
		Help: "Identity events that failed and will be retried, by reason (owner-replica-missing, transient).",
	}, []string{"reason"})
	deadLetteredTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_referral_dead_lettered_total",
		Help: "Identity events sent to the dead-letter queue, by reason (bad-payload, owner-replica-missing, transient).",
	}, []string{"reason"})
	attachOutcomesTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_referral_attach_outcomes_total",
		Help: "Branch B outcomes of user-upserted: R1 (bond created), the guard that said no (G1..G5), first-seen-skip, replica-only, invalid-slug, race-lost.",
	}, []string{"outcome"})
	leadsRequestedTotal = promauto.NewCounter(prometheus.CounterOpts{
		Name: "switchyard_referral_leads_requested_total",
		Help: "ReferralLeadAttachRequestedKafkaEvent published.",
	})
	replicaUpsertsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_referral_replica_writes_total",
		Help: "Replica changes, by result (applied, stale: refused by the version guard).",
	}, []string{"type", "result"})
	bondLatencySeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "switchyard_referral_bond_latency_seconds",
		Help:    "Registration (the event's occurredAt) to bond committed; the spec's SLO is 60 s.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900},
	})
	lagMessages = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_referral_consumer_lag_messages",
		Help: "Records of pin.identity.users.v1 not yet finished by the referral-identity-users group, per partition.",
	}, []string{"partition"})
	lagSeconds = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "switchyard_referral_consumer_lag_seconds",
		Help: "Age of the oldest unfinished record of pin.identity.users.v1 in the referral-identity-users group (0 when caught up); alert above 300.",
	})
)

// declareMetrics makes every series of the consumer's counters and
// histograms exist at 0: each type by result, each duplicate type, each
// retry and dead-letter reason, each replica write and each attach outcome
// (R1, G1..G5, first-seen-skip, replica-only, invalid-slug, race-lost).
func declareMetrics() {
	for _, typ := range consumedTypes {
		for _, res := range consumeResults {
			consumedTotal.WithLabelValues(typ, res)
			processingSeconds.WithLabelValues(typ, res)
		}
		duplicatesTotal.WithLabelValues(typ)
	}
	for _, r := range retryReasons {
		retriesTotal.WithLabelValues(r)
	}
	for _, r := range deadReasons {
		deadLetteredTotal.WithLabelValues(r)
	}
	for _, typ := range replicaTypes {
		for _, res := range replicaResults {
			replicaUpsertsTotal.WithLabelValues(typ, res)
		}
	}
	for _, o := range attachOutcomes {
		attachOutcomesTotal.WithLabelValues(string(o))
	}
}
