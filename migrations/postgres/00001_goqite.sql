-- +goose Up
-- goqite's schema, as shipped in maragu.dev/goqite v0.4.0, in the layout of
-- the SQLite twin (../00001_goqite.sql), not goqite's schema_postgres.sql:
-- created, updated and timeout stay text in goqite's millisecond layout
-- ("2006-01-02T15:04:05.000Z", what SQLite's strftime('%Y-%m-%dT%H:%M:%fZ')
-- writes), so text order is time order and queue/'s one SQL text runs on
-- both backends. The id is "m_" and 32 lower-case hex digits, as on SQLite
-- (gen_random_uuid is built in since PostgreSQL 13; no pgcrypto).
create table goqite (
  id text collate "C" primary key default ('m_' || replace(gen_random_uuid()::text, '-', '')),
  created text collate "C" not null default (to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
  updated text collate "C" not null default (to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
  queue text collate "C" not null,
  body bytea not null,
  timeout text collate "C" not null default (to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
  received bigint not null default 0,
  priority bigint not null default 0
);

-- SQLite's after-update trigger rewrites updated; here a before-update trigger
-- sets it on the row being written, with the same effect.
-- +goose StatementBegin
create function goqite_updated_timestamp() returns trigger language plpgsql as $$
begin
  new.updated = to_char(now() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
  return new;
end;
$$;
-- +goose StatementEnd

create trigger goqite_updated_timestamp before update on goqite
  for each row execute function goqite_updated_timestamp();

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);

-- +goose Down
drop table goqite;
drop function goqite_updated_timestamp();
