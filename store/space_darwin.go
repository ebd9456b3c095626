package store

import "syscall"

// diskSpace is statfs(2) of the file system that holds dir: the bytes an
// unprivileged process may still write (f_bavail) and its size.
func diskSpace(dir string) (available, size int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}
