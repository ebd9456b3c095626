// Package onboarding is the bot half of the bot outbox contract
// (specs/bot-outbox-contract.ru.txt): the onboarding Telegram bot, which
// consumes the backend's outbox over the /bot/* HTTP API (BackendClient),
// keeps the onboarding funnel, talks to users in Telegram, and DMs them. It
// shares only bot/contract with the backend and never imports it.
//
// Guarantees:
//
//   - Each event takes effect once. Its mark in the dedup ledger
//     bot_processed_events and its handler's writes (the funnel, the DMs it
//     causes) commit in one transaction, so a crash leaves both or neither; an
//     event found in the ledger is acked without its handler. The spec's gap —
//     a crash between the mark and the handler losing the side effect — is
//     closed.
//   - Every Telegram call is a message of the queue DMQueue ("onboarding.dm"),
//     sent with queue.SendTx in the transaction of its cause and keyed by it
//     ("event:<id>:…", "update:<bot>:<id>:…"), so a call exists if and only if
//     its cause's effects committed, and a cause yields its calls once. One
//     chat's calls go out one at a time, in order (the order key "chat:<id>").
//     A failed call is retried by the queue: a 429 after its retry_after, 5xx
//     and network errors with the queue's backoff; a permanent failure is a
//     dead letter an operator redrives from the Queues page. A 403 (or a user
//     known unreachable) marks the user in bot_unreachable and, for a DM with
//     a fallback, hands it to its web notification (POST /bot/notification),
//     queued as a message of its own keyed by the DM. A delivered call is
//     recorded in bot_deliveries and acknowledged in one transaction. The one
//     duplicate left is a process dying after Telegram accepted a call and
//     before that commit: the message comes back after its timeout and the
//     call is made again — at least once there, never lost. One process at a
//     time sends for the bot (the lease telegram:sender:<bot id>), so
//     processes on one database keep to the bot's rate limits together.
//   - Per-user order: a user's events are handled in id order. A handler error
//     rolls back that event alone, asks the backend to retry it and stops the
//     user's group while other users go on; the backend holds the user's later
//     events until the retried one is handled, closed or dead-lettered. A
//     serialization failure or deadlock (PostgreSQL) is no handler error: the
//     whole batch runs again.
//   - A funnel's stage only grows, also when the consumer and the updates
//     worker change it at once (on PostgreSQL their transactions run side by
//     side): each reads the row locked and applies its change to what the
//     other committed.
//   - One consumer at a time across processes (the lease onboarding:outbox,
//     renewed in the background while a page is in hand), and a stopped
//     consumer finishes and acks the page it holds; a page whose ack was
//     lost comes back and is acked from the ledger. Likewise one updates
//     worker (onboarding:updates) and one daily prune (onboarding:prune).
//     A standby takes a lease over within a second of its release, or
//     within LeaseTTL of its holder's death.
//   - A Telegram update is stored before it is confirmed: long polling advances
//     the durable offset in the transaction that stores the updates, and the
//     webhook answers 200 only after the store. Each stored update is handled
//     once, in order per chat.
//
// Traces: each event's handling, bot.event.handle, starts a trace of its
// own linked to the backend's emit (the event's traceparent); each stored
// update's, bot.update.handle, continues the webhook request that stored it;
// and every DM carries the traceparent of the handling that recorded it, so
// each attempt at it, bot.dm.send, and its Bot API call join that trace. The
// backend calls send a traceparent header (BackendClient).
//
// The tables it owns — bot_processed_events, bot_funnel, bot_funnel_history,
// bot_updates, bot_update_offsets, bot_unreachable and bot_deliveries
// (migrations 00005, 00011) — are read and written here only; the console
// asks through Bot's methods and Stats.
package onboarding
