//go:build unix

package discover

import (
	"io/fs"
	"syscall"
)

// fileOwner returns a file's owner uid and gid.
func fileOwner(fi fs.FileInfo) (int, int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}
