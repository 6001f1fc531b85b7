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
// on the Go heap. Buffers handed to the caller (outputs) are not taken
// back: the caller finalizes them through the inner engine, which
// invalidates them, so a stale handle fails rather than reading another
// run's values.

// poolBytes bounds the bytes the free lists hold; past it a freed buffer
// goes back to the inner engine (whose pool the garbage collector may
// empty).
const poolBytes = 64 << 20

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

// bufPool is the engine's free lists.
type bufPool struct {
	mu    sync.Mutex
	free  map[bufKey][]pooled
	bytes int
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

// newBuffer returns a buffer of shape s (values not zeroed), from the free
// lists when one is there.
func (e *Engine) newBuffer(s shapes.Shape) (backends.Buffer, any, error) {
	if k, ok := keyOf(s); ok {
		p := &e.pool
		p.mu.Lock()
		if l := p.free[k]; len(l) > 0 {
			b := l[len(l)-1]
			l[len(l)-1] = pooled{}
			p.free[k] = l[:len(l)-1]
			p.bytes -= int(s.Memory())
			p.mu.Unlock()
			return b.b, b.flat, nil
		}
		p.mu.Unlock()
	}
	return e.inner.NewSharedBuffer(0, s)
}

// recycle takes back a buffer a run owns and no longer needs.
func (e *Engine) recycle(b backends.Buffer) {
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
	p := &e.pool
	p.mu.Lock()
	if p.bytes+int(s.Memory()) > poolBytes {
		p.mu.Unlock()
		_ = e.inner.BufferFinalize(b)
		return
	}
	if p.free == nil {
		p.free = map[bufKey][]pooled{}
	}
	p.free[k] = append(p.free[k], pooled{b, flat})
	p.bytes += int(s.Memory())
	p.mu.Unlock()
}

// drain finalizes every pooled buffer (Engine.Finalize).
func (e *Engine) drain() {
	p := &e.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.free {
		for _, b := range l {
			_ = e.inner.BufferFinalize(b.b)
		}
	}
	p.free, p.bytes = nil, 0
}
