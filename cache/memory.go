package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tensorbridge/tensorbridge/errs"
)

// CompileFunc produces the value for a key: it compiles, and returns the
// value with its size in bytes (what the value holds, typically device
// memory for the executable; the unit is the caller's, as long as it matches
// MaxBytes). It should return when ctx ends, if it can.
type CompileFunc[V any] func(ctx context.Context) (value V, size int64, err error)

// MemoryOptions configure a Memory. The zero value is an unbounded cache
// with no timeout and nothing to release.
type MemoryOptions[V any] struct {
	// MaxEntries bounds the number of entries; 0 means no bound.
	MaxEntries int

	// MaxBytes bounds the sum of entry sizes; 0 means no bound. A value
	// larger than MaxBytes is returned to its callers but not kept.
	MaxBytes int64

	// Timeout bounds how long a caller waits for a compile, counted from
	// its own call; 0 means no bound. The compile's context ends Timeout
	// after the compile started. A caller that waited Timeout gets a
	// *errs.CompileTimeoutError. A compile that ignores its context and
	// succeeds late is still kept, so the next call is a hit.
	Timeout time.Duration

	// Release frees a value that has left the cache (evicted, removed,
	// cleared, or never admitted) once no caller holds it: it runs exactly
	// once per value, after every done function returned by GetOrCompile
	// for that value has been called. Nil means values need no freeing.
	Release func(key string, value V)
}

// MemoryStats counts what a Memory did since it was made.
type MemoryStats struct {
	Hits      int64 // calls served from an entry already present
	Misses    int64 // calls that started a compile
	Shared    int64 // calls that joined a compile already running for their key
	Failures  int64 // compiles that returned an error (or panicked)
	Timeouts  int64 // calls that returned a *errs.CompileTimeoutError
	Evictions int64 // entries dropped to respect MaxEntries or MaxBytes

	Entries int   // entries present now
	Bytes   int64 // sum of their sizes
	Retired int   // values evicted or removed but still held by a caller, not yet released

	CompileTime      time.Duration // time spent in compiles that finished
	CompileTimeSaved time.Duration // for each hit, the compile time of the entry it hit
}

// Memory is an in-memory LRU cache of compiled values with one compile per
// key at a time. Many concurrent callers of a missing key share a single
// compile; a caller whose context ends stops waiting while the compile
// continues for the others. A failed compile is not kept, and its error
// goes to every caller that waited for it. No lock is held while compiling,
// so hits on other keys are never delayed by a compile.
//
// Values are reference-counted: GetOrCompile returns a done function, and a
// value that leaves the cache is released only after every holder called
// done. Memory is safe for concurrent use.
type Memory[V any] struct {
	opts MemoryOptions[V]

	mu      sync.Mutex
	lru     *list.List // of *memEntry[V], most recently used at the front
	index   map[string]*list.Element
	flights map[string]*flight[V]
	bytes   int64
	retired int
	closed  bool
	stats   MemoryStats

	// flightDone, if set, runs after each compile finished and its result
	// was stored or dropped; tests use it to wait without sleeping.
	flightDone func(key string)
}

type memEntry[V any] struct {
	key      string
	value    V
	size     int64
	cost     time.Duration // the compile time this entry saves on a hit
	pins     int           // done functions not yet called
	indexed  bool
	released bool
}

// flight is one compile in progress.
type flight[V any] struct {
	done      chan struct{}
	waiters   int  // callers still waiting; each gets a pin when it completes
	completed bool // set under Memory.mu when the result is in
	entry     *memEntry[V]
	err       error
}

// loadResult tells Memory what a load did, for the statistics.
type loadResult struct {
	compiled bool          // a compile ran (not a load from disk)
	cost     time.Duration // compile time the value stands for
}

type loadFunc[V any] func(ctx context.Context) (V, int64, loadResult, error)

// label names a compile in timeout errors.
type label struct{ backend, program string }

// NewMemory returns an empty cache. Negative limits are an error.
func NewMemory[V any](opts MemoryOptions[V]) (*Memory[V], error) {
	if opts.MaxEntries < 0 || opts.MaxBytes < 0 || opts.Timeout < 0 {
		return nil, fmt.Errorf("cache: negative limit in MemoryOptions (MaxEntries %d, MaxBytes %d, Timeout %s); use 0 for no limit",
			opts.MaxEntries, opts.MaxBytes, opts.Timeout)
	}
	return &Memory[V]{
		opts:    opts,
		lru:     list.New(),
		index:   map[string]*list.Element{},
		flights: map[string]*flight[V]{},
	}, nil
}

