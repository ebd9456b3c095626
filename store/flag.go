package store

// Flag is b as the 0 or 1 of an integer flag column (`integer not null check
// (x in (0, 1))`): the one spelling of a boolean every table uses, which
// SQLite and PostgreSQL both take, where a Go bool as an argument is only
// SQLite's.
func Flag(b bool) int {
	if b {
		return 1
	}
	return 0
}
