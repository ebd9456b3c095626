// Package fakebot is a fake Telegram Bot API server for the tests and the
// offline sandbox. A Server is an http.Handler: start it with
// httptest.NewServer, or mount it inside the app under Opts.BasePath, and
// point telego at it with telego.WithAPIServer (or telegram.NewBot's apiURL).
//
// It serves /bot<TOKEN>/<method> for any number of tokens; each token is its
// own bot whose id is the number before the token's colon. By default it
// accepts the computable Token(id) of every id, as tests want; a fake others
// can reach (the app's sandbox) lists its random tokens in Opts.Tokens,
// restricts setWebhook with Opts.CheckWebhookFunc and refuses browsers'
// cross-origin requests with Opts.RefuseCrossOrigin. Answers have the real Bot API shapes,
// {"ok":true,"result":…} and {"ok":false,"error_code":…,"description":…,
// "parameters":{"retry_after":N}}, with the HTTP status equal to error_code.
// Parameters are read from JSON, urlencoded and multipart bodies and the
// query string, as Telegram does. Methods lists what is implemented; any
// other method answers Telegram's 404 "Not Found". getMe alone returns the
// getMe-only User fields, all of them; the bot's User elsewhere has the
// common fields only.
//
// Guarantees:
//
//   - Every call is recorded (Calls, CallsTo) and WaitUntil/WaitCalls wait
//     for state changes with the caller's deadline, never by polling.
//   - Updates carry increasing update_ids per bot and are delivered in order,
//     either to getUpdates (long polling without busy loops, at most a
//     minute per call, past the server's write timeout; an update stays
//     until an offset confirms it) or, while a webhook is set, posted one at
//     a time with X-Telegram-Bot-Api-Secret-Token, retried with backoff until
//     the webhook answers 2xx.
//   - A request is validated before anything else counts it: a wrong send
//     gets its 400 or 403, and only a valid one spends the rate limits
//     (Opts.Limits, TelegramLimits), whose 429 carries retry_after.
//   - parse_mode HTML, MarkdownV2 and Markdown make the text and entities
//     Telegram makes (offsets in UTF-16 code units), or Telegram's 400
//     "can't parse entities" for markup it refuses.
//   - Injected faults (AddFault) answer exactly as Telegram does: 403, 429
//     with retry_after, 500, slow answers, dropped connections.
//   - The read model (Bots, Bot.View, Bot.Chats) returns copies and is safe
//     to read while bots and users act.
package fakebot
