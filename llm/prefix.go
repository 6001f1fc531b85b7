package llm

import (
	"slices"
	"sync/atomic"
)

// The prefix cache (EngineOptions.PrefixCache, with chunked prefill), on
// the paged KV cache (paged.go).
//
// When a sequence's prompt of n tokens is prefilled in chunks, the full
// blocks of its positions [0, n-1) (the chunks write them; the decode
// step writes position n-1) are offered to the cache, each keyed by the
// hash of its block chain: FNV-1a over the previous block's key, the
// adapter and this block's tokens. A later prompt under the same adapter
// looks its own chain up block by block and takes the cached blocks that
// match into its block table by reference (a reference count, no copy);
// a hit is checked on the block's tokens and adapter and on its parent
// being the block just matched (the parent's id and generation), so a
// hash collision never reuses wrong data. Shared blocks are full and only
// read: the new sequence's chunks and decode steps write past them, into
// its own blocks. When the last sequence referencing a cached block ends,
// the block stays cached, unreferenced, in LRU order; the pool evicts the
// least recently used of those when it needs blocks (blockPool.take), so
// the cache holds as many prefix blocks as KVCacheBytes leaves free.
//
// Why answers are bitwise those without the cache: reuse is rounded down
// to whole prefill chunks, so the reusing sequence's chunks stay on the
// grid [kS, (k+1)S) and every position's keys and values come from the
// same chunk program, at the same row, over the same reduction lengths,
// as in a run without the cache (chunked.go). The reads changed from a
// slice of a slot's row to a gather of the table's blocks into the same
// [ctx, Hkv, D] layout: data movement only, so the attention that
// consumes them computes on identical inputs with identical shapes. The
// writes changed from one DynamicUpdateSlice per slot row to one per
// block (prefill, chunks) or per row at a dynamic block index (decode).
// XLA may fuse the gather into the score and value dots' operand reads
// differently from the old slice, so the paged programs are not claimed
// bitwise equal to the old slot programs (both are checked against
// transformers' logits within tolerance); with and without the prefix
// cache the same paged programs run on the same values, and that is the
// equality the tests check bitwise.
//
// Compared with the donor-slot design this replaces (one whole slot of
// maxContext positions held per cached prefix, a copy program to share a
// running sequence's rows), the cache now holds as many prefixes as free
// blocks fit, running sequences share by reference, and a sequence
// reserves only the blocks its prompt and max_tokens can use.

// prefixCounters are the prefix cache's counters (read by PrefixStats
// from other goroutines).
type prefixCounters struct {
	lookups, hitBlocks, hitTokens, misses, evictions, queryTokens atomic.Int64
}

// chainHashes is the chain hashes of toks' full blocks of bs tokens
// (FNV-1a over the previous hash, the adapter and the block's tokens).
func chainHashes(toks []int, adapter, bs int) []uint64 {
	const prime = 1099511628211
	out := make([]uint64, 0, len(toks)/bs)
	h := uint64(14695981039346656037) ^ uint64(adapter)
	for b := 0; (b+1)*bs <= len(toks); b++ {
		for _, t := range toks[b*bs : (b+1)*bs] {
			h = (h ^ uint64(uint32(t))) * prime
		}
		out = append(out, h)
	}
	return out
}

// lookup returns the cached blocks holding toks' leading full blocks
// under adapter, in order (not yet referenced: acquire them).
func (p *blockPool) lookup(toks []int, adapter int) []int32 {
	var out []int32
	for i, h := range chainHashes(toks, adapter, p.size) {
		b, ok := p.hash[h]
		if !ok || !p.holds(b, i, out, toks, adapter) {
			break
		}
		out = append(out, b)
	}
	return out
}

// holds says whether cached block b is block i of toks under adapter,
// following the blocks matched so far.
func (p *blockPool) holds(b int32, i int, matched []int32, toks []int, adapter int) bool {
	m := &p.meta[b]
	if m.adapter != adapter || !slices.Equal(m.tokens, toks[i*p.size:(i+1)*p.size]) {
		return false
	}
	if i == 0 {
		return m.parent == -1
	}
	parent := matched[i-1]
	return m.parent == parent && m.parentGen == p.gen[parent]
}

// register offers the full blocks of toks, held by blocks (a sequence's
// table), to the cache under adapter. Blocks already cached (reused) are
// skipped; it stops at a block whose chain another block already holds
// (two prompts computed at once): that one stays private.
func (p *blockPool) register(blocks []int32, toks []int, adapter int) {
	for i, h := range chainHashes(toks, adapter, p.size) {
		if i >= len(blocks) {
			return
		}
		b := blocks[i]
		if p.meta[b].cached {
			continue
		}
		if _, dup := p.hash[h]; dup {
			return
		}
		m := blockMeta{cached: true, hash: h, adapter: adapter, tokens: slices.Clone(toks[i*p.size : (i+1)*p.size]), parent: -1}
		if i > 0 {
			m.parent, m.parentGen = blocks[i-1], p.gen[blocks[i-1]]
		}
		p.meta[b], p.hash[h] = m, b
	}
}

// count adds a lookup of queried prompt tokens that reused n blocks to
// the stats.
func (p *blockPool) count(n, queried int) {
	st := &p.stats
	st.lookups.Add(1)
	st.queryTokens.Add(int64(queried))
	if n == 0 {
		st.misses.Add(1)
	}
	st.hitBlocks.Add(int64(n))
	st.hitTokens.Add(int64(n * p.size))
}

// PrefixStats are the prefix cache's counters since start: prompts looked
// up, those that reused nothing, the blocks (of KVBlockSize positions)
// and tokens reused, the cached blocks evicted for new ones, and the
// prompt tokens looked up (all but each prompt's last: HitTokens over
// QueryTokens is the share of prompt tokens not computed again).
type PrefixStats struct {
	Lookups, Misses, HitBlocks, HitTokens, Evictions, QueryTokens int64
}

// PrefixStats returns the prefix cache's counters (zero without one).
func (e *Engine) PrefixStats() PrefixStats {
	if e.chunks == nil || !e.chunks.prefix || e.pool == nil {
		return PrefixStats{}
	}
	st := &e.pool.stats
	return PrefixStats{Lookups: st.lookups.Load(), Misses: st.misses.Load(), HitBlocks: st.hitBlocks.Load(), HitTokens: st.hitTokens.Load(), Evictions: st.evictions.Load(), QueryTokens: st.queryTokens.Load()}
}
