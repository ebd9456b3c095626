package queue

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"switchyard/store"
)

// stmtCache holds the package's statements prepared on a database's writer
// connection, so the hot paths (send, receive, acknowledge, commit an
// offset) do not parse SQL again for every message.
type stmtCache struct {
	mu       sync.Mutex
	prepared map[string]*sql.Stmt
	tried    bool
	reads    map[string]*sql.Stmt // on the read pool, prepared on first use
}

// read returns query prepared on the read pool (which never waits for the
// writer, so it may be prepared at any time), or nil when that fails.
func (c *stmtCache) read(ctx context.Context, db *store.DB, query string) *sql.Stmt {
	c.mu.Lock()
	st, ok := c.reads[query]
	c.mu.Unlock()
	if ok {
		return st
	}
	st, err := db.Read.PrepareContext(ctx, query)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.reads[query]; ok {
		_ = st.Close()
		return old
	}
	if c.reads == nil {
		c.reads = map[string]*sql.Stmt{}
	}
	c.reads[query] = st
	return st
}

// readQuery runs a read-only query on the read pool, prepared.
func readQuery(ctx context.Context, db *store.DB, query string, args ...any) (*sql.Rows, error) {
	if st := hubFor(db).stmts.read(ctx, db, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return db.Read.QueryContext(ctx, query, args...)
}

// readRow is readQuery for one row.
func readRow(ctx context.Context, db *store.DB, query string, args ...any) *sql.Row {
	if st := hubFor(db).stmts.read(ctx, db, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return db.Read.QueryRowContext(ctx, query, args...)
}

// close closes every statement of the cache; later calls find none and run
// their queries unprepared.
func (c *stmtCache) close() error {
	c.mu.Lock()
	prepared, reads := c.prepared, c.reads
	c.prepared, c.reads = nil, nil
	c.mu.Unlock()
	var errs []error
	for _, st := range prepared {
		errs = append(errs, st.Close())
	}
	for _, st := range reads {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.prepared[query]
}

// prepare prepares every hot statement once per database. It takes the
// writer connection, so it must not run inside a transaction: Start,
// Subscribe and NewTopic call it before they begin any. Statements that fail
// to prepare are simply run unprepared.
func (c *stmtCache) prepare(ctx context.Context, db *store.DB) {
	c.mu.Lock()
	if c.tried {
		c.mu.Unlock()
		return
	}
	c.tried = true
	c.mu.Unlock()
	// Without the lock: preparing waits for the writer connection, and a
	// transaction running on it reads the cache.
	queries := hotQueries(db)
	prepared := make(map[string]*sql.Stmt, len(queries))
	for _, q := range queries {
		if st, err := db.Write.PrepareContext(ctx, q); err == nil {
			prepared[q] = st
		}
	}
	c.mu.Lock()
	c.prepared = prepared
	c.mu.Unlock()
}

// hotQueries are the statements run per message or per record, in db's
// dialect: where a statement differs between SQLite and PostgreSQL, the
// cache holds the text the writer then runs on db.
func hotQueries(db *store.DB) []string {
	queries := []string{
		insertKeyQuery, selectKeyQuery, orderQueuedQuery, insertOrderQuery, insertParkedOrderQuery, insertMessageQuery,
		deleteDeliveredQuery, deleteRetryQuery, deleteOrderQuery, unparkQuery, releaseQuery,
		takeDeliveredQuery, orderSlotQuery, firstFailedQuery, insertDeadQuery, insertFailureQuery,
		retryMessageQuery, upsertRetryQuery, orderKeyQuery, insertDoneIfKnownQuery,
		takeOffsetsQuery,
		savepointQuery, releaseSavepointQuery, rollbackSavepointQuery,
		deleteRecordRetryQuery, advanceQuery, insertDoneQuery, insertRecordRetryQuery, updateRecordRetryQuery,
		firstFailedRecordQuery, committedQuery, doneAboveQuery, setCommittedQuery, deleteDoneBelowQuery,
		pausedQuery,
	}
	queries = append(queries, appendQueries...)
	if db.Postgres() {
		queries = append(queries, receiveQueries[1]...)
	} else {
		queries = append(queries, receiveQueries[0]...)
	}
	if db.Postgres() {
		queries = append(queries, lockKeyQuery, lockSharedQuery, lockGroupPartitionQuery)
	}
	return queries
}

// writer runs the package's statements inside a write transaction, prepared
// when the cache has them.
type writer struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts *stmtCache
	pg    bool // the database is PostgreSQL, whose transactions run concurrently
}

func newWriter(ctx context.Context, tx *sql.Tx, db *store.DB) writer {
	return writer{ctx: ctx, tx: tx, stmts: &hubFor(db).stmts, pg: db.Postgres()}
}

func (w writer) exec(query string, args ...any) (sql.Result, error) {
	if st := w.stmts.get(query); st != nil {
		return w.tx.StmtContext(w.ctx, st).ExecContext(w.ctx, args...)
	}
	return w.tx.ExecContext(w.ctx, query, args...)
}

func (w writer) queryRow(query string, args ...any) *sql.Row {
	if st := w.stmts.get(query); st != nil {
		return w.tx.StmtContext(w.ctx, st).QueryRowContext(w.ctx, args...)
	}
	return w.tx.QueryRowContext(w.ctx, query, args...)
}

func (w writer) query(query string, args ...any) (*sql.Rows, error) {
	if st := w.stmts.get(query); st != nil {
		return w.tx.StmtContext(w.ctx, st).QueryContext(w.ctx, args...)
	}
	return w.tx.QueryContext(w.ctx, query, args...)
}

func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
