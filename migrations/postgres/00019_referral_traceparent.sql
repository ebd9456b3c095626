-- +goose Up
-- The W3C trace context (package telemetry) of the referral consumer's rows,
-- as a traceparent ('' when none was recorded: tracing off, or a row older
-- than this migration), so that the console's search can give an identity
-- event's processing and the bond it made their trace:
--
--   referral_processed_messages.traceparent  the event's processing
--                                            (referral.event.handle)
--   referral_bonds.traceparent               the processing that made the
--                                            bond; its outgoing events'
--                                            traces link to it
alter table referral_processed_messages add column traceparent text collate "C" not null default '';
alter table referral_bonds add column traceparent text collate "C" not null default '';

-- +goose Down
alter table referral_bonds drop column traceparent;
alter table referral_processed_messages drop column traceparent;
