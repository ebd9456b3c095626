-- +goose Up
-- The referral context (specs/referral-user-upserted-consumer.ru.txt): the
-- replica of identity users, referral links, bonds, the registrations journal
-- and the consumers' idempotency marks. Ids are canonical lower-case UUID
-- text; times are UTC RFC 3339 text (store.TimeLayout).

-- referral_users is ReferralUserReplica (referral.users), written only by the
-- identity-event consumers. type and status keep unknown values as sent;
-- replica_version is the monotonic guard (an update needs a larger Version).
-- registered_at is NULL when the first event seen had Version > 1.
create table referral_users (
  id text primary key,
  type text not null,
  company_id text,
  status text not null,
  first_name text not null,
  last_name text not null,
  middle_name text,
  phone_number text not null,
  is_name_filled integer not null check (is_name_filled in (0, 1)),
  registered_at text,
  replica_version integer not null check (replica_version >= 1),
  updated_at text not null
) strict;

-- referral_links: url is the slug; it is unique among links not deleted, so a
-- slug can be reused after its link is (softly) deleted.
create table referral_links (
  id text primary key,
  url text not null,
  owner_user_id text not null,
  tenant_id text not null,
  channel text not null,
  created_at text not null,
  deleted_at text
) strict;

create unique index ux_referral_links_url_active on referral_links (url) where deleted_at is null;
create index ix_referral_links_owner on referral_links (owner_user_id);

-- referral_bonds: one Active bond per referred user (INV-REF-001). A bond and
-- its journal entry point at each other (registration_id, bond_id); the bond
-- is written first, so only the journal's side is a foreign key.
create table referral_bonds (
  id text primary key,
  referred_user_id text not null,
  referrer_user_id text not null,
  referral_link_id text not null references referral_links (id),
  tenant_id text not null,
  bound_at text not null,
  applied_rule text not null,
  status text not null,
  registration_id text not null,
  created_at text not null
) strict;

create unique index ux_referral_bonds_referred_active on referral_bonds (referred_user_id)
  where status = 'Active';
create index ix_referral_bonds_referred on referral_bonds (referred_user_id);
create index ix_referral_bonds_referrer on referral_bonds (referrer_user_id);

-- referral_registrations is the journal; one Initial entry per referred user
-- (INV-REF-R1: first-seen). link_url, referrer_user_id and tenant_id are
-- denormalised from the link (INV-REF-R4).
create table referral_registrations (
  id text primary key,
  referred_user_id text not null,
  registration_type text not null,
  applied_rule text not null,
  lead_requested integer not null check (lead_requested in (0, 1)),
  link_url text not null,
  referrer_user_id text not null,
  tenant_id text not null,
  registered_at text not null,
  bond_id text references referral_bonds (id),
  created_at text not null
) strict;

create unique index ux_referral_registrations_initial on referral_registrations (referred_user_id)
  where registration_type = 'Initial';
create index ix_referral_registrations_referred on referral_registrations (referred_user_id);

-- referral_processed_messages holds the transport idempotency marks
-- ("pin.identity.user-upserted:{MessageId}"), written in the transaction of
-- the message's effect. id grows in commit order, so it is also the order in
-- which the messages took effect; outcome says what each one did.
create table referral_processed_messages (
  id integer primary key,
  mark text not null unique,
  user_id text not null,
  outcome text not null,
  processed_at text not null
) strict;

-- +goose Down
drop table referral_processed_messages;
drop table referral_registrations;
drop table referral_bonds;
drop table referral_links;
drop table referral_users;
