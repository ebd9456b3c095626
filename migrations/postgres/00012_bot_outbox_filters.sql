-- +goose Up
-- The operators' filters of the outbox's event list (bot/backend
-- Outbox.ListEvents: by type, by uid, by Telegram id), newest first: each
-- index holds the filtered column with the id, so a filtered page walks
-- only its own rows, however rare they are in the table.
create index if not exists idx_bot_event_outbox_type on bot_event_outbox (event_type, id);
create index if not exists idx_bot_event_outbox_uid on bot_event_outbox (magnet_uid, id) where magnet_uid is not null;
create index if not exists idx_bot_event_outbox_telegram_id on bot_event_outbox (telegram_id, id) where telegram_id is not null;

-- +goose Down
drop index if exists idx_bot_event_outbox_telegram_id;
drop index if exists idx_bot_event_outbox_uid;
drop index if exists idx_bot_event_outbox_type;
