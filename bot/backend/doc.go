// Package backend is the backend half of the bot outbox contract
// (specs/bot-outbox-contract.ru.txt): the transactional outbox
// bot_event_outbox with the /bot/* service API, and the minimal backend
// domain behind it (users, web notifications, connect tokens) whose actions
// emit. The onboarding bot (bot/onboarding) reaches it only over HTTP; what
// the two share is in bot/contract.
//
// Guarantees:
//
//   - An event exists if and only if its business change committed: the
//     backend actions emit inside their own transaction (the *Tx emitters).
//   - GET /bot/events/pending returns unprocessed, due events grouped by user
//     (uid first, else Telegram id) and by id within a user, so a consumer that
//     stops a user at its first failure keeps that user's order.
//   - Nothing is lost: a retried event comes back after 60 s · 2^attempts; after
//     BOT_OUTBOX_MAX_ATTEMPTS a registered event is dead-lettered (kept,
//     logged with [bot-outbox][DEAD-LETTER], listed and redrivable in the admin
//     API); any other type is closed so it stops blocking its user.
//   - Ack is idempotent: processing an acked event again changes nothing, and
//     a retry counts only for an event that was due.
//   - Every /bot/* route checks the shared secret in constant time.
//   - The same on PostgreSQL, where write transactions run side by side: a
//     transaction that decides from a row reads it locked ("for no key
//     update") or writes only if the row is still as it read it, so an
//     action, a redemption or an ack done twice at once takes effect once;
//     and one user's events commit in id order (an advisory lock on the
//     user's key in EmitTx), so the pending order never hands out a later
//     event before an earlier one commits.
//
// Traces: an emit is a producer span, bot.outbox.emit, in the trace of the
// action that emits; the row keeps its traceparent, and the pending answer
// hands it to the consumer as the event's optional traceparent field.
//
// The tables it owns — bot_event_outbox, users, web_notifications and
// telegram_connect_tokens (migrations 00004, 00012) — are read and written
// here only; the console asks the Outbox (ListEvents, CountUnfinished,
// CountHandled).
package backend
