-- +goose Up
-- The Overview's headline numbers of the chat platform (omni Counts) read
-- the unread messages of the open threads: with this index only the threads
-- that have some, not every open thread of the table (200,000 threads took
-- 30 ms to sum; the open ones are counted from
-- omni_threads_state_last_message_idx alone). A thread enters it when a
-- customer writes and leaves it when an operator reads the thread.
create index omni_threads_unread_idx on omni_threads (state, unread) where unread > 0;

-- +goose Down
drop index omni_threads_unread_idx;
