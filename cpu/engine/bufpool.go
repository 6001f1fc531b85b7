package engine

import (
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// The engine keeps the buffers its runs free (intermediate values after
// their last use) for the next allocation of the same dtype and
// dimensions, so that a steady-state run takes every intermediate buffer
// from here: the inner engine's allocation clones the shape into a new
// buffer header each time, which is most of what a run used to allocate
// on the Go heap. The free lists are sync.Pools, one per dtype and
// dimensions, so the garbage collector empties them as it empties the
// inner engine's own pool: a long-running process holds no more than it
// uses (the llm soak test measured resident memory growing with lists
// that only a byte cap bounded). Buffers handed to the caller (outputs)
// are not taken back: the caller finalizes them through the inner engine,
// which invalidates them, so a stale handle fails rather than reading
// another run's values.

// maxPooledRank is the highest rank whose buffers are pooled.
const maxPooledRank = 8

// bufKey identifies interchangeable buffers: dtype and dimensions.
type bufKey struct {
	dt   dtypes.DType
	rank int
	dims [maxPooledRank]int
}

// pooled is a free buffer and its flat values.
type pooled struct {
	b    backends.Buffer
	flat any
}

// entries recycles the pooled holders, so a put allocates nothing.
var entries = sync.Pool{New: func() any { return new(pooled) }}

// bufPool is the engine's free lists.
type bufPool struct {
	mu    sync.RWMutex
	lists map[bufKey]*sync.Pool
}

// keyOf returns s's key, false when s is not pooled.
func keyOf(s shapes.Shape) (bufKey, bool) {
	k := bufKey{dt: s.DType, rank: s.Rank()}
	if k.rank > maxPooledRank {
		return k, false
	}
	copy(k.dims[:], s.Dimensions)
	return k, true
}

// list returns the free list of k, made when create.
func (p *bufPool) list(k bufKey, create bool) *sync.Pool {
	p.mu.RLock()
	l := p.lists[k]
	p.mu.RUnlock()
	if l != nil || !create {
		return l
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l = p.lists[k]; l == nil {
		if p.lists == nil {
			p.lists = map[bufKey]*sync.Pool{}
		}
		l = new(sync.Pool)
		p.lists[k] = l
	}
	return l
}

// newBuffer returns a buffer of shape s (values not zeroed), from the free
// lists when one is there.
func (e *Engine) newBuffer(s shapes.Shape) (backends.Buffer, any, error) {
	if k, ok := keyOf(s); ok {
		if l := e.pool.list(k, false); l != nil {
			if pb, _ := l.Get().(*pooled); pb != nil {
				b, flat := pb.b, pb.flat
				*pb = pooled{}
				entries.Put(pb)
				return b, flat, nil
			}
		}
	}
	return e.inner.NewSharedBuffer(0, s)
}

// recycle takes back a buffer a run owns and no longer needs.
func (e *Engine) recycle(b backends.Buffer) {
	if e.ar != nil && e.ar.release(b) {
		return
	}
	s, err := e.inner.BufferShape(b)
	k, ok := keyOf(s)
	if err != nil || !ok {
		_ = e.inner.BufferFinalize(b)
		return
	}
	flat, err := e.inner.BufferData(b)
	if err != nil {
		_ = e.inner.BufferFinalize(b)
		return
	}
	pb := entries.Get().(*pooled)
	pb.b, pb.flat = b, flat
	e.pool.list(k, true).Put(pb)
}

// drain drops the free lists (Engine.Finalize); their buffers are left to
// the garbage collector, as the inner engine's pool leaves its own.
func (e *Engine) drain() {
	p := &e.pool
	p.mu.Lock()
	p.lists = nil
	p.mu.Unlock()
}
