-- +goose Up
-- omni_inbound_events.reason: why the chat role stored an envelope as
-- ignored (group_chat, unused_update_type, stale_edit, …; omni.IgnoreReason),
-- for the operator reading the ledger; null for applied envelopes.
alter table omni_inbound_events add column reason text collate "C";

-- +goose Down
alter table omni_inbound_events drop column reason;
