// Package queue is Switchyard's replacement for Redis/BullMQ and Kafka:
// durable queues and keyed topics in the same database as everything else
// (the SQLite file, or PostgreSQL), built on goqite (maragu.dev/goqite, whose
// table it owns and writes with its own SQL so that sends, receives and
// acknowledgements join the store's transactions).
//
// Queues (New, Queue.Send, Queue.Start) promise:
//
//   - A send is durable when Send returns, or when the caller's transaction
//     commits (SendTx). An idempotency key makes a second send a no-op that
//     reports a duplicate; the key is written in the same transaction.
//   - At-least-once delivery: a message stays until its handler succeeds.
//     While the handler runs its timeout is extended; if the process dies the
//     message is delivered again after the timeout. AckTx acknowledges inside
//     the handler's own transaction for exactly-once local effects.
//   - Failures follow the queue's RetryPolicy: exponential backoff with
//     jitter, exactly the delay of RetryAfter, or the dead-letter queue for
//     Permanent errors and exhausted attempts. Every failure is recorded;
//     dead letters keep the last error, the attempts and the times, and can
//     be redriven (same id, attempts reset) or purged.
//   - Messages with the same OrderKey are handled one at a time, in send
//     order; a retrying message holds back only its own key.
//
// Topics (NewTopic, Topic.Publish, Topic.Subscribe) promise:
//
//   - Records are appended to one of N partitions by a stable hash of their
//     key, get a dense per-partition offset, and stay in the log for the
//     topic's retention (and as long as some group still needs them).
//   - Each consumer group keeps its own committed offset per partition; a new
//     group can start from the earliest retained record (replay) or the end.
//   - Records with the same key are handled in offset order, always. A record
//     that fails holds back the later records of its key only; other keys,
//     even in the same partition, keep flowing.
//   - The handler gets the transaction that commits the offset: its writes
//     and the commit happen together (exactly-once for local effects).
//   - A consumer whose effects leave the database subscribes with Process
//     instead of Handler: Process runs outside any transaction, so however
//     long it waits it holds up no other writer, and its outcome (finished,
//     retry, dead letter) is committed after it returns, in a short
//     transaction of its own. That is at-least-once, as for queue workers:
//     a record whose outcome was not committed (a crash, a hard stop, a
//     lease lost meanwhile) is processed again, so Process must be
//     idempotent. Order per key and what a retry holds back are the same.
//   - Groups have a lifecycle: CreateGroup makes one without subscribing
//     (Subscribe creates its group too), Groups lists them, and DeleteGroup
//     removes a group nobody subscribes to with all it keeps, so retention
//     stops keeping records for it.
//   - A group's partitions are balanced among its live subscribers in every
//     process on the database (6 partitions over 3 instances, 2 each); a
//     stopping subscriber hands its partitions over at once, a dead one's
//     are taken when its leases expire, and a subscriber whose lease ran out
//     commits nothing (members.go).
//
// Sends and publishes in this process wake its workers as soon as their
// transaction commits (never before: the workers' receives run in
// transactions of their own). On PostgreSQL the wake-up also reaches the
// workers and subscribers of the other processes on the database, by a
// LISTEN/NOTIFY broadcast sent after the commit and gathered over a few
// milliseconds (notify.go; store.DB.Broadcast). Polling (every 500 ms by
// default) stays the fallback for a wake-up that was lost, and is how the
// other processes on one SQLite file find work; it is also the only polling
// an idle process does.
//
// The promises hold on both backends with one SQL text. SQLite runs one
// write transaction at a time; PostgreSQL runs them side by side, so there a
// receive skips the rows another receive has locked (FOR UPDATE SKIP LOCKED),
// a transaction that reads and writes an order key's slots holds the key's
// advisory lock (lock.go), a transaction of a partition's records locks
// the group's offset row first and its lease row last, and a transaction's
// publishes are written just before its commit, taking their partitions'
// rows in one sorted order (so that publishers to several partitions never
// deadlock).
//
// Traces (package telemetry): a message carries a W3C traceparent — the one
// Send is given in Message.Traceparent, else the sending context's span — and
// keeps it through retries, its dead letter and a redrive. The worker, not
// the handler, starts the consumer span of each delivery, "queue.handle
// <queue>" (kind consumer; the queue, the message id, the attempt, and the
// outcome the handler's result asks for: done, retry or dead), as a child of
// the message's traceparent, and ends it with the handler's result, marked
// failed when there is an error — one span per message for a BatchHandler
// too. Every attempt of a message is therefore a sibling in the trace of the
// work that sent it. The handler's context carries the span; in the Message
// a handler gets, Traceparent is the span's, so a batch handler continues
// each message's trace with telemetry.Resume(ctx, m.Traceparent), and what a
// handler sends joins the trace. SavepointTx is a "store.savepoint" span in
// its context's trace. With no tracer installed none of this allocates.
//
// Admin is the operator's side: Stats for the console, the JSON admin API
// (AdminRoutes: queues, topics, groups, dead letters), redrive and purge,
// pause and resume of a queue or a consumer group in every process on the
// database (pause.go), and the janitor that applies retention.
// docs/queue.md describes the mechanisms in full.
package queue
