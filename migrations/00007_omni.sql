-- +goose Up
-- The chat platform's domain (specs/adr-0001-chat-platform-split.ru.txt):
-- business connections, contacts, threads and messages, written only by the
-- chat role (omni_chat) and, for delivery status, by the outbound role.
-- Provider ids are text (Telegram's 64-bit ids and opaque strings alike).

-- omni_business_connections: the state of each Telegram Business connection
-- as its business_connection updates told it. event_date guards against an
-- older update overwriting a newer one.
create table omni_business_connections (
  id text primary key,
  bot_id text not null,
  user_id text not null,
  user_chat_id text not null,
  enabled integer not null check (enabled in (0, 1)),
  can_reply integer not null check (can_reply in (0, 1)),
  event_date text not null,
  created_at text not null,
  updated_at text not null
) strict;

-- omni_contacts: one per provider identity. provider_user_id is the id of the
-- counterpart's chat (for a private chat, the user's id); a business chat's
-- contact is scoped to its connection ('' for the bot's own chats).
create table omni_contacts (
  id integer primary key autoincrement,
  provider text not null,
  business_connection_id text not null default '',
  provider_user_id text not null,
  name text not null default '',
  username text not null default '',
  reachable integer not null default 1 check (reachable in (0, 1)),
  unreachable_reason text,
  created_at text not null,
  updated_at text not null,
  unique (provider, business_connection_id, provider_user_id)
) strict;

-- omni_threads: one per contact and channel (or business connection),
-- created with its first message, so last_message_at is set from then on.
-- bot_id is the bot the thread's updates came through; replies go through the
-- outbound role's bot, and Telegram refuses them if it is another one.
create table omni_threads (
  id integer primary key autoincrement,
  contact_id integer not null references omni_contacts (id),
  channel text not null,
  business_connection_id text not null default '',
  bot_id text not null,
  chat_id text not null,
  state text not null check (state in ('open', 'closed')),
  unread integer not null default 0 check (unread >= 0),
  last_message_at text,
  created_at text not null,
  updated_at text not null,
  unique (contact_id, channel, business_connection_id)
) strict;

create index omni_threads_last_message_idx on omni_threads (last_message_at, id);

-- omni_messages: inbound messages as received and outbound messages with
-- their delivery status. seq is the thread's order: inbound messages take it
-- in provider order (receiver.flow is ordered per thread), outbound ones when
-- they are queued. The row is also the record every Telegram send goes
-- through: a message in status sent is never sent again.
create table omni_messages (
  id integer primary key autoincrement,
  thread_id integer not null references omni_threads (id),
  seq integer not null,
  direction text not null check (direction in ('inbound', 'outbound')),
  origin text not null check (origin in ('provider', 'operator', 'rule')),
  kind text not null check (kind in ('text', 'media', 'callback', 'service')),
  text text not null default '',
  status text not null check (status in ('received', 'queued', 'sending', 'sent', 'retrying', 'failed')),
  provider_message_id text,
  provider_event_id text,
  provider_date text,
  attempts integer not null default 0,
  next_attempt_at text,
  failure_reason text,
  edited_at text,
  deleted_at text,
  sent_at text,
  created_at text not null,
  updated_at text not null,
  unique (thread_id, seq)
) strict;

create unique index omni_messages_provider_idx on omni_messages (thread_id, provider_message_id)
  where provider_message_id is not null;

-- omni_inbound_events: the chat role's dedup ledger, one row per envelope
-- applied from receiver.flow, written in the transaction of its effect.
create table omni_inbound_events (
  idempotency_key text primary key,
  event_type text not null,
  thread_id integer,
  outcome text not null check (outcome in ('applied', 'ignored')),
  occurred_at text not null,
  received_at text not null,
  applied_at text not null
) strict;

-- omni_parked: the keys whose messages are in a retry lane. A message that
-- fails in receiver.flow or sender.flow moves to receiver.retry or
-- sender.retry and parks its ordering key (a thread, a chat) here; later
-- messages of that key follow it into the retry lane, behind it, until the
-- lane has finished every one of them. lane is 'receiver' or 'sender'.
create table omni_parked (
  lane text not null,
  message_key text not null,
  order_key text not null,
  parked_at text not null,
  primary key (lane, message_key)
) strict;

create index omni_parked_order_idx on omni_parked (lane, order_key);

-- omni_rules: the chat rules an operator changed; a rule without a row
-- takes the chat role's configured default.
create table omni_rules (
  name text primary key,
  enabled integer not null check (enabled in (0, 1)),
  text text not null,
  updated_at text not null
) strict;

-- +goose Down
drop table omni_rules;
drop index omni_parked_order_idx;
drop table omni_parked;
drop table omni_inbound_events;
drop index omni_messages_provider_idx;
drop table omni_messages;
drop index omni_threads_last_message_idx;
drop table omni_threads;
drop table omni_contacts;
drop table omni_business_connections;
