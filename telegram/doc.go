// Package telegram is the Telegram code bot/ and omni/ share: a telego client
// set up for production, the classes a failed Bot API call falls into, and
// Telegram's rate limits as token buckets. Its subpackage fakebot is the fake
// Bot API the tests and the offline sandbox run against.
//
// Guarantees:
//
//   - NewBot never logs or returns the bot token: telego's logger is silenced
//     or masked, and errors have the token replaced by "<token>".
//   - Every call carries a deadline (DefaultRequestTimeout, getUpdates
//     MaxLongPoll more), so a hung connection cannot stall a worker.
//   - Classify maps every error to exactly one Class: 429 with retry_after is
//     ClassRetryAfter, 403 and other 4xx are ClassPermanent, everything else
//     (5xx, network, timeouts, unknown) is ClassRetryable.
//   - Every 429 the Bot API answers a bot built by NewBot is counted, by the
//     bot's id, in switchyard_telegram_too_many_requests_total, which exists
//     at 0 from NewBot on: the limiter keeps sends under the limits, so the
//     alert on it expects none.
//   - Limiter never sleeps: it tells the caller when a send may happen, takes
//     tokens only for sends it allows, and pauses one chat or one bot for a
//     429's retry_after without touching the others.
package telegram
