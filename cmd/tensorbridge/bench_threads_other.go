//go:build !linux

package main

import (
	"fmt"
	"runtime"
)

func availableCPUs() int { return runtime.NumCPU() }

// limitThreads sets GOMAXPROCS only: outside Linux the process's CPU
// affinity is left alone, so XLA's CPU runtime may still use every core.
func limitThreads(n int) (string, error) {
	if n > runtime.NumCPU() {
		return "", fmt.Errorf("--threads %d: this machine has %d CPUs", n, runtime.NumCPU())
	}
	runtime.GOMAXPROCS(n)
	return fmt.Sprintf("%d threads: GOMAXPROCS=%d (CPU affinity not set on this OS; XLA may use more threads)", n, n), nil
}
