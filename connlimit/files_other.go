//go:build !unix

package connlimit

// fileLimit is unknown here: Fit leaves the cap as it is.
func fileLimit() (uint64, bool) { return 0, false }
