package llm

import (
	"os"
	"syscall"
	"unsafe"
)

// dropPages takes the whole pages of b, a view of a read-only file
// mapping, out of the process's resident memory: a loaded weight's file
// pages otherwise stay resident beside its copy until the file is
// unmapped (a 400 MB checkpoint loaded as bfloat16 peaked at the file plus
// the copy). The page cache keeps them; a later read faults them back.
func dropPages(b []byte) {
	if len(b) == 0 {
		return
	}
	page := uintptr(os.Getpagesize())
	start := uintptr(unsafe.Pointer(&b[0]))
	lo := (start + page - 1) &^ (page - 1)
	hi := (start + uintptr(len(b))) &^ (page - 1)
	if hi <= lo {
		return
	}
	_ = syscall.Madvise(b[lo-start:hi-start], syscall.MADV_DONTNEED)
}
