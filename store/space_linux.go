package store

import "syscall"

// diskSpace is statfs(2) of the file system that holds dir: the bytes an
// unprivileged process may still write (f_bavail, without the blocks
// reserved for root) and its size, both in fragments (f_frsize), as df
// counts them.
func diskSpace(dir string) (available, size int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	return int64(st.Bavail) * unit, int64(st.Blocks) * unit, nil
}
