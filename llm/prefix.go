package llm

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // graph-building code reads as math
	"github.com/tensorbridge/tensorbridge"
	"github.com/tensorbridge/tensorbridge/ir"
)

// The prefix cache (EngineOptions.PrefixCache, with chunked prefill).
//
// Design: slots as prefix donors, not paging. The KV cache keeps its
// layout, one row of maxContext positions per slot. When a sequence's
// prompt is prefilled, the slot records the prompt's leading full blocks
// of PrefillChunk tokens, the chunk grid (all but its last token, which the decode step
// writes), each keyed by the hash of the block chain: the hash of the
// previous block's key, the adapter and this block's tokens. A finished
// sequence's slot goes back to the free list still holding them: it is a
// donor, unreferenced. A new prompt looks for the slot whose chain matches
// its own longest (tokens compared too, so a hash collision never reuses
// the wrong rows) and resumes chunked prefill after the matched blocks:
//
//   - a free donor is taken over as the new sequence's slot: its rows are
//     already in place, nothing is copied;
//   - a donor still running (requests sharing a system prompt at the same
//     time) has its rows [0, matched) copied into the new slot by one
//     program run (one per context bucket, compiled at start);
//   - with no match, the new sequence takes an empty free slot, else the
//     least recently used donor, whose blocks are forgotten (LRU eviction
//     of unreferenced blocks, within the slots KVCacheBytes holds).
//
// Trade-off against a paged cache (block tables, attention gathering
// blocks; vLLM's PagedAttention, https://arxiv.org/abs/2309.06180): a
// donor keeps a whole slot of maxContext positions for however short a
// prefix, so the cache holds as many prefixes as free slots, not as many
// as blocks fit; sharing with a running sequence costs a copy of the
// rows instead of a reference; and each sequence still reserves a whole
// context. In exchange the decode and prefill programs keep their
// contiguous reads (no gather through a block table per step), nothing
// changes for the running path, and reuse is exact: the rows reused are
// the ones a run without the cache would compute (chunked.go says why),
// so answers are bitwise the same.

// prefixCache is the donors' bookkeeping, owned by the engine's loop
// (the counters are read by PrefixStats from other goroutines).
type prefixCache struct {
	block int
	slots []slotPrefix
	clock int64
	stats struct{ lookups, hitBlocks, hitTokens, misses, copies atomic.Int64 }
}

// slotPrefix is what a slot's rows hold: the tokens of its leading blocks
// (a multiple of block), their chain hashes, under adapter.
type slotPrefix struct {
	tokens  []int
	hashes  []uint64
	adapter int
	busy    bool
	lastUse int64
}

func newPrefixCache(block, slots int) *prefixCache {
	return &prefixCache{block: block, slots: make([]slotPrefix, slots)}
}

// chain is the chain hashes of toks' full blocks (FNV-1a over the
// previous hash, the adapter and the block's tokens).
func (pc *prefixCache) chain(toks []int, adapter int) []uint64 {
	const prime = 1099511628211
	out := make([]uint64, 0, len(toks)/pc.block)
	h := uint64(14695981039346656037) ^ uint64(adapter)
	for b := 0; (b+1)*pc.block <= len(toks); b++ {
		for _, t := range toks[b*pc.block : (b+1)*pc.block] {
			h = (h ^ uint64(uint32(t))) * prime
		}
		out = append(out, h)
	}
	return out
}

// match is how many leading blocks of the chain hs (of toks) slot i holds.
func (pc *prefixCache) match(i int, hs []uint64, toks []int, adapter int) int {
	sp := &pc.slots[i]
	if sp.adapter != adapter {
		return 0
	}
	n := 0
	for n < len(hs) && n < len(sp.hashes) && hs[n] == sp.hashes[n] {
		n++
	}
	// A hash match is checked on the tokens: a collision shortens it.
	for n > 0 && !slices.Equal(sp.tokens[:n*pc.block], toks[:n*pc.block]) {
		n--
	}
	return n
}

