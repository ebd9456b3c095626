package store

import "context"

// QueuedTx is how many transaction functions wait for the writer, for tests
// that line callers up in one batch.
func QueuedTx(db *DB) int { return len(db.batcher.pending) }

// ListenerPID and SenderPID are the backends of db's broadcast connections
// (0 while there is none), for tests that end them.
func ListenerPID(db *DB) uint32 { return db.notes.listenerPID.Load() }
func SenderPID(db *DB) uint32   { return db.notes.senderPID.Load() }

// SenderSetting is the setting name has on a connection like db's sending one.
func SenderSetting(db *DB, name string) (string, error) {
	ctx := context.Background()
	c, err := db.notes.connect(ctx, roleNotify)
	if err != nil {
		return "", err
	}
	defer closeConn(c)
	var v string
	err = c.QueryRow(ctx, "select current_setting($1)", name).Scan(&v)
	return v, err
}

// LeaseReleased is a channel closed at the next release of the lease name
// in db's process (leaseWakes).
func LeaseReleased(db *DB, name string) <-chan struct{} { return db.leases.wait(name) }
