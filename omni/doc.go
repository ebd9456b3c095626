// Package omni is the chat platform of ADR-0001 in three roles of one binary,
// over the goqite queues receiver.flow, receiver.retry, sender.flow and
// sender.retry (with queue/'s dead letters as receiver.dlq and sender.dlq):
//
//	Telegram ─POST /webhooks/telegram─▶ Inbound ─▶ receiver.flow ─▶ Chat ─▶ sender.flow ─▶ Outbound ─▶ Telegram
//
// Inbound (omni_inbound) authenticates the webhook, normalises each update
// into the universal envelope v1 (docs/contracts/omni-inbound-envelope.v1.json)
// and enqueues it; it writes no chat state. Chat (omni_chat) applies
// envelopes to contacts, threads and messages and queues outgoing commands
// from its rules; it never calls a provider. Outbound (omni_outbound)
// delivers commands through the Telegram Bot API under the rate limits, with
// retries, and records delivery status; it makes no chat decision. Admin is
// the operators' API. Each role can run in its own process on the same
// database (one SQLite file, or one PostgreSQL database).
//
// Guarantees:
//
//   - A 200 from the webhook means the envelope is committed on
//     receiver.flow (with synchronous=FULL, it survives a power cut); a
//     duplicate delivery of an update (same idempotency key,
//     telegram:{botId}:{update_id}) answers 200 and enqueues nothing; a
//     storage failure answers 503 and keeps nothing, so Telegram delivers
//     again. Concurrent webhooks share commits on SQLite (store's group
//     commit); on PostgreSQL each is a transaction of its own.
//   - Every authenticated update that is a UTF-8 JSON object with an
//     integer update_id is stored and answered 200, whatever its type or
//     content (a 4xx would make Telegram drop it); its envelope's
//     payloadRaw is the body byte for byte. What the chat role cannot use
//     ends ignored in the ledger with its IgnoreReason (group chats unless
//     ChatOpts.GroupChats admits them, update types it does not use, …) or,
//     for an update lacking what the Bot API always sends, in receiver.dlq
//     with the reason.
//   - Every envelope takes effect once: the chat role writes its dedup row
//     (omni_inbound_events) in the transaction of the effect.
//   - Per-thread order: the envelopes of one thread are applied in the order
//     they were enqueued, across retries and restarts, and a failing thread
//     does not hold up the others (see lane). Edits apply in provider order:
//     an older edit never overwrites a newer one.
//   - Per-chat send order: messages to one chat are sent one at a time in the
//     order they were queued, across retries and restarts.
//   - A message is sent through its own row: one in status sent is never sent
//     again. Only a crash between Telegram's answer and its record (or a
//     call that timed out after Telegram accepted it) can send it twice.
//   - Every failed send ends sent, retrying at a stored time, or failed with
//     its reason and a dead letter an operator can redrive; 403 also marks
//     the contact unreachable. A 429 reschedules the message at its
//     retry_after and pauses only its chat (or, when several chats are
//     throttled at once, the bot).
//   - One process at a time sends for a bot: Outbound delivers only while it
//     holds the bot's lease (telegram:sender:<bot id>), so any number of
//     outbound processes on one database keep to one bot's rate limits
//     together. The others stand by and take over when the holder stops
//     (at once) or dies (within DefaultSenderLeaseTTL), pausing the bot
//     until the holder's last sends have left the limits' windows.
package omni
