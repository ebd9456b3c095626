-- +goose Up
-- Settings the process keeps between starts: generated secrets, first-start facts.
create table store_settings (
  key text collate "C" primary key,
  value text collate "C" not null,
  updated_at text collate "C" not null
);

-- Lease locks for single-flight work across processes on one file
-- (the specs' Redlock): a lease is held until expires_at or release.
create table store_leases (
  name text collate "C" primary key,
  owner text collate "C" not null,
  expires_at text collate "C" not null
);

-- One row that /readyz rewrites to prove the database takes writes.
-- A plain key, not an identity: the one row is always written with id 1
-- (store/health.go).
create table store_heartbeat (
  id bigint primary key check (id = 1),
  at text collate "C" not null
);

-- +goose Down
drop table store_heartbeat;
drop table store_leases;
drop table store_settings;
