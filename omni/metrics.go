package omni

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The outcomes of switchyard_omni_webhook_updates_total, each exported at 0
// from the inbound role's start.
const (
	webhookAccepted     = "accepted"
	webhookDuplicate    = "duplicate"
	webhookUnauthorized = "unauthorized"
	webhookThrottled    = "throttled"
	webhookBadRequest   = "bad_request"
	webhookUnavailable  = "unavailable"
	webhookClientGone   = "client_gone"
)

var webhookOutcomes = []string{
	webhookAccepted, webhookDuplicate, webhookUnauthorized, webhookThrottled,
	webhookBadRequest, webhookUnavailable, webhookClientGone,
}

var (
	metricWebhookUpdates = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_omni_webhook_updates_total",
		Help: "Telegram webhook requests, by outcome (accepted, duplicate, unauthorized, throttled, bad_request, unavailable, client_gone).",
	}, []string{"outcome"})
	metricWebhookDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "switchyard_omni_webhook_duration_seconds",
		Help:    "Time from a webhook request's arrival to its committed enqueue.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .02, .05, .1, .25, .5, 1},
	})
	metricChatEvents = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_omni_chat_events_total",
		Help: "Inbound envelopes the chat role handled, by event type and outcome (applied, duplicate, ignored, retry, dead, waiting).",
	}, []string{"event_type", "outcome"})
	metricUpdatesIgnored = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_omni_updates_ignored_total",
		Help: "Inbound envelopes the chat role stored as ignored, by reason (group_chat, unused_update_type, unknown_update_type, stale_edit, no_thread, no_messages, stale_connection, membership_unchanged).",
	}, []string{"reason"})
	metricOutboundSends = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_omni_outbound_sends_total",
		Help: "Outbound delivery attempts, by outcome (sent, duplicate, rate_limited, retry, failed, refused, deferred).",
	}, []string{"outcome"})
	metricOutboundDuration = promauto.NewHistogram(prometheus.HistogramOpts{
		Name:    "switchyard_omni_outbound_send_duration_seconds",
		Help:    "Duration of sendMessage calls to the provider.",
		Buckets: prometheus.DefBuckets,
	})
	metricLaneMoves = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_omni_lane_moves_total",
		Help: "Messages moved from a flow queue to its retry queue, by lane (receiver, sender).",
	}, []string{"lane"})
)

func init() {
	// Every reason is exported from the start, at zero, so a rate over it
	// exists before the first ignored update.
	for _, r := range IgnoreReasons {
		metricUpdatesIgnored.WithLabelValues(string(r))
	}
}
