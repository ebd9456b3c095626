-- +goose Up
-- The console's lists at any size (issue 20): each list is read in windows
-- by a key, newest first, and counted; these indexes let each window and
-- each count read only its own rows, however deep the window and however
-- rare the rows in their table. (The outbox's other filters have theirs:
-- 00004 and 00012.)

-- The outbox's dead letters in id order (bot/backend ListEvents with
-- state=dead): however rare among a million events, a window reads only
-- its own rows. PostgreSQL walks it; SQLite's planner, without statistics,
-- walks the unfinished rows of (processed_at, id), which are few.
create index bot_event_outbox_dead_idx on bot_event_outbox (id)
  where processed_at is null and dead_lettered_at is not null;

-- The inbox by state, latest activity first (omni ListThreads): the key
-- (last_message_at, id) under the state, which also counts a state's
-- threads from the index alone.
create index omni_threads_state_last_message_idx on omni_threads (state, last_message_at, id);

-- The referral links, newest first (referral ListLinks): the live ones, as
-- the console shows them by default, and all of them with the deleted.
create index referral_links_live_created_idx on referral_links (created_at, id) where deleted_at is null;
create index referral_links_created_idx on referral_links (created_at, id);

-- The replicas, changed last first (referral ListReplicas).
create index referral_users_updated_idx on referral_users (updated_at, id);

-- The onboarding funnel's users, changed last first (bot/onboarding
-- ListFunnels), all of them and at one stage.
create index bot_funnel_updated_idx on bot_funnel (updated_at, telegram_id);
create index bot_funnel_stage_updated_idx on bot_funnel (stage, updated_at, telegram_id);

-- +goose Down
drop index bot_funnel_stage_updated_idx;
drop index bot_funnel_updated_idx;
drop index referral_users_updated_idx;
drop index referral_links_created_idx;
drop index referral_links_live_created_idx;
drop index omni_threads_state_last_message_idx;
drop index bot_event_outbox_dead_idx;
