//go:build !linux

package llm

// dropPages does nothing here: without Linux's madvise the mapped pages
// stay resident until the file is unmapped (or the file was read into
// memory whole).
func dropPages([]byte) {}
