package store

// QueuedTx is how many transaction functions wait for the writer, for tests
// that line callers up in one batch.
func QueuedTx(db *DB) int { return len(db.batcher.pending) }

// ListenerPID and SenderPID are the backends of db's broadcast connections
// (0 while there is none), for tests that end them.
func ListenerPID(db *DB) uint32 { return db.notes.listenerPID.Load() }
func SenderPID(db *DB) uint32   { return db.notes.senderPID.Load() }
