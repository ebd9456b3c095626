-- +goose Up
-- Attempt history (issue 20): every delivery attempt worth keeping, with how
-- long it ran and which instance ran it.
--
-- queue/: queue_failures becomes the attempt history of queue messages and
-- topic records. Besides every failed attempt (retry, dead) it now keeps the
-- success of a message or record that has a history (done) — a message that
-- failed twice and then succeeded has three rows — and an operator's redrive
-- of a dead letter (redriven, attempt 0). A first-try success is not recorded
-- unless its queue or group asks for it (NewOpts.RecordSuccesses): a row per
-- handled message is what the queue's hottest path cannot afford to keep
-- (docs/benchmarks.md, "Attempt history cost"). duration_us is how long the
-- handler ran, null when nobody knows (a delivery that timed out);
-- instance names the process that ran it, hostname:pid. SQLite cannot widen
-- a check constraint in place, so the table is rebuilt with its rows.
create table queue_failures_new (
  id integer primary key,
  queue text not null,
  grp text not null,
  message_id text not null,
  attempt integer not null,
  error text not null,
  outcome text not null check (outcome in ('retry', 'dead', 'done', 'redriven')),
  failed_at text not null,
  duration_us integer,
  instance text not null default ''
) strict;
insert into queue_failures_new (id, queue, grp, message_id, attempt, error, outcome, failed_at)
  select id, queue, grp, message_id, attempt, error, outcome, failed_at from queue_failures;
drop table queue_failures;
alter table queue_failures_new rename to queue_failures;
create index queue_failures_message_idx on queue_failures (queue, grp, message_id);
create index queue_failures_failed_idx on queue_failures (failed_at);

-- bot/backend: the attempts of the outbox's events, one row per ack that
-- changed an event — a retry, the closing or dead-lettering retry after the
-- last attempt, the processed ack of an event with a history (a first-try
-- success is the event's own processed_at) — and an operator's redrive
-- (attempt 0). attempt is the event's attempt number (1 for the first
-- delivery, again 1 after a redrive); instance is the consumer's
-- X-Switchyard-Instance header, else the instance that took the ack. The
-- contract's fetch is a read, so nobody knows when the bot began an
-- attempt: there is no duration. Written in the transaction of the ack or
-- the redrive; pruned with the events.
create table bot_event_attempts (
  id integer primary key,
  event_id integer not null,
  attempt integer not null,
  outcome text not null check (outcome in ('processed', 'retry', 'dead_letter', 'closed', 'redriven')),
  error text not null,
  at text not null,
  instance text not null
) strict;
create index bot_event_attempts_event_idx on bot_event_attempts (event_id, id);
create index bot_event_attempts_at_idx on bot_event_attempts (at);

-- +goose Down
drop table bot_event_attempts;
create table queue_failures_old (
  id integer primary key,
  queue text not null,
  grp text not null,
  message_id text not null,
  attempt integer not null,
  error text not null,
  outcome text not null check (outcome in ('retry', 'dead')),
  failed_at text not null
) strict;
insert into queue_failures_old (id, queue, grp, message_id, attempt, error, outcome, failed_at)
  select id, queue, grp, message_id, attempt, error, outcome, failed_at from queue_failures where outcome in ('retry', 'dead');
drop table queue_failures;
alter table queue_failures_old rename to queue_failures;
create index queue_failures_message_idx on queue_failures (queue, grp, message_id);
create index queue_failures_failed_idx on queue_failures (failed_at);
