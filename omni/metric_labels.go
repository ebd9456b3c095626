package omni

// surfaceWebhook names POST /webhooks/telegram's secret check in authlimit.
const surfaceWebhook = "omni-webhook"

// Label values of the chat role's and the outbound role's counters, each in
// the list its role declares at start (declareChatMetrics,
// declareOutboundMetrics), so an alert sees 0, not "no data", until the
// first event of its kind.
const (
	// eventInvalid is the event_type of an envelope that does not decode.
	eventInvalid = "invalid"
	// Chat outcomes besides the applyOutcome values.
	chatRetry   = "retry"   // moved to receiver.retry
	chatDead    = "dead"    // dead-lettered
	chatWaiting = "waiting" // held back until its business connection is known

	// Outcomes of an outbound delivery attempt.
	sendSent        = "sent"
	sendDuplicate   = "duplicate"    // sent before; not sent again
	sendRateLimited = "rate_limited" // held back by the rate limits, or Telegram's 429
	sendRetry       = "retry"        // a failure that will be retried
	sendFailed      = "failed"       // a failure for good
	sendRefused     = "refused"      // refused before calling Telegram (decideRefusal)
	sendDeferred    = "deferred"     // queued behind its chat's messages in sender.retry
)

var (
	chatOutcomes = []string{string(outcomeApplied), string(outcomeDuplicate), string(outcomeIgnored), chatRetry, chatDead, chatWaiting}
	sendOutcomes = []string{sendSent, sendDuplicate, sendRateLimited, sendRetry, sendFailed, sendRefused, sendDeferred}
)

// declareChatMetrics makes the chat role's series exist at 0: every event
// type by every outcome, and the undecodable envelopes' dead letters.
func declareChatMetrics() {
	for _, t := range eventTypes {
		for _, o := range chatOutcomes {
			metricChatEvents.WithLabelValues(string(t), o)
		}
	}
	metricChatEvents.WithLabelValues(eventInvalid, chatDead)
}

// declareOutboundMetrics makes the outbound role's series exist at 0.
func declareOutboundMetrics() {
	for _, o := range sendOutcomes {
		metricOutboundSends.WithLabelValues(o)
	}
}
