//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// crossProcessLock reports whether lockDir serializes processes, not only
// goroutines, on this platform.
const crossProcessLock = true

// lockDir takes an exclusive flock(2) on path, creating it if needed, and
// returns the function that releases it. flock conflicts between separate
// open files even within one process, so goroutines are serialized too. It
// polls with a growing pause (at most 50 ms) until the lock is free or ctx
// ends. The lock dies with the process, so a crash never leaves it held.
func lockDir(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	pause := time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
		if pause < 50*time.Millisecond {
			pause *= 2
		}
	}
}
