-- +goose Up
-- The console's search ("what happened to X", web /admin/search) asks each
-- owning package what its tables know about a Telegram id, an identity user
-- id, an idempotency key or a trace id. These indexes let each of those
-- bounded reads find its rows without scanning a table that grows with
-- traffic. A trace id is found by the range of traceparents that start with
-- "00-<trace id>-"; the partial indexes hold only the rows that recorded one.
create index bot_event_outbox_traceparent_idx on bot_event_outbox (traceparent) where traceparent <> '';
create index bot_updates_traceparent_idx on bot_updates (traceparent) where traceparent <> '';
create index bot_deliveries_traceparent_idx on bot_deliveries (traceparent) where traceparent <> '';
create index bot_updates_chat_idx on bot_updates (chat_id, received_at);
create index bot_processed_events_user_idx on bot_processed_events (user_key, id);
create index referral_processed_messages_user_idx on referral_processed_messages (user_id, id);
create index omni_contacts_provider_user_idx on omni_contacts (provider_user_id);
create index omni_inbound_events_thread_idx on omni_inbound_events (thread_id, applied_at);

-- +goose Down
drop index omni_inbound_events_thread_idx;
drop index omni_contacts_provider_user_idx;
drop index referral_processed_messages_user_idx;
drop index bot_processed_events_user_idx;
drop index bot_updates_chat_idx;
drop index bot_deliveries_traceparent_idx;
drop index bot_updates_traceparent_idx;
drop index bot_event_outbox_traceparent_idx;
