-- +goose Up
-- rollup_minutes: the console's throughput per minute (package rollup), so
-- that a chart of seven days reads 10,080 small rows per series instead of
-- every row the week wrote. series names what is counted
-- ("bot.outbox.handled"); minute is the minute's start as whole minutes
-- since 1970-01-01 UTC; value is how many rows of the series its owner
-- stamped in that minute. A minute with no row counted nothing, and the
-- newest row of a series says how far its minutes are rolled up. One
-- process at a time rolls up (the lease "rollup") and a minute's row is
-- written with its whole count, never added to, so several processes on
-- one database count each row once. The retention rule "rollups" deletes
-- old rows by minute.
create table rollup_minutes (
  series text not null,
  minute integer not null,
  value integer not null,
  primary key (series, minute)
) strict, without rowid;
create index rollup_minutes_minute_idx on rollup_minutes (minute);

-- +goose Down
drop index rollup_minutes_minute_idx;
drop table rollup_minutes;
