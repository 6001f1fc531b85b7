package parallel

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

// TestForCoversOnce: every index is visited exactly once, for any split.
func TestForCoversOnce(t *testing.T) {
	for _, c := range []struct{ n, grain, threads int }{{0, 1, 4}, {1, 1, 4}, {10, 3, 4}, {1000, 1, 3}, {7, 100, 8}} {
		seen := make([]atomic.Int32, c.n)
		if err := For(c.n, c.grain, c.threads, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				seen[i].Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
		for i := range seen {
			if seen[i].Load() != 1 {
				t.Fatalf("%+v: index %d visited %d times", c, i, seen[i].Load())
			}
		}
	}
}

// TestForRecoversWorkerPanic: a panic in a worker goroutine is the call's
// *PanicError, and the process goes on.
func TestForRecoversWorkerPanic(t *testing.T) {
	err := For(100, 1, 4, func(lo, hi int) {
		if lo > 0 {
			panic("injected in a worker")
		}
	})
	var pe *PanicError
	if !errors.As(err, &pe) || pe.Value != "injected in a worker" {
		t.Fatalf("got %v, want the worker's panic", err)
	}
	if err := Run(func() { var m map[int]int; m[1] = 1 }); !errors.As(err, &pe) {
		t.Fatalf("Run: got %v", err)
	}
}

// TestConcurrentFor: calls from many goroutines at once (the pool's
// workers busy with others' pieces) each cover their range exactly once.
func TestConcurrentFor(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				n := 50 + g
				seen := make([]atomic.Int32, n)
				if err := For(n, 1, 4, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
					}
				}); err != nil {
					t.Error(err)
					return
				}
				for i := range seen {
					if seen[i].Load() != 1 {
						t.Errorf("index %d visited %d times", i, seen[i].Load())
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// sink keeps TestForAllocatesNothing's work observable.
var sink atomic.Int64

// TestForAllocatesNothing: a call's pieces and counters are pooled, so a
// For over workers allocates nothing of its own (fn here captures nothing;
// a closure that captures is the caller's allocation).
func TestForAllocatesNothing(t *testing.T) {
	fn := func(lo, hi int) { sink.Add(int64(hi - lo)) }
	// AllocsPerRun runs with GOMAXPROCS 1: start the workers before.
	if err := For(64, 1, 4, fn); err != nil {
		t.Fatal(err)
	}
	if len(workers) == 0 {
		t.Skip("one CPU: no workers to hand pieces to")
	}
	allocs := testing.AllocsPerRun(200, func() {
		if err := For(64, 1, 4, fn); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("For allocates %.1f objects per call, want 0", allocs)
	}
}
