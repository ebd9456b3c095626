package referral

import (
	"context"
	"database/sql"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"switchyard/telemetry"
)

// This file is the consumers' traces (the spec: "span приёма события →
// span обработки → spans обращений к хранилищу; correlation из метаданных
// события; исходящие события получают свой trace"):
//
//	topic.receive pin.identity.users.v1   (package queue) consumer; a new trace linked to the producer's span
//	└─ referral.event.handle              the processing of one identity event
//	   ├─ referral.store.<statement>      each statement of the consumer's transaction
//	   └─ …
//	referral.outgoing.publish             producer; a new trace linked to referral.event.handle,
//	                                      whose traceparent the outgoing record carries
//
// No span holds a name, a phone number or a ReferrerUrl (a cookie's value,
// which may be anything a person typed): an event is named by its
// MessageId, CorrelationId, user, link and bond ids, all through
// telemetry.String, which masks any phone-like run. With tracing off
// nothing here allocates.

// Span names.
const (
	spanHandle   = "referral.event.handle"
	spanOutgoing = "referral.outgoing.publish"
)

// Attribute keys.
const (
	attrMessageType   = "referral.message_type"
	attrMessageID     = "messaging.message.id"
	attrCorrelationID = "messaging.message.conversation_id"
	attrOutcome       = "referral.outcome"
	attrAppliedRule   = "referral.applied_rule"
	attrUserID        = "referral.user_id"
	attrLinkID        = "referral.link_id"
	attrBondID        = "referral.bond_id"
)

// outcomeSkippedDuplicate is the outcome of a message whose mark existed,
// as the spec's log names it.
const outcomeSkippedDuplicate = "skipped-duplicate"

// handleSpan starts the processing span of one identity event, a child of
// ctx's span (the queue's topic.receive). Its attributes are known once the
// event is parsed and applied: endHandle sets them.
func handleSpan(ctx context.Context) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, spanHandle) // ctx as it is, and a span that does nothing
	}
	return telemetry.Start(ctx, spanHandle, trace.WithSpanKind(trace.SpanKindInternal))
}

// endHandle ends an event's processing span with what it came to: the rule
// applied (R1), a guard's or another path's no-op code, skipped-duplicate,
// ignored, or the failure's reason, marked failed.
func endHandle(span trace.Span, res result, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	typ := string(res.Type)
	if res.Type != TypeUserUpserted && res.Type != TypeUserBlocked {
		typ = typeOther // a producer's free text, unbounded
	}
	attrs := []attribute.KeyValue{
		attribute.String(attrMessageType, typ),
		telemetry.String(attrMessageID, res.MessageID),
		telemetry.String(attrCorrelationID, res.CorrelationID),
		attribute.String(attrOutcome, handleOutcome(res, err)),
	}
	if res.UserID != "" {
		attrs = append(attrs, telemetry.String(attrUserID, string(res.UserID)))
	}
	if res.LinkID != "" {
		attrs = append(attrs, telemetry.String(attrLinkID, string(res.LinkID)))
	}
	if res.BondID != "" {
		attrs = append(attrs, telemetry.String(attrBondID, string(res.BondID)), attribute.String(attrAppliedRule, string(RuleR1)))
	}
	span.SetAttributes(attrs...)
	telemetry.End(span, err)
}

// handleOutcome is the outcome a processing span records.
func handleOutcome(res result, err error) string {
	switch {
	case errors.Is(err, ErrBadPayload):
		return reasonBadPayload
	case errors.Is(err, ErrOwnerReplicaMissing):
		return reasonOwnerMissing
	case err != nil:
		return reasonTransient
	case res.Duplicate:
		return outcomeSkippedDuplicate
	case res.Ignored:
		return resultIgnored
	}
	return string(res.Outcome)
}

// outgoingSpan starts the producer span of an outgoing event: the root of a
// trace of its own (the event is work of its consumers, no part of the
// identity event's processing), linked to ctx's span, the processing span
// that caused it. The record published with the returned context carries
// this span's traceparent (queue.Topic.PublishTx).
func outgoingSpan(ctx context.Context, topic string, typ MessageType, messageID, correlationID string) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return telemetry.Start(ctx, spanOutgoing) // ctx as it is, and a span that does nothing
	}
	return telemetry.Start(ctx, spanOutgoing, trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}),
		trace.WithAttributes(
			attribute.String("messaging.system", "switchyard"),
			attribute.String("messaging.destination.name", topic),
			attribute.String(attrMessageType, string(typ)),
			telemetry.String(attrMessageID, messageID),
			telemetry.String(attrCorrelationID, correlationID),
		))
}

// publishOutgoing publishes an outgoing event in tx under its own producer
// span (outgoingSpan).
func publishOutgoing(ctx context.Context, tx *sql.Tx, out txPublisher, topic string, typ MessageType, bond BondID, correlationID, key string, value []byte) error {
	ctx, span := outgoingSpan(ctx, topic, typ, outgoingMessageIDIfTraced(typ, bond), correlationID)
	err := out.publishTx(ctx, tx, key, value)
	telemetry.End(span, err)
	return err
}

// outgoingMessageIDIfTraced is an outgoing event's messageId for its span,
// computed only when spans are recorded.
func outgoingMessageIDIfTraced(typ MessageType, bond BondID) string {
	if !telemetry.Enabled() {
		return ""
	}
	return outgoingMessageID(typ, bond)
}

// storeSpans names the spans of the consumer's statements.
type storeSpans struct {
	names  map[string]string // query → span name
	system attribute.KeyValue
}

// newStoreSpans names the consumer's statements; link and owner are the
// dialect's texts of the link and owner reads.
func newStoreSpans(postgres bool, link, owner string) *storeSpans {
	system := "sqlite"
	if postgres {
		system = "postgresql"
	}
	return &storeSpans{
		system: attribute.String("db.system.name", system),
		names: map[string]string{
			userFactsQuery:          "referral.store.read_user",
			putReplicaQuery:         "referral.store.put_replica",
			blockStatusQuery:        "referral.store.block_user",
			link:                    "referral.store.read_link",
			owner:                   "referral.store.read_owner",
			insertBondQuery:         "referral.store.insert_bond",
			insertRegistrationQuery: "referral.store.insert_registration",
			deleteBondQuery:         "referral.store.delete_bond",
			putMarkQuery:            "referral.store.put_mark",
		},
	}
}

// start starts the storage span of query, a child of ctx's span; with
// tracing off (or no names) it returns ctx and a span that does nothing.
func (s *storeSpans) start(ctx context.Context, query string) (context.Context, trace.Span) {
	if s == nil || !telemetry.Enabled() {
		return telemetry.Start(ctx, "referral.store") // ctx as it is, and a span that does nothing
	}
	name, ok := s.names[query]
	if !ok {
		name = "referral.store.query"
	}
	return telemetry.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(s.system))
}
