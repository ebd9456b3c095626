package queue

import (
	"fmt"
	"hash/fnv"
	"slices"
)

// Order keys on PostgreSQL. A message's order slot is written by reading the
// key's other slots first: a send parks the new message when the key has one
// queued, an acknowledgement or a dead letter removes its slot and unparks
// the key's next one, a redrive puts a slot back. On SQLite these
// read-then-writes never overlap (one writer). On PostgreSQL, whose
// transactions run side by side under READ COMMITTED, two first sends of a key
// would both see it empty and both be visible, and a send that sees the head
// its acknowledgement is deleting parks behind it while the acknowledgement,
// not seeing the new slot, unparks nothing: the message is held for good.
//
// So on PostgreSQL every transaction that reads and writes a key's slots
// first takes the key's transaction-scoped advisory lock, one key after
// another in the order of their lock ids (the same order in every
// transaction, so that two of them never wait for each other in a circle),
// after a shared lock of the queue that Purge, which removes every slot of
// the queue at once, takes exclusively. The locks are held until the
// transaction ends, and each statement after them reads a snapshot taken once
// the previous holder committed. SQLite runs none of this.

const (
	lockKeyQuery     = `select pg_advisory_xact_lock(cast(? as bigint))`
	lockSharedQuery  = `select pg_advisory_xact_lock_shared(cast(? as bigint))`
	orderLockSpace   = "switchyard.queue.order\x00"
	queueLockSpace   = "switchyard.queue\x00"
	lockKeySeparator = "\x00"
)

// lockOrderKeys takes, on PostgreSQL, the locks of queue's order keys (empty
// keys and repeats are ignored) for the rest of w's transaction.
func lockOrderKeys(w writer, queue string, keys ...string) error {
	if !w.pg {
		return nil
	}
	ids := make([]int64, 0, len(keys))
	for _, k := range keys {
		if k != "" {
			ids = append(ids, lockID(orderLockSpace+queue+lockKeySeparator+k))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if _, err := w.exec(lockSharedQuery, lockID(queueLockSpace+queue)); err != nil {
		return fmt.Errorf("queue %s: lock the queue: %w", queue, err)
	}
	for _, id := range ids {
		if _, err := w.exec(lockKeyQuery, id); err != nil {
			return fmt.Errorf("queue %s: lock an order key: %w", queue, err)
		}
	}
	return nil
}

// lockQueue takes, on PostgreSQL, queue's lock exclusively for the rest of
// w's transaction: no transaction holds any of its order keys meanwhile.
func lockQueue(w writer, queue string) error {
	if !w.pg {
		return nil
	}
	if _, err := w.exec(lockKeyQuery, lockID(queueLockSpace+queue)); err != nil {
		return fmt.Errorf("queue %s: lock the queue: %w", queue, err)
	}
	return nil
}

// A consumer group's partition has one owner while its lease holds, but an
// owner whose lease ran out may still be committing a transaction of records
// when the next owner commits one of its own. Each checks what the other did
// (the committed offset, the finished records above it, the retry rows)
// before it writes, and on SQLite the two never overlap. On PostgreSQL they
// do: one that read the offset before the other committed finished a record
// the other had finished too, and the record took effect twice. So there a
// transaction of a partition's records first locks the group's offset row of
// the partition, which SeekGroup's update locks too.
const lockGroupPartitionQuery = committedQuery + ` for update`

// lockGroupPartition takes, on PostgreSQL, the row lock of the group's
// offset of partition for the rest of w's transaction.
func lockGroupPartition(w writer, topic, group string, partition int) error {
	if !w.pg {
		return nil
	}
	var committed int64
	if err := w.queryRow(lockGroupPartitionQuery, topic, group, partition).Scan(&committed); err != nil {
		return fmt.Errorf("queue: lock %s/%s partition %d: %w", topic, group, partition, err)
	}
	return nil
}

// lockID is the advisory lock id of name: 64 bits of FNV-1a. Two names that
// collide only share a lock, which costs some waiting, never correctness.
func lockID(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}