// GetOrCompile returns the value for key, compiling it with compile when it
// is not present. The done function must be called once the caller no
// longer uses the value (calling it again does nothing); until then an
// evicted value is not released. On error, done is nil.
//
// Errors: ctx.Err() when ctx ends first; *errs.CompileTimeoutError (matching
// errs.ErrCompileTimeout) after Timeout; the compile's own error; an error
// matching errs.ErrClosed after Close.
func (m *Memory[V]) GetOrCompile(ctx context.Context, key string, compile CompileFunc[V]) (V, func(), error) {
	return m.getOrLoad(ctx, key, label{program: key}, func(ctx context.Context) (V, int64, loadResult, error) {
		start := time.Now()
		v, size, err := compile(ctx)
		return v, size, loadResult{compiled: true, cost: time.Since(start)}, err
	})
}

// Get returns the value for key if present, marking it most recently used.
// Call done when finished with the value.
func (m *Memory[V]) Get(key string) (value V, done func(), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.index[key]
	if !ok {
		return value, nil, false
	}
	e := m.hitLocked(el)
	return e.value, m.doneFunc(e), true
}

func (m *Memory[V]) hitLocked(el *list.Element) *memEntry[V] {
	e := el.Value.(*memEntry[V])
	m.lru.MoveToFront(el)
	e.pins++
	m.stats.Hits++
	m.stats.CompileTimeSaved += e.cost
	return e
}

func (m *Memory[V]) getOrLoad(ctx context.Context, key string, lb label, load loadFunc[V]) (V, func(), error) {
	var zero V
	if err := ctx.Err(); err != nil {
		return zero, nil, err
	}
	m.mu.Lock()
	if el, ok := m.index[key]; ok {
		e := m.hitLocked(el)
		m.mu.Unlock()
		return e.value, m.doneFunc(e), nil
	}
	if m.closed {
		m.mu.Unlock()
		return zero, nil, fmt.Errorf("compile cache: %w", errs.ErrClosed)
	}
	f, ok := m.flights[key]
	if ok {
		f.waiters++
		m.stats.Shared++
	} else {
		f = &flight[V]{done: make(chan struct{}), waiters: 1}
		m.flights[key] = f
		m.stats.Misses++
		go m.run(context.WithoutCancel(ctx), key, lb, f, load)
	}
	m.mu.Unlock()

	var timeout <-chan time.Time
	if m.opts.Timeout > 0 {
		t := time.NewTimer(m.opts.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var leaveErr error
	select {
	case <-f.done:
	case <-ctx.Done():
		leaveErr = ctx.Err()
	case <-timeout:
		leaveErr = &errs.CompileTimeoutError{Backend: lb.backend, Program: lb.program, Timeout: m.opts.Timeout}
	}
	m.mu.Lock()
	if leaveErr != nil && !f.completed {
		f.waiters--
		if _, ok := leaveErr.(*errs.CompileTimeoutError); ok {
			m.stats.Timeouts++
		}
		m.mu.Unlock()
		return zero, nil, leaveErr
	}
	if errors.Is(f.err, errs.ErrCompileTimeout) {
		m.stats.Timeouts++
	}
	m.mu.Unlock()
	// Completed: this caller's pin was taken when the result came in.
	if f.err != nil {
		return zero, nil, f.err
	}
	return f.entry.value, m.doneFunc(f.entry), nil
}

// run performs one compile and publishes its result. ctx carries the first
// caller's values but not its cancellation.
func (m *Memory[V]) run(ctx context.Context, key string, lb label, f *flight[V], load loadFunc[V]) {
	if m.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.opts.Timeout)
		defer cancel()
	}
	v, size, res, err := safeLoad(ctx, load)
	if err != nil && m.opts.Timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && errors.Is(err, context.DeadlineExceeded) &&
		!errors.Is(err, errs.ErrCompileTimeout) {
		err = &errs.CompileTimeoutError{Backend: lb.backend, Program: lb.program, Timeout: m.opts.Timeout}
	}
	var release []*memEntry[V]
	m.mu.Lock()
	delete(m.flights, key)
	f.completed = true
	if res.compiled {
		m.stats.CompileTime += res.cost
	}
	switch {
	case err != nil:
		m.stats.Failures++
		f.err = err
	case size < 0:
		m.stats.Failures++
		f.err = fmt.Errorf("compile cache: compile for %s returned negative size %d", lb.program, size)
		release = append(release, &memEntry[V]{key: key, value: v})
	default:
		e := &memEntry[V]{key: key, value: v, size: size, cost: res.cost, pins: f.waiters}
		f.entry = e
		if !m.closed && (m.opts.MaxBytes == 0 || size <= m.opts.MaxBytes) {
			e.indexed = true
			m.index[key] = m.lru.PushFront(e)
			m.bytes += size
			release = m.evictLocked()
		} else if e.pins == 0 {
			e.released = true
			release = append(release, e)
		} else {
			m.retired++
		}
	}
	hook := m.flightDone
	m.mu.Unlock()
	// Release evicted values before waking the callers, so that when a call
	// returns, what its entry displaced has been freed.
	m.release(release)
	close(f.done)
	if hook != nil {
		hook(key)
	}
}

