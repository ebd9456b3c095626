package connlimit

// Reserve is how many file descriptors Fit keeps for everything but served
// connections: the database (a few files per pooled connection), outgoing
// calls (Telegram, the bot's calls to this process), the log.
const Reserve = 128

// Fit returns max, lowered when the process's open-file limit cannot hold
// max connections and Reserve besides, and that limit (0 when unknown).
func Fit(max int) (n int, limit uint64) {
	limit, ok := fileLimit()
	if !ok {
		return max, 0
	}
	return fit(max, limit), limit
}

// fit gives connections what the limit leaves after Reserve, and at least
// half of a small limit.
func fit(n int, limit uint64) int {
	if limit >= uint64(n)+Reserve {
		return n
	}
	room := max(int(limit)-Reserve, int(limit/2), 1)
	return min(room, n)
}
