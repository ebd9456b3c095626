package omni

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/queue"
	"switchyard/telemetry"
)

// The chat platform's spans. One inbound update is one trace: the webhook's
// server span, the enqueue on receiver.flow (whose message carries the
// enqueue's span), the chat role's delivery of it (queue.handle, started by
// the queue's worker) and its apply, and, when the apply queues a reply, that
// command's delivery on sender.flow and its Bot API call. An operator's reply
// is the trace of its admin request. Retry lanes and redrives keep the trace:
// a message moved to a retry queue carries the span of the attempt that moved
// it, and a dead letter keeps its message's traceparent.
//
// No attribute holds a name, a text or a secret: ids, keys, types and
// outcomes only, through telemetry.String where a value could look like a
// phone number.
const (
	spanEnqueue = "omni.inbound.enqueue"
	spanBatch   = "omni.chat.batch"
	spanApply   = "omni.chat.apply"
	spanDeliver = "omni.outbound.deliver"
)

// applyDeferred is the outcome of an envelope that followed its thread into
// receiver.retry without being tried.
const applyDeferred = "deferred"

// enqueueSpan starts the producer span of an envelope's enqueue on
// receiver.flow, a child of the webhook's server span; the message carries
// it.
func enqueueSpan(ctx context.Context, env *Envelope) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, spanEnqueue) // ctx as it is, and a span that does nothing
	}
	return telemetry.Start(ctx, spanEnqueue, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.destination.name", QueueReceiverFlow),
		telemetry.String("idempotency.key", env.IdempotencyKey),
		attribute.String("omni.event_type", string(env.EventType)),
	))
}

// endEnqueue ends an enqueue's span: the message's id and whether it was new
// (accepted) or a duplicate delivery of the update.
func endEnqueue(span trace.Span, res queue.SendResult, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	if err == nil {
		outcome := webhookAccepted
		if res.Duplicate {
			outcome = webhookDuplicate
		}
		span.SetAttributes(attribute.String("messaging.message.id", string(res.ID)),
			attribute.String("omni.enqueue.outcome", outcome))
	}
	telemetry.End(span, err)
}

// batchSpan starts the span of one receive's batch transaction, a trace of
// its own (the batch is no part of any one envelope's work); each envelope's
// apply span links to it, and its store.tx span is its child.
func batchSpan(ctx context.Context, n int) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, spanBatch) // ctx as it is, and a span that does nothing
	}
	return telemetry.Start(ctx, spanBatch, trace.WithNewRoot(),
		trace.WithAttributes(attribute.String("messaging.destination.name", QueueReceiverFlow), attribute.Int("omni.batch.size", n)))
}

// applySpan starts the span of an envelope's apply, a child of its delivery's
// span (m.Traceparent, which the queue's worker set), so in the trace of the
// webhook that accepted it; batch, when not nil, is the context of the batch
// whose transaction commits it, which the span links to.
func applySpan(ctx context.Context, m queue.Message, env *Envelope, batch context.Context) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, spanApply) // ctx as it is, and a span that does nothing
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(
		attribute.String("omni.event_type", string(env.EventType)),
		telemetry.String("idempotency.key", env.IdempotencyKey),
	)}
	if batch != nil {
		opts = append(opts, trace.WithLinks(trace.LinkFromContext(batch)))
	}
	return telemetry.Start(telemetry.Resume(ctx, m.Traceparent), spanApply, opts...)
}

// endApply ends an apply's span with what became of the envelope: its
// outcome (applied, duplicate, ignored with its reason, waiting, deferred,
// retry, dead) and its thread. A failure is an error; waiting for a business
// connection is not.
func endApply(span trace.Span, outcome string, res applied, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(attribute.String("omni.apply.outcome", outcome))
	if res.Thread != 0 {
		span.SetAttributes(attribute.Int64("omni.thread_id", int64(res.Thread)))
	}
	if res.Reason != "" {
		span.SetAttributes(attribute.String("omni.ignore_reason", string(res.Reason)))
	}
	if errors.Is(err, errConnectionUnknown) {
		err = nil
	}
	telemetry.End(span, err)
}

// flowItemOutcome is what became of an envelope of a committed batch, as its
// apply span says it, and the error that marks the span.
func flowItemOutcome(it *flowItem) (string, error) {
	switch {
	case it.done:
		return string(it.res.Outcome), nil
	case it.waiting:
		return chatWaiting, nil
	case it.moved && it.applyErr != nil:
		return chatRetry, it.applyErr
	case it.moved:
		return applyDeferred, nil
	}
	return chatRetry, it.err
}

// deliveryTrace is what an attempt at a send learnt, for its span.
type deliveryTrace struct {
	message MessageID
	chatID  string
	attempt int    // the message's attempt count, once the send is marked sending
	outcome string // one of the send outcomes of the metric, "dropped", or "" (a failure)
	// failure is the Bot API call's error: it marks the attempt failed even
	// when the message was handed on (to sender.retry) without one.
	failure error
}

// deliverSpan starts the span of an attempt at a send command, a child of its
// delivery's span (ctx's): in the trace of the apply or the admin request
// that queued the message, or of the attempt that moved it to sender.retry.
// Its Bot API call is its child.
func deliverSpan(ctx context.Context, m queue.Message, inRetry bool) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, spanDeliver) // ctx as it is, and a span that does nothing
	}
	q := QueueSenderFlow
	if inRetry {
		q = QueueSenderRetry
	}
	return telemetry.Start(ctx, spanDeliver, trace.WithAttributes(
		attribute.String("messaging.destination.name", q),
		attribute.String("messaging.message.id", string(m.ID)),
	))
}

// endDeliver ends an attempt's span with its outcome. Waiting for the rate
// limits is no failure of the attempt.
func endDeliver(span trace.Span, d deliveryTrace, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	outcome := d.outcome
	if outcome == "" {
		outcome = "error"
	}
	span.SetAttributes(attribute.String("omni.deliver.outcome", outcome))
	if d.message != 0 {
		span.SetAttributes(attribute.Int64("omni.message_id", int64(d.message)),
			telemetry.String("telegram.chat_id", d.chatID))
	}
	if d.attempt > 0 {
		span.SetAttributes(attribute.Int("omni.deliver.attempt", d.attempt))
	}
	if d.failure != nil {
		err = d.failure
	}
	if errors.Is(err, errPacing) {
		err = nil
	}
	telemetry.End(span, err)
}
