-- +goose Up
-- The console's lists at any size (issue 20): each list is read in windows
-- by a key, newest first, and counted; these indexes let each window and
-- each count read only its own rows, however deep the window and however
-- rare the rows in their table. (The outbox's filters have theirs already:
-- 00004 and 00012.)

-- The inbox by state, latest activity first (omni ListThreads): the key
-- (last_message_at, id) under the state, which also counts a state's
-- threads from the index alone.
create index omni_threads_state_last_message_idx on omni_threads (state, last_message_at, id);

-- +goose Down
drop index omni_threads_state_last_message_idx;
