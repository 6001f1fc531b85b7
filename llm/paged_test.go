package llm

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// TestBlockPool: the pool's bookkeeping against hand-worked cases: free
// blocks go first, then cached unreferenced ones in LRU order (their
// hashes forgotten); a lookup matches only blocks whose tokens, adapter
// and parent are those asked (a forged hash entry whose tokens differ is
// not reused); references return to zero. Injected faults: `delete(p.hash,
// ...)` dropped from take makes "evicted block not found" fail; the token
// comparison in holds removed makes "hash collision" fail; release not
// decrementing makes "all back" fail.
func TestBlockPool(t *testing.T) {
	toks := []int{1, 2, 3, 4, 5, 6, 7, 8, 9} // blocks of 4: two full, then 9
	type check func(t *testing.T, p *blockPool)
	for _, tc := range []struct {
		name string
		run  check
	}{
		{"free first, null block never", func(t *testing.T, p *blockPool) {
			got, ok := p.take(5)
			if !ok || slices.Contains(got, nullBlock) || len(got) != 5 {
				t.Errorf("take(5) of 5 usable: %v %v", got, ok)
			}
			if _, ok := p.take(1); ok {
				t.Error("take(1) of an empty pool succeeded")
			}
		}},
		{"hit after register", func(t *testing.T, p *blockPool) {
			a, _ := p.take(3)
			p.register(a, toks[:8], 0)
			if got := p.lookup(toks, 0); !slices.Equal(got, a[:2]) {
				t.Errorf("lookup: got %v, want %v", got, a[:2])
			}
			if got := p.lookup(toks, 1); len(got) != 0 {
				t.Errorf("another adapter's lookup: got %v, want none", got)
			}
			if got := p.lookup([]int{1, 2, 3, 4, 0, 6, 7, 8}, 0); !slices.Equal(got, a[:1]) {
				t.Errorf("second block differs: got %v, want %v", got, a[:1])
			}
		}},
		{"hash collision", func(t *testing.T, p *blockPool) {
			a, _ := p.take(2)
			p.register(a, toks[:8], 0)
			other := []int{9, 9, 9, 9}
			p.hash[chainHashes(other, 0, 4)[0]] = a[0] // a forged entry: same key, other tokens
			if got := p.lookup(other, 0); len(got) != 0 {
				t.Errorf("collision reused %v", got)
			}
		}},
		{"evicted block not found", func(t *testing.T, p *blockPool) {
			a, _ := p.take(2)
			p.register(a, toks[:8], 0)
			p.release(a)
			if p.available() != 5 {
				t.Fatalf("available %d after release, want 5", p.available())
			}
			b, _ := p.take(4) // 3 free, then the LRU cached block a[0]
			if !slices.Contains(b, a[0]) || slices.Contains(b, a[1]) {
				t.Errorf("take(4) = %v: want the 3 free and %d (least recently used), not %d", b, a[0], a[1])
			}
			if got := p.lookup(toks, 0); len(got) != 0 {
				t.Errorf("lookup after eviction: got %v, want none (block %d now holds other data)", got, a[0])
			}
		}},
		{"all back", func(t *testing.T, p *blockPool) {
			a, _ := p.take(3)
			p.register(a, toks[:8], 0)
			hit := p.lookup(toks, 0)
			p.acquire(hit)
			p.release(a)
			p.release(hit)
			if msg := p.leaks(); msg != "" {
				t.Error(msg)
			}
			if p.lru.Len() != 2 || len(p.free) != 3 {
				t.Errorf("%d cached, %d free: want 2 and 3", p.lru.Len(), len(p.free))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newBlockPool(6, 4)) })
	}
}

// poolBytes is KVCacheBytes for a pool of n blocks of bs positions.
func poolBytes(m *Model, n, bs int) int64 {
	c := m.Config
	return int64(n*bs) * int64(2*c.Layers*c.KVHeads*c.HeadDim*m.dtype.Size())
}

