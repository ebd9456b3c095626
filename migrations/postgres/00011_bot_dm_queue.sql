-- +goose Up
-- The onboarding bot's Telegram calls go through the queue onboarding.dm
-- (queue/, like every other delivery) instead of its own records. This moves
-- the records of bot_outgoing that were not done into the queue's tables, in
-- exactly the layout queue/ writes (queue/queue.go send, queue/queue.go
-- deadLetterMessage), keeps the finished ones as the bot's delivery history,
-- and drops bot_outgoing.
--
--   pending, sending → a live message of onboarding.dm: a goqite row, its
--                      idempotency key in queue_keys (the record's dedup_key)
--                      and its place in its chat's order in queue_order (the
--                      record's order_key), attempts starting again
--   failed           → a dead letter of onboarding.dm in queue_dead, with its
--                      attempts and last error, for an operator to redrive
--   sent, notified   → a row of bot_deliveries
--
-- A message's body is the JSON the bot's handler decodes
-- (bot/onboarding/telegram_sender.go, type dm). Message ids are "o_" (ids of
-- messages with an order key) and 32 hex digits: "b0" and the record's id,
-- so the three inserts agree without a temporary table.
--
-- The PostgreSQL twin of ../00011_bot_dm_queue.sql. No PostgreSQL database
-- predates this migration (PostgreSQL support arrived with all of them at
-- once), so bot_outgoing is always empty here and the moves below move
-- nothing; they are kept, translated, so both files say the same thing:
-- printf('%030x', id) is lpad(to_hex(id), 30, '0'), json_object/json are
-- jsonb_build_object and ::jsonb (the handler decodes the body, so jsonb's key
-- order does not matter), json_extract(x, '$.text') is x::jsonb ->> 'text',
-- and cast(… as blob) is convert_to(…::text, 'UTF8'). goqite keeps its times
-- as text with milliseconds ("…T12:00:00.123Z"): the first 23 characters of
-- the store's microsecond layout and a "Z".

-- bot_deliveries: every Telegram call (or fallback notification) the bot
-- delivered, recorded in the transaction that acknowledges its message of
-- onboarding.dm; the console's user timeline reads it. Pruned after 30 days
-- with the bot's other history.
create table bot_deliveries (
  dm_key text collate "C" primary key,
  method text collate "C" not null,
  chat_id text collate "C" not null,
  text text collate "C" not null,
  outcome text collate "C" not null check (outcome in ('sent', 'notified')),
  telegram_message_id bigint,
  attempts bigint not null,
  delivered_at text collate "C" not null
);

create index bot_deliveries_chat on bot_deliveries (chat_id, delivered_at);
create index bot_deliveries_delivered_at on bot_deliveries (delivered_at);

-- The head of each chat's order is visible (not before its next attempt);
-- the others are parked behind it, as send parks a message whose order key
-- has one queued.
insert into queue_order (queue, order_key, message_id, parked, not_before)
select 'onboarding.dm', o.order_key,
  'o_b0' || lpad(to_hex(o.id), 30, '0'),
  case when exists (
    select 1 from bot_outgoing e
    where e.order_key = o.order_key and e.id < o.id and e.status in ('pending', 'sending')) then 1 else 0 end,
  substr(o.next_attempt_at, 1, 23) || 'Z'
from bot_outgoing o
where o.status in ('pending', 'sending')
order by o.id;

insert into goqite (id, created, queue, body, timeout, received, priority)
select q.message_id, substr(o.created_at, 1, 23) || 'Z',
  case when q.parked = 1 then 'onboarding.dm~held' else 'onboarding.dm' end,
  convert_to(jsonb_build_object(
    'key', o.dedup_key, 'method', o.method, 'chatId', nullif(o.chat_id, ''), 'params', o.params::jsonb,
    'fallback', o.fallback::jsonb, 'phase', o.phase)::text, 'UTF8'),
  case when q.parked = 1 then '9999-12-31T23:59:59.999Z' else q.not_before end,
  0, 0
from bot_outgoing o join queue_order q on q.message_id = 'o_b0' || lpad(to_hex(o.id), 30, '0')
where o.status in ('pending', 'sending');

insert into queue_keys (queue, key, message_id, created_at)
select 'onboarding.dm', dedup_key, 'o_b0' || lpad(to_hex(id), 30, '0'), created_at
from bot_outgoing
where status in ('pending', 'sending', 'failed');

insert into queue_dead (id, queue, grp, partition_id, log_offset, key, order_key, seq, priority, body,
  attempts, last_error, created_at, first_failed_at, dead_at)
select 'o_b0' || lpad(to_hex(id), 30, '0'), 'onboarding.dm', '', null, null, '', order_key, 0, 0,
  convert_to(jsonb_build_object(
    'key', dedup_key, 'method', method, 'chatId', nullif(chat_id, ''), 'params', params::jsonb,
    'fallback', fallback::jsonb, 'phase', phase)::text, 'UTF8'),
  attempts, coalesce(last_error, ''), created_at, updated_at, updated_at
from bot_outgoing
where status = 'failed';

insert into bot_deliveries (dm_key, method, chat_id, text, outcome, telegram_message_id, attempts, delivered_at)
select dedup_key, method, chat_id,
  coalesce(case when status = 'notified' then fallback::jsonb ->> 'text' else params::jsonb ->> 'text' end, ''),
  status, telegram_message_id, attempts, coalesce(done_at, updated_at)
from bot_outgoing
where status in ('sent', 'notified');

drop table bot_outgoing;

-- +goose Down
-- The calls in the queue stay there: a binary of the version before does
-- not read them.
create table bot_outgoing (
  id bigint generated by default as identity primary key,
  dedup_key text collate "C" not null unique,
  method text collate "C" not null
    check (method in ('sendMessage', 'editMessageReplyMarkup', 'answerCallbackQuery')),
  chat_id text collate "C" not null,
  order_key text collate "C" not null,
  params text collate "C" not null,
  fallback text collate "C",
  status text collate "C" not null check (status in ('pending', 'sending', 'sent', 'notified', 'failed')),
  phase text collate "C" not null default 'telegram' check (phase in ('telegram', 'fallback')),
  attempts bigint not null default 0,
  next_attempt_at text collate "C" not null,
  claimed_until text collate "C",
  last_error text collate "C",
  telegram_message_id bigint,
  created_at text collate "C" not null,
  updated_at text collate "C" not null,
  done_at text collate "C"
);

create index bot_outgoing_due on bot_outgoing (status, next_attempt_at)
  where status in ('pending', 'sending');
create index bot_outgoing_order on bot_outgoing (order_key, id)
  where status in ('pending', 'sending');
create index bot_outgoing_done on bot_outgoing (done_at) where done_at is not null;

drop index bot_deliveries_delivered_at;
drop index bot_deliveries_chat;
drop table bot_deliveries;
