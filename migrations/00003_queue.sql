-- +goose Up
-- queue/: what goqite lacks. Times are store.TimeLayout text, except the
-- goqite table's own columns, which keep goqite's millisecond layout.

-- Idempotency keys: a second send with the same key to the same queue is a
-- no-op. Written in the transaction of the goqite insert; pruned by age.
create table queue_keys (
  queue text not null,
  key text not null,
  message_id text not null,
  created_at text not null,
  primary key (queue, key)
) strict;
create index queue_keys_created_idx on queue_keys (created_at);

-- Per-key order on queues: messages with the same order key run one at a
-- time in seq order. Only the head of a key is visible in goqite; the others
-- are parked (goqite timeout far in the future) until the head finishes.
-- seq never repeats, so a redriven message takes back its old place.
create table queue_order (
  seq integer primary key autoincrement,
  queue text not null,
  order_key text not null,
  message_id text not null unique,
  parked integer not null,
  not_before text not null
) strict;
create index queue_order_key_idx on queue_order (queue, order_key, seq);

-- Retry state of a live queue message: the attempt that failed last, its
-- error, and when the next attempt may start. Removed on ack or dead-letter.
create table queue_retries (
  message_id text primary key,
  queue text not null,
  attempt integer not null,
  last_error text not null,
  first_failed_at text not null,
  failed_at text not null
) strict;

-- Every failure, for the operator: which attempt, what error, when.
create table queue_failures (
  id integer primary key,
  queue text not null,
  grp text not null,
  message_id text not null,
  attempt integer not null,
  error text not null,
  outcome text not null check (outcome in ('retry', 'dead')),
  failed_at text not null
) strict;
create index queue_failures_message_idx on queue_failures (queue, grp, message_id);
create index queue_failures_failed_idx on queue_failures (failed_at);

-- Dead letters of queues (grp = '') and of consumer groups (grp = the group,
-- partition_id and log_offset set). The body is kept so a redrive works even
-- after the topic's retention removed the record.
create table queue_dead (
  id text primary key,
  queue text not null,
  grp text not null,
  partition_id integer,
  log_offset integer,
  key text not null,
  order_key text not null,
  seq integer not null,
  priority integer not null,
  body blob not null,
  attempts integer not null,
  last_error text not null,
  created_at text not null,
  first_failed_at text not null,
  dead_at text not null
) strict;
create index queue_dead_queue_idx on queue_dead (queue, grp, dead_at);

-- Topics, declared by the code that uses them.
create table queue_topics (
  name text primary key,
  partitions integer not null check (partitions between 1 and 1024),
  retention_seconds integer not null,
  created_at text not null
) strict;

create table queue_topic_partitions (
  topic text not null references queue_topics (name) on delete cascade,
  partition_id integer not null,
  next_offset integer not null,
  primary key (topic, partition_id)
) strict, without rowid;

-- The retained log: one row per record, offsets dense per partition.
create table queue_topic_log (
  topic text not null,
  partition_id integer not null,
  log_offset integer not null,
  key text not null,
  value blob not null,
  published_at text not null,
  primary key (topic, partition_id, log_offset)
) strict, without rowid;

create table queue_groups (
  topic text not null references queue_topics (name) on delete cascade,
  grp text not null,
  created_at text not null,
  primary key (topic, grp)
) strict;

-- committed: every record below it is finished (handled or dead-lettered),
-- except redriven ones listed in queue_group_retries.
create table queue_group_offsets (
  topic text not null,
  grp text not null,
  partition_id integer not null,
  committed integer not null,
  primary key (topic, grp, partition_id),
  foreign key (topic, grp) references queue_groups (topic, grp) on delete cascade
) strict, without rowid;

-- Records finished above the committed offset (other keys went ahead of a
-- held-back one). Folded into committed as soon as the gap closes.
create table queue_group_done (
  topic text not null,
  grp text not null,
  partition_id integer not null,
  log_offset integer not null,
  primary key (topic, grp, partition_id, log_offset)
) strict, without rowid;

-- Unfinished records that failed at least once or were redriven; value is
-- set for redriven records (the log may no longer hold them).
create table queue_group_retries (
  topic text not null,
  grp text not null,
  partition_id integer not null,
  log_offset integer not null,
  key text not null,
  value blob,
  published_at text not null,
  attempts integer not null,
  not_before text not null,
  last_error text not null,
  first_failed_at text,
  primary key (topic, grp, partition_id, log_offset)
) strict;

-- +goose Down
drop table queue_group_retries;
drop table queue_group_done;
drop table queue_group_offsets;
drop table queue_groups;
drop table queue_topic_log;
drop table queue_topic_partitions;
drop table queue_topics;
drop table queue_dead;
drop table queue_failures;
drop table queue_retries;
drop table queue_order;
drop table queue_keys;
