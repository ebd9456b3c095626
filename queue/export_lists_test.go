package queue

import "switchyard/store"

// ListDeadQueryForTest is the SQL of a dead-letter window, for a test of
// its query plan.
func ListDeadQueryForTest(db *store.DB, desc bool) string {
	if desc {
		return deadQuery(db, listDeadDescQuery)
	}
	return deadQuery(db, listDeadAscQuery)
}

// ListDeadArgsForTest are the arguments of ListDeadQueryForTest for f.
func ListDeadArgsForTest(f DeadFilter) []any {
	b, err := boundsOf(f.Before, f.After, f.NewestFirst)
	if err != nil {
		panic(err)
	}
	return append(deadArgs(f), b.at, b.id, f.Limit)
}
