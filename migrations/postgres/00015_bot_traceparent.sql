-- +goose Up
-- The W3C trace context (package telemetry) that travels with the bot's work,
-- as a traceparent ('' when none was recorded: tracing off, or a row older
-- than this migration):
--
--   bot_event_outbox.traceparent  the emit's span (bot.outbox.emit), written
--                                 by bot/backend EmitTx; GET
--                                 /bot/events/pending hands it to the bot,
--                                 whose handling links to it
--   bot_updates.traceparent       the webhook request that stored the update
--                                 (POST /webhooks/bot), which its handling
--                                 continues; '' for updates fetched by
--                                 getUpdates
--   bot_deliveries.traceparent    the span that delivered the DM (bot.dm.send)
alter table bot_event_outbox add column traceparent text collate "C" not null default '';
alter table bot_updates add column traceparent text collate "C" not null default '';
alter table bot_deliveries add column traceparent text collate "C" not null default '';

-- +goose Down
alter table bot_deliveries drop column traceparent;
alter table bot_updates drop column traceparent;
alter table bot_event_outbox drop column traceparent;
