package llm

import (
	"container/list"
	"fmt"
	"slices"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge/ir"
)

// The paged KV cache.
//
// K and V are each a pool of blocks [numBlocks, blockSize, L, Hkv, D]
// (vLLM's PagedAttention layout, https://arxiv.org/abs/2309.06180, with
// every layer of a position in one block). Block 0 is the null block:
// no sequence owns it; padding rows and the padding positions past a
// sequence's own blocks write there and nothing live reads it. Each
// sequence has a block table, the ids of the blocks of its positions
// [0, n) in order; every program takes the tables of its rows as an input
// [B, W] and
//
//   - reads by gathering a row's W blocks into [W*blockSize, Hkv, D] per
//     layer: exactly the contiguous layout the attention read from the
//     old per-slot rows, so attention's arithmetic is unchanged;
//   - writes position p at (table[p/blockSize], p%blockSize): one
//     DynamicUpdateSlice at a dynamic block index per row (decode) or per
//     block (prefill and prompt chunks, which start on a block boundary),
//     in place in the donated pool on XLA; ScatterUpdate of the same
//     indices on an engine without DynamicUpdateSlice.
//
// Block size: blockSize (16, vLLM's default), or with chunked prefill the
// largest divisor of 16 that divides EngineOptions.PrefillChunk, so that
// every chunk starts and ends on block boundaries (a chunk writes whole
// blocks, and the prefix cache reuses whole chunks: prefix.go).
//
// The engine's loop owns the pool's bookkeeping (blockPool): a request
// is admitted once the blocks it can need (prompt plus max_tokens, capped
// by the context) are reserved; until then it waits in the queue. One
// that needs more blocks than the pool holds is refused by Generate.

// blockSize is the paged cache's block size without chunked prefill.
const blockSize = 16

// nullBlock is the block no sequence owns.
const nullBlock = 0

// blockSizeFor is the block size for a prefill chunk (0: no chunking).
func blockSizeFor(chunk int) int {
	if chunk <= 0 {
		return blockSize
	}
	bs := blockSize
	for chunk%bs != 0 {
		bs /= 2
	}
	return bs
}

// blocksFor is the blocks of bs positions that hold n positions.
func blocksFor(n, bs int) int { return (n + bs - 1) / bs }

// blockPool is the pool's bookkeeping: each block's references, the free
// blocks, and the prefix cache's blocks (prefix.go) by chain hash, those
// no sequence references kept in LRU order for eviction.
type blockPool struct {
	size  int     // positions per block
	ref   []int32 // references by sequences' tables
	free  []int32 // unreferenced and not cached
	meta  []blockMeta
	hash  map[uint64]int32 // cached blocks by chain hash
	lru   *list.List       // cached unreferenced blocks, least recent first
	elems []*list.Element  // each block's element in lru, or nil
	gen   []uint32         // bumped each time a block is handed out anew
	stats prefixCounters
}

// blockMeta is what a cached block holds: its chain hash, its tokens and
// adapter (compared on a hit, so that a hash collision never reuses it).
type blockMeta struct {
	cached  bool
	hash    uint64
	adapter int
	tokens  []int
	// parent: the previous block of the chain (-1: the first) and its
	// generation when this block was cached.
	parent    int32
	parentGen uint32
}

func newBlockPool(n, size int) *blockPool {
	p := &blockPool{size: size, ref: make([]int32, n), meta: make([]blockMeta, n), hash: map[uint64]int32{}, lru: list.New(), elems: make([]*list.Element, n), gen: make([]uint32, n)}
	for b := n - 1; b > nullBlock; b-- {
		p.free = append(p.free, int32(b))
	}
	return p
}

// usable is the blocks sequences may hold (all but the null block).
func (p *blockPool) usable() int { return len(p.ref) - 1 }

// available is the blocks take can hand out: free, or cached and
// unreferenced (evicted on the way).
func (p *blockPool) available() int { return len(p.free) + p.lru.Len() }

// take hands out k blocks, each referenced once: free ones first, then
// the least recently used cached ones, which the prefix cache forgets.
// It returns nil, false when fewer than k are available.
func (p *blockPool) take(k int) ([]int32, bool) {
	if k > p.available() {
		return nil, false
	}
	out := make([]int32, 0, k)
	for len(out) < k && len(p.free) > 0 {
		b := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		out = append(out, b)
	}
	for len(out) < k {
		b := p.lru.Remove(p.lru.Front()).(int32)
		p.elems[b] = nil
		delete(p.hash, p.meta[b].hash)
		p.meta[b] = blockMeta{}
		p.stats.evictions.Add(1)
		out = append(out, b)
	}
	for _, b := range out {
		p.ref[b] = 1
		p.gen[b]++
	}
	return out, true
}