// safeLoad runs load, turning a panic into an error: the compile runs on
// its own goroutine, where a panic would end the process.
func safeLoad[V any](ctx context.Context, load loadFunc[V]) (v V, size int64, res loadResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &errs.Error{Kind: errs.Internal, Op: "compile", Err: fmt.Errorf("compile panicked: %v\n%s", r, debug.Stack())}
		}
	}()
	return load(ctx)
}

// evictLocked drops least recently used entries until the limits hold and
// returns those to release now.
func (m *Memory[V]) evictLocked() []*memEntry[V] {
	var out []*memEntry[V]
	for m.lru.Len() > 0 &&
		((m.opts.MaxEntries > 0 && m.lru.Len() > m.opts.MaxEntries) || (m.opts.MaxBytes > 0 && m.bytes > m.opts.MaxBytes)) {
		if e := m.dropLocked(m.lru.Back()); e != nil {
			out = append(out, e)
		}
		m.stats.Evictions++
	}
	return out
}

// dropLocked removes an entry from the index and returns it if it must be
// released now (nobody holds it).
func (m *Memory[V]) dropLocked(el *list.Element) *memEntry[V] {
	e := m.lru.Remove(el).(*memEntry[V])
	delete(m.index, e.key)
	e.indexed = false
	m.bytes -= e.size
	if e.pins == 0 {
		e.released = true
		return e
	}
	m.retired++
	return nil
}

func (m *Memory[V]) doneFunc(e *memEntry[V]) func() {
	var once sync.Once
	return func() { once.Do(func() { m.unpin(e) }) }
}

func (m *Memory[V]) unpin(e *memEntry[V]) {
	m.mu.Lock()
	e.pins--
	if e.pins > 0 || e.indexed || e.released {
		m.mu.Unlock()
		return
	}
	e.released = true
	m.retired--
	m.mu.Unlock()
	m.release([]*memEntry[V]{e})
}

func (m *Memory[V]) release(es []*memEntry[V]) {
	if m.opts.Release == nil {
		return
	}
	for _, e := range es {
		m.opts.Release(e.key, e.value)
	}
}

// Remove drops key's entry, if present, and reports whether it was.
func (m *Memory[V]) Remove(key string) bool {
	m.mu.Lock()
	el, ok := m.index[key]
	var rel []*memEntry[V]
	if ok {
		if e := m.dropLocked(el); e != nil {
			rel = append(rel, e)
		}
	}
	m.mu.Unlock()
	m.release(rel)
	return ok
}

// Clear drops every entry. Compiles in flight are not affected.
func (m *Memory[V]) Clear() {
	m.mu.Lock()
	var rel []*memEntry[V]
	for m.lru.Len() > 0 {
		if e := m.dropLocked(m.lru.Back()); e != nil {
			rel = append(rel, e)
		}
	}
	m.mu.Unlock()
	m.release(rel)
}

// Close drops every entry and refuses new calls with an error matching
// errs.ErrClosed. Values of compiles still in flight are released when
// their callers are done with them instead of being kept.
func (m *Memory[V]) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.Clear()
}

// Len returns the number of entries.
func (m *Memory[V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len()
}

// Keys returns the keys present, most recently used first.
func (m *Memory[V]) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, m.lru.Len())
	for el := m.lru.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*memEntry[V]).key)
	}
	return out
}

// Stats returns the counters and current occupancy.
func (m *Memory[V]) Stats() MemoryStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats
	s.Entries = m.lru.Len()
	s.Bytes = m.bytes
	s.Retired = m.retired
	return s
}
