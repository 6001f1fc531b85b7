package cache

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
)

// value is a test value that records its release.
type value struct {
	name     string
	released atomic.Int32
}

func newMem(t *testing.T, opts MemoryOptions[*value]) (*Memory[*value], *[]string) {
	t.Helper()
	var mu sync.Mutex
	var released []string
	user := opts.Release
	opts.Release = func(k string, v *value) {
		if v.released.Add(1) != 1 {
			t.Errorf("value %s released twice", v.name)
		}
		mu.Lock()
		released = append(released, k)
		mu.Unlock()
		if user != nil {
			user(k, v)
		}
	}
	m, err := NewMemory(opts)
	if err != nil {
		t.Fatal(err)
	}
	return m, &released
}

func constant(name string, size int64) CompileFunc[*value] {
	return func(context.Context) (*value, int64, error) { return &value{name: name}, size, nil }
}

// waitWaiters yields until key's flight has n waiters.
func waitWaiters[V any](m *Memory[V], key string, n int) {
	for {
		m.mu.Lock()
		f := m.flights[key]
		ok := f != nil && f.waiters == n
		m.mu.Unlock()
		if ok {
			return
		}
		runtime.Gosched()
	}
}

// TestSingleFlight: 100 concurrent callers of one key, one compile.
func TestSingleFlight(t *testing.T) {
	m, _ := newMem(t, MemoryOptions[*value]{})
	var calls atomic.Int32
	release := make(chan struct{})
	compile := func(context.Context) (*value, int64, error) {
		calls.Add(1)
		<-release
		return &value{name: "k"}, 1, nil
	}
	const n = 100
	got := make([]*value, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, done, err := m.GetOrCompile(context.Background(), "k", compile)
			if err != nil {
				t.Error(err)
				return
			}
			defer done()
			got[i] = v
		}()
	}
	waitWaiters(m, "k", n)
	close(release)
	wg.Wait()
	if c := calls.Load(); c != 1 {
		t.Fatalf("compile ran %d times for %d concurrent callers, want 1", c, n)
	}
	for i, v := range got {
		if v != got[0] {
			t.Fatalf("caller %d got a different value", i)
		}
	}
	s := m.Stats()
	if s.Misses != 1 || s.Shared != n-1 || s.Hits != 0 || s.Entries != 1 {
		t.Errorf("stats = %+v, want 1 miss, %d shared, 0 hits, 1 entry", s, n-1)
	}
}

// TestCallerLeavesCompileContinues: a caller whose context ends gets its
// error; the compile is not canceled and the other caller gets the value.
func TestCallerLeavesCompileContinues(t *testing.T) {
	m, _ := newMem(t, MemoryOptions[*value]{})
	release := make(chan struct{})
	compileCtxErr := make(chan error, 1)
	compile := func(ctx context.Context) (*value, int64, error) {
		<-release
		compileCtxErr <- ctx.Err()
		return &value{name: "k"}, 1, nil
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() {
		_, _, err := m.GetOrCompile(ctxA, "k", compile)
		errA <- err
	}()
	waitWaiters(m, "k", 1)
	resB := make(chan error, 1)
	go func() {
		v, done, err := m.GetOrCompile(context.Background(), "k", compile)
		if err == nil {
			done()
			if v.name != "k" {
				err = fmt.Errorf("got value %q", v.name)
			}
		}
		resB <- err
	}()
	waitWaiters(m, "k", 2)
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled caller got %v, want context.Canceled", err)
	}
	close(release)
	if err := <-resB; err != nil {
		t.Fatalf("remaining caller: %v", err)
	}
	if err := <-compileCtxErr; err != nil {
		t.Errorf("compile's context ended (%v) when the first caller left", err)
	}
}

// TestFailedCompileNotCached: every waiter of a failing flight gets its
// error; the next call compiles again.
func TestFailedCompileNotCached(t *testing.T) {
	m, _ := newMem(t, MemoryOptions[*value]{})
	boom := errors.New("boom")
	var calls atomic.Int32
	release := make(chan struct{})
	failing := func(context.Context) (*value, int64, error) {
		calls.Add(1)
		<-release
		return nil, 0, &errs.CompileError{Backend: "test", Program: "k", Err: boom}
	}
	const n = 5
	errc := make(chan error, n)
	for range n {
		go func() {
			_, _, err := m.GetOrCompile(context.Background(), "k", failing)
			errc <- err
		}()
	}
	waitWaiters(m, "k", n)
	close(release)
	for range n {
		if err := <-errc; !errors.Is(err, boom) || !errors.Is(err, errs.ErrCompileFailed) {
			t.Errorf("waiter got %v, want the compile's error", err)
		}
	}
	if _, _, err := m.GetOrCompile(context.Background(), "k", constant("k", 1)); err != nil {
		t.Fatal(err)
	}
	if c := calls.Load(); c != 1 {
		t.Errorf("failing compile ran %d times, want 1", c)
	}
	if s := m.Stats(); s.Failures != 1 || s.Misses != 2 || s.Entries != 1 {
		t.Errorf("stats = %+v, want 1 failure, 2 misses, 1 entry", s)
	}
}

