//go:build unix

package engine

import "syscall"

// mapMemory maps n bytes of zeroed, private memory outside the Go heap.
// Pages become resident only when first written, so a chunk larger than
// what runs use costs address space, not memory; MAP_NORESERVE keeps the
// kernel's overcommit heuristic from counting the untouched rest.
func mapMemory(n int) ([]byte, error) {
	return syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE|syscall.MAP_NORESERVE)
}

// unmapMemory returns memory from mapMemory to the system.
func unmapMemory(b []byte) error { return syscall.Munmap(b) }
