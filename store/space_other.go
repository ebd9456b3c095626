//go:build !linux && !darwin

package store

import "errors"

// diskSpace is not asked on this platform: Space reports the file system
// as 0 bytes.
func diskSpace(string) (available, size int64, err error) {
	return 0, 0, errors.ErrUnsupported
}
