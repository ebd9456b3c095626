-- +goose Up
-- The console and the admin API list a queue's (or a consumer group's) dead
-- letters and a queue's live messages one window at a time, newest first,
-- by keyset: the rows before or after the (time, id) of a window's edge.
-- With the id in the index, a window is one range of it, so it costs the
-- same at any depth, and counting a list (the pager's "51–100 of 10,000")
-- reads the index alone. The dead-letter index replaces the one that lacked
-- the id (its prefix). A queue's live messages get no such index: goqite's
-- (queue, created, id) cost every send and every delete an index write
-- (10-15% of the queue loop's throughput), so a live window sorts the
-- queue's backlog instead, which is small while a queue keeps up.
drop index queue_dead_queue_idx;
create index queue_dead_list_idx on queue_dead (queue, grp, dead_at, id);

-- +goose Down
drop index queue_dead_list_idx;
create index queue_dead_queue_idx on queue_dead (queue, grp, dead_at);
