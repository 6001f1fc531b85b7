//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cache

import (
	"context"
	"sync"
)

// crossProcessLock reports whether lockDir serializes processes, not only
// goroutines, on this platform.
const crossProcessLock = false

var (
	lockMu    sync.Mutex
	lockChans = map[string]chan struct{}{}
)

// lockDir serializes goroutines of this process only: this platform has no
// flock(2). Entries stay intact across processes (every write is an atomic
// rename); what is lost is precision: two processes evicting at once may
// remove more than needed, and concurrent stats flushes may drop counts.
func lockDir(ctx context.Context, path string) (func(), error) {
	lockMu.Lock()
	ch, ok := lockChans[path]
	if !ok {
		ch = make(chan struct{}, 1)
		lockChans[path] = ch
	}
	lockMu.Unlock()
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
