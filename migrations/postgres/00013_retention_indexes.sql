-- +goose Up
-- The retention runner (retention/) deletes the oldest rows of each table
-- that grows with traffic, in batches of at most a thousand rows by an age
-- column; each of these indexes lets a batch find its rows without
-- scanning the table, so that no batch holds the writer for long.
create index omni_inbound_events_applied_idx on omni_inbound_events (applied_at);
create index omni_messages_created_idx on omni_messages (created_at);
create index queue_dead_dead_at_idx on queue_dead (dead_at);
create index referral_processed_messages_processed_idx on referral_processed_messages (processed_at);

-- +goose Down
drop index referral_processed_messages_processed_idx;
drop index queue_dead_dead_at_idx;
drop index omni_messages_created_idx;
drop index omni_inbound_events_applied_idx;
