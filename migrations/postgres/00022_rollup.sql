-- +goose Up
-- rollup_minutes: the console's throughput per minute (package rollup); see
-- the SQLite migration of the same version.
create table rollup_minutes (
  series text collate "C" not null,
  minute bigint not null,
  value bigint not null,
  primary key (series, minute)
);
create index rollup_minutes_minute_idx on rollup_minutes (minute);

-- +goose Down
drop index rollup_minutes_minute_idx;
drop table rollup_minutes;
