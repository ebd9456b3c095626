-- +goose Up
-- admin_sessions: the console's sessions (adminsession/). The cookie carries a
-- random 32-byte id; only its SHA-256 (hex) is kept here, so a copy of the
-- database opens no session. token_fp is a fingerprint of the admin token
-- the session was issued under: a session is valid only under that token,
-- so rotating SWITCHYARD_ADMIN_TOKEN ends every session. Logging out deletes
-- the row; expired rows and rows of an old token are deleted at login.
-- Times are UTC text (store.TimeLayout).
create table admin_sessions (
  id_hash text collate "C" primary key,
  token_fp text collate "C" not null,
  created_at text collate "C" not null,
  expires_at text collate "C" not null
);

create index admin_sessions_expires_at on admin_sessions (expires_at);

-- +goose Down
drop table admin_sessions;