// acquire adds a reference to each of blocks (cached ones leave the LRU).
func (p *blockPool) acquire(blocks []int32) {
	for _, b := range blocks {
		if p.ref[b] == 0 && p.elems[b] != nil {
			p.lru.Remove(p.elems[b])
			p.elems[b] = nil
		}
		p.ref[b]++
	}
}

// release drops a reference to each of blocks; a block left unreferenced
// stays cached (most recently used) when the prefix cache holds it, else
// it is free.
func (p *blockPool) release(blocks []int32) {
	for _, b := range blocks {
		if b == nullBlock || p.ref[b] <= 0 {
			continue
		}
		p.ref[b]--
		if p.ref[b] > 0 {
			continue
		}
		if p.meta[b].cached {
			p.elems[b] = p.lru.PushBack(b)
		} else {
			p.free = append(p.free, b)
		}
	}
}

// forgetAll drops every cached block (the pool's contents were lost):
// the unreferenced ones become free, the referenced ones free when
// released.
func (p *blockPool) forgetAll() {
	if p == nil {
		return
	}
	for e := p.lru.Front(); e != nil; e = e.Next() {
		b := e.Value.(int32)
		p.elems[b] = nil
		p.free = append(p.free, b)
	}
	p.lru.Init()
	clear(p.hash)
	for i := range p.meta {
		p.meta[i] = blockMeta{}
	}
}

// leaks describes the blocks still referenced, or the blocks neither
// free nor cached, "" when every block is back (tests: all requests
// ended).
func (p *blockPool) leaks() string {
	var held []int
	for b, r := range p.ref {
		if r != 0 {
			held = append(held, b)
		}
	}
	if len(held) > 0 || p.available() != p.usable() {
		return fmt.Sprintf("blocks %v still referenced; %d of %d blocks available", held, p.available(), p.usable())
	}
	return ""
}

// tableRow is blocks padded with the null block to w entries.
func tableRow(blocks []int32, w int) []int {
	out := make([]int, w)
	for i := range min(w, len(blocks)) {
		out[i] = int(blocks[i])
	}
	return out
}

// blockOf is each position's block id (through its row's table) and its
// offset in the block: [B, T] each.
func blockOf(io *cacheIO, positions *Node) (blk, off *Node) {
	g := positions.Graph()
	b, t := positions.Shape().Dimensions[0], positions.Shape().Dimensions[1]
	w := io.table.Shape().Dimensions[1]
	bs := ConstAsDType(g, ir.Int32, io.k.Shape().Dimensions[1])
	q := Div(positions, bs)
	off = Sub(positions, Mul(q, bs))
	base := Mul(Iota(g, ir.MakeShape(ir.Int32, b, t), 0), ConstAsDType(g, ir.Int32, w))
	blk = Gather(Reshape(io.table, b*w), Reshape(Add(base, q), b*t, 1))
	return Reshape(blk, b, t), off
}

// scatterRows writes block [B, T, ...] by ScatterUpdate at (blk, off)
// of each row and token, and at layer when not nil (the block's third
// axis is then 1).
func scatterRows(cache, block, blk, off, layer *Node) *Node {
	dims := block.Shape().Dimensions
	b, t := dims[0], dims[1]
	parts := []*Node{Reshape(blk, b, t, 1), Reshape(off, b, t, 1)}
	upd := append([]int{b * t}, dims[2:]...)
	if layer != nil {
		parts = append(parts, BroadcastToDims(layer, b, t, 1))
		upd = append([]int{b * t}, dims[3:]...)
	}
	idx := Reshape(Concatenate(parts, 2), b*t, len(parts))
	return ScatterUpdate(cache, idx, Reshape(block, upd...), false, true)
}

