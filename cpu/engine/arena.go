package engine

import (
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// The arena holds the large intermediate values of runs: buffers of at
// least arenaMin bytes that a run allocates and frees itself. It is a
// best-fit allocator over a few large chunks of memory mapped outside the
// Go heap (arena_unix.go), with freed neighbours merged, so that
//   - a buffer freed by one op serves the next op's value of any shape
//     and dtype that fits (the exact-shape free lists of bufpool.go keep
//     one list per shape, so a step of many shapes held the sum of each
//     shape's peak instead of the peak of their sum: 150 MB of values
//     live at once in a 100M Llama's LoRA step took 370 MB of lists);
//   - the collector neither scans nor paces on them: at GOGC=25 every
//     byte on the heap costs 1.25 bytes of resident memory.
//
// Arena buffers never leave the engine. A run's outputs, a segment's
// donated inputs (the inner engine would pool them as its own) and
// constants are heap buffers; outputs made in the arena are copied out
// (exec.go). The arena keeps what it mapped for the next run, and unmaps a
// chunk left wholly free for chunkIdle.
//
// A buffer is the inner engine's own type, *simplego.Buffer, pointed at
// arena memory through sgBuffer, a mirror of its fields: GoMLX v0.26.0
// gives no constructor over caller memory. newArena checks the mirror
// against a buffer the inner engine made and leaves the arena off (every
// buffer on the heap, as before) when they disagree.

// arenaMin is the smallest buffer, in bytes, taken from the arena; smaller
// ones stay in bufpool's lists, where they cost little.
const arenaMin = 64 << 10

// arenaAlign is the alignment and granularity of arena blocks.
const arenaAlign = 4096

// chunkSize is the size of an ordinary chunk; a larger buffer gets a chunk
// of its own size. Values do not straddle chunks, so small chunks strand
// free space at their ends: 64 MiB chunks took 192 MiB for the 131 MiB a
// 100M Llama's LoRA step holds at once, 256 MiB chunks about 50 MiB less
// resident memory (BENCHMARKS.md, fine-tuning).
const chunkSize = 256 << 20

// chunkIdle is how long a wholly free chunk is kept for later runs.
const chunkIdle = 30 * time.Second

// simplegoProbeDType is the dtype of newArena's probe buffer.
const simplegoProbeDType = dtypes.Float32

// sgBuffer mirrors simplego.Buffer's fields (v0.26.0, backends/simplego/
// buffers.go): its shape, whether it is valid, and its flat values.
type sgBuffer struct {
	shape shapes.Shape
	valid bool
	flat  any
}

// chunk is one mapped region.
type chunk struct {
	mem      []byte
	used     int // bytes in allocated blocks
	lastUsed time.Time
}

// block is a run of a chunk's bytes, allocated or free; blocks of a chunk
// form an address-ordered list.
type block struct {
	c          *chunk
	off, size  int
	free       bool
	prev, next *block
}

// arena is the allocator (see above). It is safe for concurrent use.
type arena struct {
	mu     sync.Mutex
	chunks []*chunk
	free   []*block                    // free blocks, any order
	live   map[*simplego.Buffer]*block // allocated buffers
	mapped int64
}

// newArena returns an arena for inner's buffers, or nil when inner's
// buffers are not simplego's as sgBuffer describes them.
func newArena(inner backends.Backend) *arena {
	b, flat, err := inner.NewSharedBuffer(0, shapes.Make(simplegoProbeDType, 3))
	if err != nil {
		return nil
	}
	defer func() { _ = inner.BufferFinalize(b) }()
	sb, ok := b.(*simplego.Buffer)
	if !ok || unsafe.Sizeof(*sb) != unsafe.Sizeof(sgBuffer{}) {
		return nil
	}
	m := (*sgBuffer)(unsafe.Pointer(sb))
	got, ok := m.flat.([]float32)
	want, _ := flat.([]float32)
	if !ok || !m.valid || !m.shape.Equal(shapes.Make(simplegoProbeDType, 3)) || len(got) != 3 || &got[0] != &want[0] {
		return nil
	}
	return &arena{live: map[*simplego.Buffer]*block{}}
}

// alloc returns a buffer of shape s in the arena (values not zeroed).
func (a *arena) alloc(s shapes.Shape) (backends.Buffer, any, error) {
	n := (int(s.Memory()) + arenaAlign - 1) &^ (arenaAlign - 1)
	a.mu.Lock()
	blk, err := a.take(n)
	if err != nil {
		a.mu.Unlock()
		return nil, nil, err
	}
	ptr := unsafe.Pointer(&blk.c.mem[blk.off])
	flat := reflect.SliceAt(s.DType.GoType(), ptr, s.Size()).Interface()
	b := new(simplego.Buffer)
	*(*sgBuffer)(unsafe.Pointer(b)) = sgBuffer{shape: s.Clone(), valid: true, flat: flat}
	a.live[b] = blk
	a.mu.Unlock()
	return b, flat, nil
}

// take finds the best-fitting free block of at least n bytes, mapping a
// new chunk when none fits, and splits off what it does not need.
func (a *arena) take(n int) (*block, error) {
	best := -1
	for i, f := range a.free {
		if f.size >= n && (best < 0 || f.size < a.free[best].size) {
			best = i
		}
	}
	if best < 0 {
		mem, err := mapMemory(max(n, chunkSize))
		if err != nil && n < chunkSize {
			mem, err = mapMemory(n) // address space is short: map only what is asked
		}
		if err != nil {
			return nil, fmt.Errorf("mapping %d bytes for a run's intermediate values: %w", max(n, chunkSize), err)
		}
		c := &chunk{mem: mem}
		a.chunks = append(a.chunks, c)
		a.mapped += int64(len(mem))
		a.free = append(a.free, &block{c: c, size: len(mem), free: true})
		best = len(a.free) - 1
	}
	blk := a.free[best]
	a.free[best] = a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	if blk.size > n {
		rest := &block{c: blk.c, off: blk.off + n, size: blk.size - n, free: true, prev: blk, next: blk.next}
		if blk.next != nil {
			blk.next.prev = rest
		}
		blk.next, blk.size = rest, n
		a.free = append(a.free, rest)
	}
	blk.free = false
	blk.c.used += blk.size
	blk.c.lastUsed = time.Now()
	return blk, nil
}

// owns reports whether b is an arena buffer.
func (a *arena) owns(b backends.Buffer) bool {
	sb, ok := b.(*simplego.Buffer)
	if !ok {
		return false
	}
	a.mu.Lock()
	_, ok = a.live[sb]
	a.mu.Unlock()
	return ok
}

// release frees b when it is an arena buffer, reporting whether it was.
// The buffer is invalidated, so a stale handle fails in the inner engine.
func (a *arena) release(b backends.Buffer) bool {
	sb, ok := b.(*simplego.Buffer)
	if !ok {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	blk, ok := a.live[sb]
	if !ok {
		return false
	}
	delete(a.live, sb)
	*(*sgBuffer)(unsafe.Pointer(sb)) = sgBuffer{}
	blk.c.used -= blk.size
	blk.free = true
	blk = a.merge(blk)
	a.free = append(a.free, blk)
	if blk.c.used == 0 {
		a.trim(time.Now())
	}
	return true
}

// merge joins blk with its free neighbours (removing them from the free
// list) and returns the joined block.
func (a *arena) merge(blk *block) *block {
	if p := blk.prev; p != nil && p.free {
		a.unlist(p)
		p.size += blk.size
		p.next = blk.next
		if blk.next != nil {
			blk.next.prev = p
		}
		blk = p
	}
	if nx := blk.next; nx != nil && nx.free {
		a.unlist(nx)
		blk.size += nx.size
		blk.next = nx.next
		if nx.next != nil {
			nx.next.prev = blk
		}
	}
	return blk
}

// unlist removes f from the free list.
func (a *arena) unlist(f *block) {
	for i, g := range a.free {
		if g == f {
			a.free[i] = a.free[len(a.free)-1]
			a.free = a.free[:len(a.free)-1]
			return
		}
	}
}

// trim unmaps the chunks wholly free for chunkIdle (all of them when
// now is zero).
func (a *arena) trim(now time.Time) {
	keep := a.chunks[:0]
	for _, c := range a.chunks {
		if c.used != 0 || (!now.IsZero() && now.Sub(c.lastUsed) < chunkIdle) {
			keep = append(keep, c)
			continue
		}
		for i := 0; i < len(a.free); i++ {
			if a.free[i].c == c {
				a.free[i] = a.free[len(a.free)-1]
				a.free = a.free[:len(a.free)-1]
				i--
			}
		}
		a.mapped -= int64(len(c.mem))
		_ = unmapMemory(c.mem)
	}
	clear(a.chunks[len(keep):])
	a.chunks = keep
}

// stats returns the bytes mapped and in use.
func (a *arena) stats() (mapped, inUse int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.chunks {
		inUse += int64(c.used)
	}
	return a.mapped, inUse
}

// close unmaps every wholly free chunk (Engine.Finalize); chunks still
// holding buffers stay mapped until the process ends.
func (a *arena) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.trim(time.Time{})
}