// takeSlot chooses s's slot from free: the best donor of its prompt when
// free, else an empty or least recently used free slot. It returns the
// slot, the busy donor to copy from (-1: none) and the prompt positions
// reused (all the prompt's but its last at most), and the free list.
func (e *Engine) takeSlot(s *seq, free []int) (slot, src, reuse int, rest []int) {
	pc := e.chunks.prefix
	if pc == nil {
		slot, free = free[len(free)-1], free[:len(free)-1]
		return slot, -1, 0, free
	}
	prompt := s.req.Prompt
	toks := prompt[:len(prompt)-1]
	hs := pc.chain(toks, s.adapter)
	best, bestN := -1, 0
	for i := range pc.slots {
		if !pc.slots[i].busy && !slices.Contains(free, i) {
			continue // handed out by other code (slotFreed): rows unknown
		}
		n := pc.match(i, hs, toks, s.adapter)
		if n > bestN || (n == bestN && n > 0 && !pc.slots[i].busy) {
			best, bestN = i, n
		}
	}
	if bestN > 0 && pc.slots[best].busy && e.scatter {
		bestN = 0 // no copy program without DynamicUpdateSlice
	}
	pc.count(bestN)
	if bestN > 0 && !pc.slots[best].busy {
		free = slices.DeleteFunc(free, func(i int) bool { return i == best })
		pc.keep(best, bestN)
		return best, -1, bestN * pc.block, free
	}
	slot, free = pc.evict(free)
	if bestN == 0 {
		return slot, -1, 0, free
	}
	pc.slots[slot] = slotPrefix{tokens: slices.Clone(toks[:bestN*pc.block]), hashes: slices.Clone(hs[:bestN]), adapter: s.adapter, busy: true}
	pc.stats.copies.Add(1)
	return slot, best, bestN * pc.block, free
}

// count adds a lookup that reused n blocks to the stats.
func (pc *prefixCache) count(n int) {
	pc.stats.lookups.Add(1)
	if n == 0 {
		pc.stats.misses.Add(1)
	}
	pc.stats.hitBlocks.Add(int64(n))
	pc.stats.hitTokens.Add(int64(n * pc.block))
}

// keep marks slot busy, holding only its first n blocks (the rest of its
// rows will be overwritten).
func (pc *prefixCache) keep(slot, n int) {
	sp := &pc.slots[slot]
	sp.tokens, sp.hashes, sp.busy = sp.tokens[:n*pc.block], sp.hashes[:n], true
}

// evict takes from free an empty slot, else the least recently used
// donor, forgetting what it held.
func (pc *prefixCache) evict(free []int) (int, []int) {
	at := len(free) - 1
	for i := len(free) - 1; i >= 0; i-- {
		sp, cur := &pc.slots[free[i]], &pc.slots[free[at]]
		if len(sp.hashes) == 0 {
			at = i
			break
		}
		if len(cur.hashes) > 0 && sp.lastUse < cur.lastUse {
			at = i
		}
	}
	slot := free[at]
	pc.slots[slot] = slotPrefix{busy: true}
	return slot, slices.Delete(free, at, at+1)
}

// popSlot takes a slot for a sequence prefilled as a whole (its rows are
// not offered to the cache).
func (e *Engine) popSlot(free []int) (int, []int) {
	if e.chunks == nil || e.chunks.prefix == nil {
		return free[len(free)-1], free[:len(free)-1]
	}
	return e.chunks.prefix.evict(free)
}

// register records that slot holds toks' full blocks under adapter.
func (pc *prefixCache) register(slot, adapter int, toks []int) {
	if pc == nil {
		return
	}
	hs := pc.chain(toks, adapter)
	sp := &pc.slots[slot]
	sp.tokens, sp.hashes, sp.adapter = slices.Clone(toks[:len(hs)*pc.block]), hs, adapter
}

// freed marks slot unreferenced, most recently used.
func (pc *prefixCache) freed(slot int) {
	if pc == nil || slot >= len(pc.slots) {
		return
	}
	pc.clock++
	pc.slots[slot].busy, pc.slots[slot].lastUse = false, pc.clock
}

// forget drops what slot holds.
func (pc *prefixCache) forget(slot int) {
	if pc != nil && slot < len(pc.slots) {
		pc.slots[slot] = slotPrefix{busy: pc.slots[slot].busy}
	}
}

// forgetAll drops every slot's blocks (the cache was lost).
func (pc *prefixCache) forgetAll() {
	if pc == nil {
		return
	}
	for i := range pc.slots {
		pc.forget(i)
	}
}