// updateBlocks writes block [B, T, ...] by DynamicUpdateSlice: with T = 1
// each row at (blk, off); else each row's positions start on a block
// boundary and go block by block (a short last block padded with zeros,
// into positions no one reads before writing them). layer, when not nil,
// is the third axis' start (the block's third axis is then 1).
func updateBlocks(cache, block, blk, off, layer *Node) *Node {
	g := cache.Graph()
	dims := block.Shape().Dimensions
	b, t, bs := dims[0], dims[1], cache.Shape().Dimensions[1]
	zero := ConstAsDType(g, ir.Int32, 0)
	if layer == nil {
		layer = zero
	}
	at := func(x *Node, i, j int) *Node { return Reshape(Slice(x, AxisRange(i, i+1), AxisRange(j, j+1))) }
	for i := range b {
		if t == 1 {
			cache = DynamicUpdateSlice(cache, Slice(block, AxisRange(i, i+1)), []*Node{at(blk, i, 0), at(off, i, 0), layer, zero, zero})
			continue
		}
		for j := 0; j < t; j += bs {
			piece := Slice(block, AxisRange(i, i+1), AxisRange(j, min(j+bs, t)))
			if n := min(j+bs, t) - j; n < bs {
				pad := slices.Clone(dims)
				pad[0], pad[1] = 1, bs-n
				piece = Concatenate([]*Node{piece, Zeros(g, ir.MakeShape(block.DType(), pad...))}, 1)
			}
			cache = DynamicUpdateSlice(cache, piece, []*Node{at(blk, i, j), zero, layer, zero, zero})
		}
	}
	return cache
}

// seqBlocks is the blocks s can need: its prompt plus max_tokens
// positions, capped by the context.
func (e *Engine) seqBlocks(s *seq) int {
	return blocksFor(min(len(s.req.Prompt)+s.max, e.m.maxContext), e.pool.size)
}

// sharedBlocks is the full blocks of s's prompt positions [0, n-1) that
// its other choices share (choices.go): the decode step rewrites n-1.
func (e *Engine) sharedBlocks(s *seq) int { return (len(s.req.Prompt) - 1) / e.pool.size }

// groupNeed is the blocks s and n-1 other choices of it need together.
func (e *Engine) groupNeed(s *seq, n int) int {
	return e.seqBlocks(s) + (n-1)*(e.seqBlocks(s)-e.sharedBlocks(s))
}

// checkBlocks refuses a request (with n choices) that needs more blocks
// than the whole pool: it could never be admitted.
func (e *Engine) checkBlocks(s *seq, n int) error {
	if e.pool == nil { // an Engine not made by NewEngine (tests)
		return nil
	}
	if need, have := e.groupNeed(s, n), e.pool.usable(); need > have {
		return &RequestError{Problem: fmt.Sprintf("a %d-token prompt with max_tokens %d (%d choice(s)) needs %d KV cache blocks of %d positions, the pool holds %d (raise KVCacheBytes or lower max_tokens)", len(s.req.Prompt), s.max, n, need, e.pool.size, have)}
	}
	return nil
}

// reserve gives s its block table, and the blocks of its other choices
// (groupBlocks): with the prefix cache and chunked prefill, first the
// cached blocks of its prompt's leading whole chunks, by reference. It
// returns the prompt positions reused, and false (taking nothing) when
// the pool lacks the blocks: s then waits.
func (e *Engine) reserve(s *seq, chunked bool) (reuse int, ok bool) {
	p := e.pool
	var hit []int32
	prefix := chunked && e.chunks != nil && e.chunks.prefix
	if prefix {
		prompt := s.req.Prompt
		hit = p.lookup(prompt[:len(prompt)-1], s.adapter)
		per := e.chunks.size / p.size // whole chunks only: the grid (chunked.go)
		hit = hit[:len(hit)-len(hit)%per]
	}
	need := e.groupNeed(s, 1+len(s.group))
	idle := 0
	for _, b := range hit {
		if p.ref[b] == 0 {
			idle++
		}
	}
	if p.available()-idle < need-len(hit) {
		return 0, false
	}
	if prefix {
		p.count(len(hit), len(s.req.Prompt)-1)
	}
	p.acquire(hit)
	own, _ := p.take(e.seqBlocks(s) - len(hit))
	s.blocks = append(hit, own...)
	s.groupBlocks, _ = p.take(need - e.seqBlocks(s))
	return len(hit) * p.size, true
}

// tableWidth is the block table width of a program over positions
// [0, n): the blocks that hold them.
func (e *Engine) tableWidth(n int) int { return blocksFor(n, e.pool.size) }
