-- +goose Up
-- The console counts failed deliveries on every live refresh (overall and per
-- thread in the inbox); failed messages are few, so a partial index keeps
-- those counts from scanning every message.
create index omni_messages_failed_idx on omni_messages (thread_id) where status = 'failed';

-- +goose Down
drop index omni_messages_failed_idx;
