// Package parallel runs the pieces of one CPU kernel on several threads
// and turns a panic in any of them into an error of the call, so that no
// input handed to a kernel can end the process.
//
// The pieces run on a pool of worker goroutines, one per extra CPU of
// GOMAXPROCS (at the first call), which spin for a short while after each
// piece before they park: waking a parked goroutine costs tens of
// microseconds on some virtual machines, more than a whole small kernel,
// so consecutive kernels of one run find their workers awake (ONNX
// Runtime's and XLA's CPU thread pools spin for the same reason). A call
// that finds every worker busy (another run's kernel) runs its pieces
// itself.
package parallel

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
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

// spinFor is how long an idle worker polls for its next piece before it
// parks.
const spinFor = 200 * time.Microsecond

// piece is one chunk of a For call given to a worker.
type piece struct {
	fn      func(lo, hi int)
	lo, hi  int
	pending *atomic.Int32
	err     *atomic.Pointer[PanicError]
}

type worker struct {
	next atomic.Pointer[piece]
	idle atomic.Bool // parked, waiting on wake
	wake chan struct{}
}

var (
	poolOnce sync.Once
	workers  []*worker
)

func startPool() {
	n := runtime.GOMAXPROCS(0) - 1
	for range max(n, 0) {
		w := &worker{wake: make(chan struct{}, 1)}
		workers = append(workers, w)
		go w.loop()
	}
}

// loop runs pieces as they come, spinning between them, then parking.
func (w *worker) loop() {
	for {
		deadline := time.Now().Add(spinFor)
		for spins := 0; ; spins++ {
			if p := w.next.Swap(nil); p != nil {
				p.run()
				deadline = time.Now().Add(spinFor)
				continue
			}
			if spins%64 == 63 {
				if time.Now().After(deadline) {
					break
				}
				runtime.Gosched() // let a runnable goroutine have this thread
			}
		}
		w.idle.Store(true)
		if p := w.next.Swap(nil); p != nil { // posted before idle was seen
			w.idle.Store(false)
			p.run()
			continue
		}
		<-w.wake
		w.idle.Store(false)
	}
}

// run runs the piece, recording a panic, and signals its end.
func (p *piece) run() {
	if err := Run(func() { p.fn(p.lo, p.hi) }); err != nil {
		p.err.CompareAndSwap(nil, err.(*PanicError))
	}
	p.pending.Add(-1)
}

// give hands p to an idle or spinning worker, false when all are busy.
func give(p *piece) bool {
	for _, w := range workers {
		if w.next.CompareAndSwap(nil, p) {
			if w.idle.Load() {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
			return true
		}
	}
	return false
}

// call is the shared state of one For call, pooled so that a call
// allocates nothing: its pieces and the count and first panic they report.
type call struct {
	pending atomic.Int32
	perr    atomic.Pointer[PanicError]
	pieces  []piece // given to workers
	mine    []piece // run here, the workers being busy
}

var calls = sync.Pool{New: func() any { return &call{pieces: make([]piece, len(workers)), mine: make([]piece, 0, len(workers))} }}

// For splits [0, n) into at most threads contiguous chunks of at least
// grain items and calls fn on each: the first on the calling goroutine,
// the others on the pool's workers (or here, when they are busy). It waits
// for every chunk and returns the first panic raised as a *PanicError.
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
	poolOnce.Do(startPool)
	t = min(t, len(workers)+1)
	chunk := (n + t - 1) / t
	c := calls.Get().(*call)
	defer func() {
		c.perr.Store(nil)
		clear(c.pieces)
		clear(c.mine)
		c.mine = c.mine[:0]
		calls.Put(c)
	}()
	i := 0
	for lo := chunk; lo < n; lo += chunk {
		p := &c.pieces[i]
		i++
		*p = piece{fn: fn, lo: lo, hi: min(lo+chunk, n), pending: &c.pending, err: &c.perr}
		c.pending.Add(1)
		if !give(p) {
			c.pending.Add(-1)
			c.mine = append(c.mine, *p)
		}
	}
	first := Run(func() { fn(0, min(chunk, n)) })
	for _, p := range c.mine {
		if err := Run(func() { p.fn(p.lo, p.hi) }); err != nil && first == nil {
			first = err
		}
	}
	for spins := 0; c.pending.Load() > 0; spins++ {
		if spins%32 == 31 {
			runtime.Gosched()
		}
	}
	if first != nil {
		return first
	}
	if e := c.perr.Load(); e != nil {
		return e
	}
	return nil
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
