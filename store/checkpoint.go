package store

import (
	"database/sql"
	"log/slog"
	"sync"
	"time"
)

// checkpointInterval is the shortest time between two background
// checkpoints: after a commit, the checkpointer waits until this long has
// passed since its last one, so a busy writer gets a few a second, each
// copying what the commits since the last one changed.
const checkpointInterval = 200 * time.Millisecond

// checkpointer copies the WAL back into the database file on a connection
// of its own, beside the writer. SQLite's automatic checkpoint runs inside
// the commit that takes the WAL past 1,000 pages — on the writer, inside a
// group commit, where every caller of the batch and every request queued
// behind it waits while it copies those pages (4% of the webhook path's
// CPU, all of it on the one writer's path, and its slowest answers). The
// checkpointer's PASSIVE checkpoints copy the pages first, without waiting
// for the writer or the readers and without making them wait, so that the
// automatic checkpoint, when it comes, finds little left to copy. The
// automatic checkpoint stays: it runs between two of the writer's
// transactions, which is what lets the next one restart the WAL from its
// beginning, so the file stops growing even while commits never pause.
type checkpointer struct {
	db      *sql.DB
	log     *slog.Logger
	kick    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
	err     error
}

func newCheckpointer(db *sql.DB, log *slog.Logger) *checkpointer {
	c := &checkpointer{db: db, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{})}
	go c.run()
	return c
}

// committed tells the checkpointer that the WAL has grown. It never blocks.
func (c *checkpointer) committed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.stopped)
	var last time.Time
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		if wait := checkpointInterval - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-c.stop:
				t.Stop()
				return
			case <-t.C:
			}
		}
		last = time.Now()
		// A PASSIVE checkpoint copies what no reader still needs and never
		// waits; what it could not copy, the next one does.
		if _, err := c.db.Exec(`pragma wal_checkpoint(passive)`); err != nil {
			c.log.Warn("store: background WAL checkpoint failed; the next commit tries again", slog.Any("err", err))
		}
	}
}

// close stops the checkpointer and closes its connection; again, it
// returns what the first call returned, as DB.Close may be called twice.
func (c *checkpointer) close() error {
	c.once.Do(func() {
		close(c.stop)
		<-c.stopped
		c.err = c.db.Close()
	})
	return c.err
}
