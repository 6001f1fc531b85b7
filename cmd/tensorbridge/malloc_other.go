//go:build !linux

package main

// reexecWithMallocTunables does nothing outside Linux: the tunables are
// glibc's.
func reexecWithMallocTunables() {}
