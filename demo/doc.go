// Package demo makes Switchyard explain itself: it seeds a sandbox database so
// the console is never empty, and it simulates live traffic on all three
// flows against a running instance, then checks the instance kept its
// promises.
//
// The simulator is an outsider. It reaches the instance only through the
// paths real traffic uses — the admin API standing in for the web cabinet
// and the operators, the topic publish endpoint standing in for the identity
// service, the /bot/* contract where the cabinet would call it — and it acts
// as Telegram users through the in-process sandbox Bot API
// (telegram/fakebot): people starting the onboarding bot with a leader's
// code and pressing its buttons, business customers writing to the operator
// inbox, a customer blocking the bot. It never reads or writes a table.
//
// The three flows:
//
//   - bot outbox: a user arrives through a leader's link, asks to sign up,
//     gets an account in the cabinet, links Telegram with a connect link,
//     connects a wallet and confirms the binding in the bot, registers
//     (sometimes under another leader) and activates an NFT. The leader gets
//     a "new partner" DM, or a web notification when they blocked the bot or
//     have no Telegram.
//   - referral: identity events for investors arriving through referral
//     links, with duplicates (the same messageId again), versions out of
//     order, refusals (wrong type, blocked, unknown or malformed slug, no
//     link) and link owners whose own event arrives after their referrals'.
//   - chat: Telegram Business customers write to the inbox; an operator
//     watches it and replies; now and then a customer writes to the bot
//     directly and blocks it, so the reply fails with Telegram's reason.
//
// Guarantees:
//
//   - Run and Controller.Stop stop cleanly: arrivals end first, journeys in
//     flight finish as long as they move (they are cancelled when none has
//     moved for Opts.Drain), then the invariants are checked until they
//     hold or stop improving for Opts.Drain. The deadlines count time
//     without progress, so a loaded machine makes a run slower, not failed.
//   - The summary's invariants are checked from the outside, through the
//     admin API and what the sandbox's users see in their chats: every
//     outbox event processed or dead-lettered; each new partner announced
//     exactly once (DM or web notification), no DM sent twice; every valid
//     referral bonded once and no refused one bonded; every inbound message
//     stored once; every reply delivered once or failed with a reason.
//   - A run passes (Summary.OK) only when every invariant was checked on
//     something and held, no flow failed more than half of its journeys,
//     and nothing stalled; an invariant that checked nothing is "not
//     checked", never "holds". Summary.Problems says why a run failed.
//   - Seed only adds data where that part of the console is empty (and
//     re-creates the sandbox's in-memory side — leaders' chats, the business
//     connection — in each process), so it is safe on every start.
//   - Logs carry ids only: never a name or a phone number.
package demo
