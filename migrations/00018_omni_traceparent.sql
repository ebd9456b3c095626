-- +goose Up
-- The W3C trace context (package telemetry) of the chat platform's rows, as
-- a traceparent ('' when none was recorded: tracing off, or a row older than
-- this migration), so that the console's search can give an update, a
-- message and its delivery their trace:
--
--   omni_inbound_events.traceparent  the apply of the update
--                                    (omni.chat.apply), in its webhook's trace
--   omni_messages.traceparent        the span that wrote the message: an
--                                    inbound one's apply, an automatic
--                                    reply's apply, an operator reply's
--                                    request; its deliveries join that trace
alter table omni_inbound_events add column traceparent text not null default '';
alter table omni_messages add column traceparent text not null default '';

-- +goose Down
alter table omni_messages drop column traceparent;
alter table omni_inbound_events drop column traceparent;
