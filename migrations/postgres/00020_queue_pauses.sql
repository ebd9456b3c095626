-- +goose Up
-- Paused queues and consumer groups (queue/pause.go): one row while paused,
-- none while running. queue is the queue's name with grp = '', or the topic's
-- name with grp = the consumer group. A worker's receive does not take the
-- messages of a queue that has a row here, and a subscriber of a paused group
-- starts no records; sends and publishes go on as ever. paused_by is who
-- paused it as the surface saw them ("console", "admin API"); reason is the
-- operator's note, '' when none was given.
create table queue_pauses (
  queue text collate "C" not null,
  grp text collate "C" not null,
  paused_at text collate "C" not null,
  paused_by text collate "C" not null,
  reason text collate "C" not null,
  primary key (queue, grp)
);

-- +goose Down
drop table queue_pauses;
