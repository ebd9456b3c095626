-- +goose Up
-- The W3C trace context (package telemetry) that travels with a queue
-- message or a topic record, as a traceparent ('' when none was recorded:
-- tracing off, or a row older than this migration). Package queue writes the
-- sender's or publisher's span context here and hands it to the handler, so
-- the work that crosses a queue or a topic stays in (or links to) the trace
-- that caused it:
--
--   goqite.traceparent               the span that sent the message
--   queue_dead.traceparent           the dead message's or record's, kept so
--                                    that a redrive carries it on
--   queue_topic_log.traceparent      the span that published the record
--   queue_group_retries.traceparent  the retrying record's
alter table goqite add column traceparent text collate "C" not null default '';
alter table queue_dead add column traceparent text collate "C" not null default '';
alter table queue_topic_log add column traceparent text collate "C" not null default '';
alter table queue_group_retries add column traceparent text collate "C" not null default '';

-- +goose Down
alter table queue_group_retries drop column traceparent;
alter table queue_topic_log drop column traceparent;
alter table queue_dead drop column traceparent;
alter table goqite drop column traceparent;