// TestPagedPrefixBitwise: prompts that share a 40-token prefix whole,
// in part (mid-block, on a chunk boundary) or not at all give bitwise the
// ids and logprobs of an engine without the prefix cache, on a pool of 10
// blocks of 8 positions that forces the cache to evict (a 70-token
// unrelated prompt in between takes all 10 blocks), and the evicted prefix
// asked again is recomputed. Every block is back after all end, and the
// second engine reports evictions. Injected faults: take keeping the
// evicted block's hash entry (no `delete(p.hash, ...)`) makes the last
// prompts' answers differ (they read blocks overwritten by the unrelated
// prompt); release skipping its decrement fails the leak check; an
// off-by-one offset in blockOf (p%bs + 1) fails the comparison with
// transformers in TestAgainstTransformers and here.
func TestPagedPrefixBitwise(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, filepath.Join(root, "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	seqOf := func(n, seed int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 3 + (i*37+seed*11)%(m.Config.Vocab-3)
		}
		return p
	}
	base := seqOf(40, 0)
	with := func(n int, tail ...int) []int { return append(slices.Clone(base[:n]), tail...) }
	prompts := [][]int{base, with(40, 5), with(37, 5, 9, 11), with(16, 7, 7), seqOf(12, 3), seqOf(70, 5), base, with(33, 2)}
	run := func(prefix bool) ([]genOut, PrefixStats) {
		e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 2, MinPrefill: 4, MinDecodeContext: m.MaxContext(), PrefillChunk: 8, PrefixCache: prefix, KVCacheBytes: poolBytes(m, 1+10, 8)})
		if err != nil {
			t.Fatal(err)
		}
		outs := make([]genOut, len(prompts))
		for i, p := range prompts {
			ch, err := e.Generate(ctx, Request{Prompt: p, MaxTokens: 8, TopLogprobs: 3, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			if outs[i], err = collectOut(ch); err != nil {
				t.Fatal(err)
			}
		}
		st := e.PrefixStats()
		_ = e.Close() // the loop has ended: its bookkeeping is ours to read
		if msg := e.pool.leaks(); msg != "" {
			t.Errorf("prefix cache %v: %s", prefix, msg)
		}
		return outs, st
	}
	want, _ := run(false)
	got, st := run(true)
	t.Logf("%+v", st)
	if st.HitBlocks == 0 || st.Evictions == 0 {
		t.Errorf("the prefix cache reused or evicted nothing: %+v", st)
	}
	for i := range prompts {
		if !slices.Equal(got[i].ids, want[i].ids) || !slices.Equal(got[i].lps, want[i].lps) ||
			!slices.EqualFunc(got[i].top, want[i].top, slices.Equal) {
			t.Errorf("prompt %d: with the prefix cache %v %v, without %v %v", i, got[i].ids, got[i].lps, want[i].ids, want[i].lps)
		}
	}
}