// TestEvictionOrder replays get sequences against an LRU of two entries
// and checks what is left (most recent first) and what was released.
func TestEvictionOrder(t *testing.T) {
	tests := []struct {
		name         string
		maxEntries   int
		maxBytes     int64
		ops          []string // keys requested in order; each has size 10
		wantKeys     []string
		wantReleased []string
	}{
		{"no limit", 0, 0, []string{"a", "b", "c"}, []string{"c", "b", "a"}, nil},
		{"oldest goes", 2, 0, []string{"a", "b", "c"}, []string{"c", "b"}, []string{"a"}},
		{"hit refreshes", 2, 0, []string{"a", "b", "a", "c"}, []string{"c", "a"}, []string{"b"}},
		{"repeated", 2, 0, []string{"a", "b", "c", "d", "a"}, []string{"a", "d"}, []string{"a", "b", "c"}},
		{"bytes", 0, 25, []string{"a", "b", "c"}, []string{"c", "b"}, []string{"a"}},
		{"bytes with hit", 0, 25, []string{"a", "b", "a", "c"}, []string{"c", "a"}, []string{"b"}},
		{"both limits", 3, 20, []string{"a", "b", "c"}, []string{"c", "b"}, []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, released := newMem(t, MemoryOptions[*value]{MaxEntries: tt.maxEntries, MaxBytes: tt.maxBytes})
			for _, k := range tt.ops {
				_, done, err := m.GetOrCompile(context.Background(), k, constant(k, 10))
				if err != nil {
					t.Fatal(err)
				}
				done()
			}
			if got := m.Keys(); !slices.Equal(got, tt.wantKeys) {
				t.Errorf("keys = %v, want %v", got, tt.wantKeys)
			}
			if !slices.Equal(*released, tt.wantReleased) {
				t.Errorf("released = %v, want %v", *released, tt.wantReleased)
			}
			if s := m.Stats(); s.Evictions != int64(len(tt.wantReleased)) || s.Bytes != int64(10*len(tt.wantKeys)) {
				t.Errorf("stats = %+v, want %d evictions and %d bytes", s, len(tt.wantReleased), 10*len(tt.wantKeys))
			}
		})
	}
}

// TestReleaseWaitsForHolders: an evicted value in use is released only
// when its last holder is done, once.
func TestReleaseWaitsForHolders(t *testing.T) {
	m, released := newMem(t, MemoryOptions[*value]{MaxEntries: 1})
	ctx := context.Background()
	a1, doneA1, _ := m.GetOrCompile(ctx, "a", constant("a", 1))
	_, doneA2, _ := m.GetOrCompile(ctx, "a", constant("a", 1)) // a hit: second holder
	_, doneB, _ := m.GetOrCompile(ctx, "b", constant("b", 1))  // evicts a
	doneB()
	if len(*released) != 0 {
		t.Fatalf("released %v while a is held", *released)
	}
	if s := m.Stats(); s.Retired != 1 || s.Entries != 1 {
		t.Errorf("stats = %+v, want 1 retired, 1 entry", s)
	}
	doneA1()
	doneA1() // a second call does nothing
	if len(*released) != 0 {
		t.Fatalf("released %v while a has one holder", *released)
	}
	doneA2()
	if !slices.Equal(*released, []string{"a"}) || a1.released.Load() != 1 {
		t.Fatalf("released = %v, want [a] once", *released)
	}
	if s := m.Stats(); s.Retired != 0 {
		t.Errorf("retired = %d after release, want 0", s.Retired)
	}
}

// TestTooLargeNotKept: a value over MaxBytes is returned, not kept, and
// released once its caller is done.
func TestTooLargeNotKept(t *testing.T) {
	m, released := newMem(t, MemoryOptions[*value]{MaxBytes: 100})
	v, done, err := m.GetOrCompile(context.Background(), "big", constant("big", 101))
	if err != nil || v.name != "big" {
		t.Fatalf("got %v, %v", v, err)
	}
	if m.Len() != 0 || len(*released) != 0 {
		t.Fatalf("len %d, released %v; want 0 and none before done", m.Len(), *released)
	}
	done()
	if !slices.Equal(*released, []string{"big"}) {
		t.Fatalf("released = %v, want [big]", *released)
	}
}

