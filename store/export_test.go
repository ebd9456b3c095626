package store

// QueuedTx is how many transaction functions wait for the writer, for tests
// that line callers up in one batch.
func QueuedTx(db *DB) int { return len(db.batcher.pending) }