// TestPagedSharedSystemPrompt: six requests at once sharing a 32-token
// system prompt (four blocks of 8) with different questions, on a pool
// that holds only three of them at a time (the others wait for blocks,
// never truncated), give the greedy ids of each prompt run alone without
// the prefix cache, reuse the system prompt's blocks, and return every
// block. Injected fault: reserve ignoring the pool's availability (ok
// always true) makes take hand out nil tables and the answers differ.
func TestPagedSharedSystemPrompt(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, filepath.Join(root, "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	sys := make([]int, 32)
	for i := range sys {
		sys[i] = 3 + (i*53)%(m.Config.Vocab-3)
	}
	prompts := make([][]int, 6)
	for i := range prompts {
		prompts[i] = append(slices.Clone(sys), 4+i, 9, 4+2*i)
	}
	const maxNew = 12 // 35+12 = 47 positions: 6 blocks each
	solo := make([][]int, len(prompts))
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 1, MinDecodeContext: m.MaxContext(), PrefillChunk: 8})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range prompts {
		ch, err := e.Generate(ctx, Request{Prompt: p, MaxTokens: maxNew, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		if solo[i], _, err = collect(ch); err != nil {
			t.Fatal(err)
		}
	}
	_ = e.Close()
	e, err = NewEngine(ctx, m, EngineOptions{MaxSequences: 6, MinDecodeContext: m.MaxContext(), PrefillChunk: 8, PrefixCache: true, KVCacheBytes: poolBytes(m, 1+3*6, 8)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	got := make([][]int, len(prompts))
	errs := make([]error, len(prompts))
	for i, p := range prompts {
		ch, err := e.Generate(ctx, Request{Prompt: p, MaxTokens: maxNew, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); got[i], _, errs[i] = collect(ch) }()
	}
	wg.Wait()
	st := e.PrefixStats()
	_ = e.Close()
	for i := range prompts {
		if errs[i] != nil || !slices.Equal(got[i], solo[i]) {
			t.Errorf("request %d: got %v (%v), alone without the cache %v", i, got[i], errs[i], solo[i])
		}
	}
	if st.HitBlocks == 0 {
		t.Errorf("the system prompt's blocks were never reused: %+v", st)
	}
	if msg := e.pool.leaks(); msg != "" {
		t.Error(msg)
	}
}

// TestPagedRequestTooBig: a request (or an n-choice request) that needs
// more blocks than the whole pool is refused by Generate with a
// *RequestError matching errs.ErrInvalidInput, while one that fits the
// pool runs. Injected fault: checkBlocks returning nil makes the big
// request wait forever in the queue (the test times out on it).
func TestPagedRequestTooBig(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, filepath.Join(root, "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 4, MinDecodeContext: 16, KVCacheBytes: poolBytes(m, 1+4, 16)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	p := make([]int, 20)
	for i := range p {
		p[i] = 3 + i
	}
	for _, tc := range []struct {
		name string
		max  int
		n    int
		ok   bool
	}{
		{"fits: 64 positions, 4 blocks", 44, 1, true},
		{"65 positions, 5 blocks", 45, 1, false},
		{"max_tokens 0: the whole context", 0, 1, false},
		{"two choices sharing one block: 4+3 blocks", 20, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Request{Prompt: p, MaxTokens: tc.max, IgnoreEOS: true}
			var err error
			if tc.n == 1 {
				var ch <-chan Token
				if ch, err = e.Generate(ctx, r); err == nil {
					_, _, err = collect(ch)
				}
			} else {
				_, err = e.GenerateN(ctx, r, tc.n)
			}
			var re *RequestError
			if tc.ok != (err == nil) || (!tc.ok && (!errors.As(err, &re) || !errors.Is(err, errs.ErrInvalidInput))) {
				t.Errorf("got %v, want ok %v (else a *RequestError matching errs.ErrInvalidInput)", err, tc.ok)
			}
		})
	}
}

// FuzzBlockPool drives the pool's bookkeeping with a random program of
// sequences taking blocks (through lookup, as reserve does), registering
// their prompts and ending, and checks after each operation that no
// reference is negative, that every usable block is either referenced,
// free or cached unreferenced (never two of these), and that a lookup
// only returns blocks holding the asked tokens. Seed corpus: a few
// programs; run with `go test ./llm -run XXX -fuzz FuzzBlockPool
// -fuzztime 30s`.
func FuzzBlockPool(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{9, 9, 9, 9, 200, 201, 9, 9, 9})
	f.Add([]byte{1, 130, 1, 130, 1, 130, 255, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		const bs = 2
		p := newBlockPool(9, bs)
		type live struct {
			blocks []int32
			toks   []int
		}
		var seqs []live
		for _, op := range prog {
			if op >= 128 && len(seqs) > 0 { // end a sequence
				i := int(op) % len(seqs)
				p.release(seqs[i].blocks)
				seqs = slices.Delete(seqs, i, i+1)
			} else { // a prompt of tokens from a 2-letter alphabet
				n := 1 + int(op%7)
				toks := make([]int, n)
				for j := range toks {
					toks[j] = int(op>>(j%4)) & 1
				}
				hit := p.lookup(toks, 0)
				for i, b := range hit {
					if !slices.Equal(p.meta[b].tokens, toks[i*bs:(i+1)*bs]) {
						t.Fatalf("lookup of %v returned block %d holding %v", toks, b, p.meta[b].tokens)
					}
				}
				need := blocksFor(n, bs)
				idle := 0
				for _, b := range hit {
					if p.ref[b] == 0 {
						idle++
					}
				}
				if p.available()-idle < need-len(hit) {
					continue
				}
				p.acquire(hit)
				own, ok := p.take(need - len(hit))
				if !ok {
					t.Fatalf("take(%d) failed with %d available", need-len(hit), p.available())
				}
				s := live{append(slices.Clone(hit), own...), toks}
				p.register(s.blocks, toks, 0)
				seqs = append(seqs, s)
			}
			checkPool(t, p)
		}
		for _, s := range seqs {
			p.release(s.blocks)
		}
		if msg := p.leaks(); msg != "" {
			t.Fatal(msg)
		}
	})
}

// checkPool checks the pool's invariants: each usable block is exactly
// one of referenced, free, cached unreferenced (in the LRU).
func checkPool(t *testing.T, p *blockPool) {
	t.Helper()
	state := make([]int, len(p.ref))
	for b, r := range p.ref {
		if r < 0 {
			t.Fatalf("block %d: reference count %d", b, r)
		}
		if r > 0 {
			state[b]++
		}
	}
	for _, b := range p.free {
		state[b]++
	}
	for e := p.lru.Front(); e != nil; e = e.Next() {
		state[e.Value.(int32)]++
	}
	for b := 1; b < len(state); b++ {
		if state[b] != 1 {
			t.Fatalf("block %d is in %d of referenced, free and cached (ref %d)", b, state[b], p.ref[b])
		}
	}
}
