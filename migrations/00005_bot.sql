-- +goose Up
-- The onboarding bot's own tables (specs/bot-outbox-contract.ru.txt, the bot
-- half): the dedup ledger of outbox events, the funnel per Telegram user and
-- its history, the outgoing-message records every Telegram call goes through,
-- the Telegram updates as received with the durable getUpdates offset, and the
-- users Telegram said cannot be reached. Telegram ids are text (bigint
-- precision); times are UTC text (store.TimeLayout).

-- bot_processed_events is the spec's dedup ledger: one row per outbox event
-- the bot handled, written in the transaction of the handler's effects.
-- id grows in commit order, so it is also the order events took effect.
create table bot_processed_events (
  id integer primary key autoincrement,
  outbox_event_id integer not null unique,
  event_type text not null,
  user_key text not null,
  outcome text not null,
  emitted_at text not null,
  processed_at text not null
) strict;

create index bot_processed_events_processed_at on bot_processed_events (processed_at);

-- bot_funnel: one row per Telegram user. stage only grows (1–9, see
-- bot.Stage); leader_* is the leader the user arrived with (the first code
-- that resolved); registered_leader_uid is the leader the registered event
-- named, and left_leader_at marks a user who registered under another leader.
create table bot_funnel (
  telegram_id text primary key,
  uid integer,
  stage integer not null default 0 check (stage between 0 and 9),
  leader_uid integer,
  leader_code text,
  leader_name text,
  registered_leader_uid integer,
  left_leader_at text,
  bind_state text not null default 'none'
    check (bind_state in ('none', 'awaiting', 'prompted', 'bound', 'declined')),
  created_at text not null,
  updated_at text not null
) strict;

create index bot_funnel_uid on bot_funnel (uid);
create index bot_funnel_left_leader on bot_funnel (left_leader_at) where left_leader_at is not null;

-- bot_funnel_history: every change of a funnel row and its cause
-- ("event:<outbox id>" or "update:<update id>").
create table bot_funnel_history (
  id integer primary key autoincrement,
  telegram_id text not null,
  cause text not null,
  change text not null,
  old_value text,
  new_value text,
  at text not null
) strict;

create index bot_funnel_history_user on bot_funnel_history (telegram_id, id);

-- bot_outgoing: every Telegram call the bot makes, recorded in the
-- transaction of its cause and keyed by it (dedup_key "event:<id>:<n>" or
-- "update:<bot>:<id>:<n>"), so a cause yields its calls once. Calls of one
-- order_key (a chat) go out one at a time in id order. phase is what the next
-- attempt does: call Telegram, or post the fallback web notification
-- (fallback, a bot.NewNotification as JSON) after Telegram said the user
-- cannot be reached. A call in status sent or notified is never made again.
create table bot_outgoing (
  id integer primary key autoincrement,
  dedup_key text not null unique,
  method text not null
    check (method in ('sendMessage', 'editMessageReplyMarkup', 'answerCallbackQuery')),
  chat_id text not null,
  order_key text not null,
  params text not null,
  fallback text,
  status text not null check (status in ('pending', 'sending', 'sent', 'notified', 'failed')),
  phase text not null default 'telegram' check (phase in ('telegram', 'fallback')),
  attempts integer not null default 0,
  next_attempt_at text not null,
  claimed_until text,
  last_error text,
  telegram_message_id integer,
  created_at text not null,
  updated_at text not null,
  done_at text
) strict;

create index bot_outgoing_due on bot_outgoing (status, next_attempt_at)
  where status in ('pending', 'sending');
create index bot_outgoing_order on bot_outgoing (order_key, id)
  where status in ('pending', 'sending');
create index bot_outgoing_done on bot_outgoing (done_at) where done_at is not null;

-- bot_updates: Telegram updates as received (long polling or webhook),
-- stored before they are confirmed to Telegram; handled in update_id order
-- per chat.
create table bot_updates (
  bot_id integer not null,
  update_id integer not null,
  chat_id text not null,
  kind text not null,
  payload text not null,
  status text not null check (status in ('pending', 'done', 'failed')),
  attempts integer not null default 0,
  next_attempt_at text not null,
  last_error text,
  received_at text not null,
  done_at text,
  primary key (bot_id, update_id)
) strict;

create index bot_updates_pending on bot_updates (bot_id, status, chat_id, update_id)
  where status = 'pending';
create index bot_updates_done on bot_updates (done_at) where done_at is not null;

-- bot_update_offsets: the next getUpdates offset per bot, advanced in the
-- transaction that stores the updates before it.
create table bot_update_offsets (
  bot_id integer primary key,
  next_offset integer not null,
  updated_at text not null
) strict;

-- bot_unreachable: users Telegram refused to deliver to (blocked the bot,
-- never started it); cleared when they write to the bot again.
create table bot_unreachable (
  telegram_id text primary key,
  reason text not null,
  since text not null
) strict;

-- +goose Down
drop table bot_unreachable;
drop table bot_update_offsets;
drop index bot_updates_done;
drop index bot_updates_pending;
drop table bot_updates;
drop index bot_outgoing_done;
drop index bot_outgoing_order;
drop index bot_outgoing_due;
drop table bot_outgoing;
drop index bot_funnel_history_user;
drop table bot_funnel_history;
drop index bot_funnel_left_leader;
drop index bot_funnel_uid;
drop table bot_funnel;
drop index bot_processed_events_processed_at;
drop table bot_processed_events;
