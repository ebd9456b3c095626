-- +goose Up
-- The backend half of the bot outbox contract (specs/bot-outbox-contract.ru.txt)
-- and the minimal backend domain it reads and changes: users, web-cabinet
-- notifications and one-time Telegram connect tokens. Every statement is
-- "if not exists", so running this file again changes nothing (the spec's
-- migration is safe to re-run).

-- users: the backend's accounts. link is the referral code; telegram_id is a
-- bigint kept as text (precision), bound after the in-bot confirmation;
-- preview_telegram_id is recorded when a connect token is redeemed.
create table if not exists users (
  uid integer primary key autoincrement,
  link text not null unique,
  name text not null,
  telegram_id text unique,
  preview_telegram_id text,
  leader_uid integer references users (uid),
  addr text,
  lp1 integer not null default 0 check (lp1 in (0, 1)),
  lp2 integer not null default 0 check (lp2 in (0, 1)),
  time_active text,
  registration_confirmed integer not null default 0 check (registration_confirmed in (0, 1)),
  created_at text not null
) strict;

create index if not exists idx_users_leader_uid on users (leader_uid);

-- web_notifications: the web cabinet's notifications; the bot writes one when a
-- DM fails (the passive fallback). dedup_key makes a retried write a no-op.
create table if not exists web_notifications (
  id integer primary key autoincrement,
  uid integer not null references users (uid),
  kind text not null,
  text text not null,
  dedup_key text,
  created_at text not null,
  read_at text,
  unique (uid, dedup_key)
) strict;

-- telegram_connect_tokens: one-time telegramConnect=<uuid> tokens.
create table if not exists telegram_connect_tokens (
  token text primary key,
  uid integer not null references users (uid),
  created_at text not null,
  expires_at text not null,
  used_at text,
  used_by_telegram_id text
) strict;

create index if not exists idx_telegram_connect_tokens_uid on telegram_connect_tokens (uid, expires_at);

-- bot_event_outbox: every column of the spec's entity. Ids are never reused
-- (autoincrement) because the bot's dedup ledger is keyed by them.
-- Beyond the spec: user_key is the grouping key of the pending order
-- ("uid:<20 digits>" or "tg:<20 digits>", the spec's COALESCE(magnet_uid,
-- telegram_id) made one type), and dead_lettered_at marks a registered event
-- that exhausted its attempts (processed_at stays NULL).
create table if not exists bot_event_outbox (
  id integer primary key autoincrement,
  event_type text not null check (event_type in (
    'wallet_connected', 'registered', 'new_partner',
    'status_nft_activated', 'reactivation', 'struct_overtake')),
  telegram_id text,
  magnet_uid integer,
  payload text,
  created_at text not null,
  processed_at text,
  attempts integer not null default 0,
  claimed_at text,
  locked_until text,
  last_error text,
  last_attempt_at text,
  next_retry_at text,
  user_key text not null,
  dead_lettered_at text
) strict;

create index if not exists idx_bot_event_outbox_processed_id on bot_event_outbox (processed_at, id);

-- The pending query walks this index in its own order (both "is null" terms
-- are equality lookups) and stops at the limit, without sorting the backlog.
create index if not exists idx_bot_event_outbox_pending
  on bot_event_outbox (processed_at, dead_lettered_at, user_key, id);

-- +goose Down
drop index if exists idx_bot_event_outbox_pending;
drop index if exists idx_bot_event_outbox_processed_id;
drop table if exists bot_event_outbox;
drop index if exists idx_telegram_connect_tokens_uid;
drop table if exists telegram_connect_tokens;
drop table if exists web_notifications;
drop table if exists users;
