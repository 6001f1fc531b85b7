// Package parallel runs the pieces of one CPU kernel on several goroutines
// and turns a panic in any of them into an error of the call, so that no
// input handed to a kernel can end the process.
package parallel

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// PanicError is a panic raised by a kernel worker, recovered.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("kernel worker panicked: %v", e.Value) }

// Threads returns n when positive, else GOMAXPROCS.
func Threads(n int) int {
	if n > 0 {
		return n
	}
	return runtime.GOMAXPROCS(0)
}

// For splits [0, n) into at most threads contiguous chunks of at least
// grain items and calls fn on each, on the calling goroutine when there is
// one chunk and on new goroutines otherwise. It waits for every chunk and
// returns the first panic raised as a *PanicError.
func For(n, grain, threads int, fn func(lo, hi int)) error {
	if n <= 0 {
		return nil
	}
	if grain < 1 {
		grain = 1
	}
	t := min(Threads(threads), (n+grain-1)/grain)
	if t <= 1 {
		return Run(func() { fn(0, n) })
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	chunk := (n + t - 1) / t
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := Run(func() { fn(lo, hi) }); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// Run calls fn and returns a panic it raises as a *PanicError.
func Run(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	fn()
	return nil
}