// TestTimeout: a compile that outlives Timeout gives every waiter a
// *errs.CompileTimeoutError; a late success is kept.
func TestTimeout(t *testing.T) {
	tests := []struct {
		name     string
		ctxAware bool // the compile returns when its context ends
	}{
		{"compile ignores its context", false},
		{"compile honours its context", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newMem(t, MemoryOptions[*value]{Timeout: time.Millisecond})
			finished := make(chan string, 1)
			m.flightDone = func(k string) { finished <- k }
			release := make(chan struct{})
			compile := func(ctx context.Context) (*value, int64, error) {
				if tt.ctxAware {
					<-ctx.Done()
					return nil, 0, ctx.Err()
				}
				<-release
				return &value{name: "late"}, 1, nil
			}
			_, _, err := m.GetOrCompile(context.Background(), "k", compile)
			var te *errs.CompileTimeoutError
			if !errors.As(err, &te) || !errors.Is(err, errs.ErrCompileTimeout) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v (%T), want *errs.CompileTimeoutError", err, err)
			}
			if te.Timeout != time.Millisecond || te.Program != "k" {
				t.Errorf("timeout error = %+v, want Timeout 1ms, Program k", te)
			}
			if errs.KindOf(err) != errs.DeadlineExceeded {
				t.Errorf("KindOf = %v, want DeadlineExceeded", errs.KindOf(err))
			}
			close(release)
			<-finished
			v, done, ok := m.Get("k")
			if tt.ctxAware {
				if ok {
					t.Errorf("a compile that failed on its deadline was kept")
				}
				return
			}
			if !ok || v.name != "late" {
				t.Fatalf("late result not kept: ok=%v", ok)
			}
			done()
			if s := m.Stats(); s.Timeouts != 1 {
				t.Errorf("timeouts = %d, want 1", s.Timeouts)
			}
		})
	}
}

// TestCompileDoesNotBlockOthers: while one key compiles, hits and compiles
// of other keys complete (if the lock were held this would deadlock).
func TestCompileDoesNotBlockOthers(t *testing.T) {
	m, _ := newMem(t, MemoryOptions[*value]{})
	ctx := context.Background()
	_, done, _ := m.GetOrCompile(ctx, "ready", constant("ready", 1))
	done()
	release := make(chan struct{})
	slowDone := make(chan struct{})
	go func() {
		_, d, _ := m.GetOrCompile(ctx, "slow", func(context.Context) (*value, int64, error) {
			<-release
			return &value{name: "slow"}, 1, nil
		})
		d()
		close(slowDone)
	}()
	waitWaiters(m, "slow", 1)
	if _, d, err := m.GetOrCompile(ctx, "ready", constant("x", 1)); err != nil {
		t.Fatal(err)
	} else {
		d()
	}
	if _, d, err := m.GetOrCompile(ctx, "other", constant("other", 1)); err != nil {
		t.Fatal(err)
	} else {
		d()
	}
	close(release)
	<-slowDone
}

// TestCompileMisbehaves: a panic and a negative size become errors.
func TestCompileMisbehaves(t *testing.T) {
	m, released := newMem(t, MemoryOptions[*value]{})
	ctx := context.Background()
	_, _, err := m.GetOrCompile(ctx, "p", func(context.Context) (*value, int64, error) { panic("compiler bug") })
	if errs.KindOf(err) != errs.Internal {
		t.Errorf("panic gave %v, want an Internal error", err)
	}
	_, _, err = m.GetOrCompile(ctx, "n", constant("n", -1))
	if err == nil {
		t.Errorf("negative size accepted")
	}
	if !slices.Equal(*released, []string{"n"}) || m.Len() != 0 {
		t.Errorf("released %v, len %d; want [n], 0", *released, m.Len())
	}
	if _, err := NewMemory(MemoryOptions[int]{MaxBytes: -1}); err == nil {
		t.Errorf("negative MaxBytes accepted")
	}
}

func TestClosed(t *testing.T) {
	m, released := newMem(t, MemoryOptions[*value]{})
	ctx := context.Background()
	_, done, _ := m.GetOrCompile(ctx, "a", constant("a", 1))
	done()
	m.Close()
	if !slices.Equal(*released, []string{"a"}) {
		t.Errorf("Close released %v, want [a]", *released)
	}
	if _, _, err := m.GetOrCompile(ctx, "a", constant("a", 1)); !errors.Is(err, errs.ErrClosed) {
		t.Errorf("after Close got %v, want ErrClosed", err)
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := m.GetOrCompile(ctx2, "a", constant("a", 1)); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context got %v", err)
	}
}

// TestCompileTimeStats: saved time is the recorded compile cost per hit.
func TestCompileTimeStats(t *testing.T) {
	m, _ := newMem(t, MemoryOptions[*value]{})
	ctx := context.Background()
	// getOrLoad with a declared cost, so the arithmetic is exact.
	load := func(context.Context) (*value, int64, loadResult, error) {
		return &value{name: "k"}, 1, loadResult{compiled: true, cost: 3 * time.Second}, nil
	}
	for range 4 {
		_, done, err := m.getOrLoad(ctx, "k", label{}, load)
		if err != nil {
			t.Fatal(err)
		}
		done()
	}
	s := m.Stats()
	if s.CompileTime != 3*time.Second || s.CompileTimeSaved != 9*time.Second || s.Hits != 3 || s.Misses != 1 {
		t.Errorf("stats = %+v, want 3s spent, 9s saved, 3 hits, 1 miss", s)
	}
}
