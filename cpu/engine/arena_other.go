//go:build !unix

package engine

// mapMemory allocates n bytes on the Go heap where memory mapping is not
// available: the arena still shares memory across shapes, but the
// collector counts it.
func mapMemory(n int) ([]byte, error) { return make([]byte, n), nil }

// unmapMemory leaves b to the collector.
func unmapMemory([]byte) error { return nil }