// slotFreed is the loop's hook when a sequence releases its slot. A slot
// the prefix cache did not hand out (an n-choice follower's, choices.go)
// holds rows it does not know: it is forgotten.
func (e *Engine) slotFreed(slot int) {
	if e.chunks == nil || e.chunks.prefix == nil || slot >= e.slots {
		return
	}
	pc := e.chunks.prefix
	if !pc.slots[slot].busy {
		pc.forget(slot)
	}
	pc.freed(slot)
}

// PrefixStats are the prefix cache's counters since start: prompts looked
// up, those that reused nothing, the blocks and tokens reused, and the
// reuses that copied a running donor's rows.
type PrefixStats struct {
	Lookups, Misses, HitBlocks, HitTokens, Copies int64
}

// PrefixStats returns the prefix cache's counters (zero without one).
func (e *Engine) PrefixStats() PrefixStats {
	if e.chunks == nil || e.chunks.prefix == nil {
		return PrefixStats{}
	}
	st := &e.chunks.prefix.stats
	return PrefixStats{Lookups: st.lookups.Load(), Misses: st.misses.Load(), HitBlocks: st.hitBlocks.Load(), HitTokens: st.hitTokens.Load(), Copies: st.copies.Load()}
}

// compileCopy compiles the copy of cache rows [0, c) of slot src [1] into
// slot dst [1], K and V; its other inputs (weights, sampling) are unused,
// taken so that it runs through runStep like the other programs.
func (e *Engine) compileCopy(ctx context.Context, c int) (*tensorbridge.Executable, error) {
	nw := numWeightParams(e.m.Config)
	shapes := append(e.m.weightShapes(), e.cacheShape, e.cacheShape, ir.MakeShape(ir.Int32, 1), ir.MakeShape(ir.Int32, 1))
	shapes = append(shapes, sampleShapes(1)[:numPlainSampleInputs]...)
	dims := slices.Clone(e.cacheShape.Dimensions)
	dims[0], dims[1] = 1, c
	return e.compile(ctx, fmt.Sprintf("llm-prefix-copy-%d", c), cacheDonation(nw), 0, func(g *ir.Graph, in []*ir.Node) ([]*ir.Node, error) {
		zero := ConstAsDType(g, ir.Int32, 0)
		src, dst := Reshape(in[nw+2]), Reshape(in[nw+3])
		cp := func(x *Node) *Node {
			rows := DynamicSlice(x, []*Node{src, zero, zero, zero, zero}, dims)
			return DynamicUpdateSlice(x, rows, []*Node{dst, zero, zero, zero, zero})
		}
		return []*ir.Node{Zeros(g, ir.MakeShape(ir.Int32, 1)), Zeros(g, ir.MakeShape(ir.Float32, 1)), cp(in[nw]), cp(in[nw+1])}, nil
	}, shapes...)
}

// warmCopies compiles the copy programs (one per context bucket) when the
// prefix cache can copy, and runs each once from and to the scratch slot.
func (e *Engine) warmCopies(ctx context.Context) error {
	if e.chunks.prefix == nil || e.scatter {
		return nil
	}
	for _, c := range e.cBuckets {
		exe, err := e.compileCopy(ctx, c)
		if err != nil {
			return err
		}
		e.chunks.copies[c] = exe
		if err := e.runCopy(ctx, exe, e.slots, e.slots); err != nil {
			return fmt.Errorf("llm: warming prefix copy %d: %w", c, err)
		}
	}
	return nil
}

// copyPrefix copies slot src's rows [0, n) (rounded up to a context
// bucket: the rows past n are overwritten before they are read) to dst.
func (e *Engine) copyPrefix(ctx context.Context, src, dst, n int) error {
	return e.runCopy(ctx, e.chunks.copies[e.contextBucket(n-1)], src, dst)
}

func (e *Engine) runCopy(ctx context.Context, exe *tensorbridge.Executable, src, dst int) error {
	s, err := int32Tensor([]int{1}, []int{src})
	if err != nil {
		return err
	}
	d, err := int32Tensor([]int{1}, []int{dst})
	if err != nil {
		freeAll([]*ir.Tensor{s})
		return err
	}
	_, err = e.runStep(ctx, exe, []*ir.Tensor{s, d}, []row{{}}, 1, false)
	return err
}
