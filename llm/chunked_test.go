package llm

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tensorbridge/tensorbridge/errs"
)

// TestChunkedAgainstTransformers: prompts prefilled in chunks of at most
// 4 positions (the 5- to 17-token reference prompts take 1
// to 5 chunks), every prompt at once so chunks interleave with the other
// sequences' decode steps, give exactly transformers' greedy ids; with
// the prefix cache on (blocks of 4 too), each prompt is then asked again,
// reusing its own cached blocks and, twice at once, a running
// sequence's (shared), and must give the same ids.
func TestChunkedAgainstTransformers(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	for _, name := range fixtureModels {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(root, name)
			ref := readReference(t, dir)
			m, err := Load(ctx, b, dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			for _, prefix := range []bool{false, true} {
				e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 6, MinPrefill: 2, MinDecodeContext: 16, PrefillChunk: 4, PrefixCache: prefix})
				if err != nil {
					t.Fatal(err)
				}
				rounds := [][]int{{0, 1, 2, 3, 4}}
				if prefix {
					rounds = append(rounds, []int{0, 1, 2, 3, 4}, []int{0, 0, 3, 3})
				}
				for _, round := range rounds {
					chans := make([]<-chan Token, len(round))
					for i, k := range round {
						r := ref.References[k]
						if chans[i], err = e.Generate(ctx, Request{Prompt: r.PromptIDs, MaxTokens: len(r.TokenIDs)}); err != nil {
							t.Fatal(err)
						}
					}
					for i, k := range round {
						r := ref.References[k]
						got, finish, err := collect(chans[i])
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(got, r.TokenIDs) {
							t.Errorf("prefix cache %v, prompt %d (%q): got %v, transformers %v (finish %s)", prefix, k, r.Text, got, r.TokenIDs, finish)
						}
					}
				}
				st := e.PrefixStats()
				t.Logf("prefix cache %v: %+v", prefix, st)
				if prefix && st.HitBlocks == 0 {
					t.Errorf("prefix cache on: no block reused (%+v)", st)
				}
				_ = e.Close()
			}
		})
	}
}

// genOut is a generation's ids and logprobs (each token's and its top 5).
type genOut struct {
	ids []int
	lps []float32
	top [][]TopLogprob
}

func collectOut(ch <-chan Token) (genOut, error) {
	var o genOut
	var err error
	for tk := range ch {
		if tk.ID >= 0 {
			o.ids, o.lps, o.top = append(o.ids, tk.ID), append(o.lps, tk.Logprob), append(o.top, tk.Top)
		}
		if tk.Finish != "" {
			err = tk.Err
		}
	}
	return o, err
}

// TestPrefixCacheBitwise: requests sharing prefixes of a 40-token prompt
// (the whole of it, 37 tokens: a prefix ending mid-block, 16 tokens:
// exactly two blocks, 3 tokens: less than a block) give bitwise the ids
// and logprobs (each token's and its top 5) of an engine without the
// prefix cache: asked one after another (cached unreferenced blocks
// taken), and one after another beside a long generation of the
// 40-token prompt (its blocks shared by reference while it runs). The second mode keeps the decode
// batch at 2 rows and one context bucket in both engines, so that only
// the cache differs between them.
func TestPrefixCacheBitwise(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, filepath.Join(root, "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	base := make([]int, 40)
	for i := range base {
		base[i] = 3 + (i*37)%(m.Config.Vocab-3)
	}
	with := func(n int, tail ...int) []int { return append(slices.Clone(base[:n]), tail...) }
	prompts := [][]int{with(3, 8, 8), with(37, 5, 9, 11), base, with(16, 7), with(39)}
	run := func(prefix, donor bool) ([]genOut, PrefixStats) {
		e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 2, MinPrefill: 4, MinDecodeContext: m.MaxContext(), PrefillChunk: 8, PrefixCache: prefix})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if donor { // runs beside every request below
			bg, err := e.Generate(ctx, Request{Prompt: base, MaxTokens: 80, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			<-bg // its first token: its prompt's blocks are registered
			defer func() {
				if _, err := collectOut(bg); err != nil {
					t.Error(err)
				}
			}()
		}
		outs := make([]genOut, len(prompts))
		for i, p := range prompts {
			ch, err := e.Generate(ctx, Request{Prompt: p, MaxTokens: 8, TopLogprobs: 5, IgnoreEOS: true})
			if err != nil {
				t.Fatal(err)
			}
			if outs[i], err = collectOut(ch); err != nil {
				t.Fatal(err)
			}
		}
		return outs, e.PrefixStats()
	}
	for _, donor := range []bool{false, true} {
		want, _ := run(false, donor)
		got, st := run(true, donor)
		t.Logf("running donor %v: %+v", donor, st)
		if st.HitBlocks == 0 {
			t.Errorf("running donor %v: the prefix cache reused too little (%+v)", donor, st)
		}
		for i := range prompts {
			if !slices.Equal(got[i].ids, want[i].ids) || !slices.Equal(got[i].lps, want[i].lps) ||
				!slices.EqualFunc(got[i].top, want[i].top, slices.Equal) {
				t.Errorf("running donor %v, prompt %d: with the prefix cache %v %v, without %v %v", donor, i, got[i].ids, got[i].lps, want[i].ids, want[i].lps)
			}
		}
	}
}

// TestChunkedLongPrompt: with chunking, a prompt longer than every
// prefill bucket is taken, and its first greedy token is the argmax of
// the whole-prompt logits (PromptLogits, checked against transformers by
// TestAgainstTransformers).
func TestChunkedLongPrompt(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, filepath.Join(root, "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// Chunks of 24: 126 tokens in a 128-token context: the last chunk,
	// [120, 144), passes the context's end (into the null block).
	for _, n := range []int{1, 2, 50, 126} {
		p := make([]int, n)
		for i := range p {
			p[i] = 3 + (i*101)%(m.Config.Vocab-3)
		}
		lg, err := m.PromptLogits(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		v := m.Config.Vocab
		last := lg[(n-1)*v : n*v]
		want := 0
		for j, x := range last {
			if x > last[want] {
				want = j
			}
		}
		e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 2, PrefillBuckets: []int{16}, MinDecodeContext: 16, PrefillChunk: 24})
		if err != nil {
			t.Fatal(err)
		}
		ch, err := e.Generate(ctx, Request{Prompt: p, MaxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := collect(ch)
		_ = e.Close()
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%d-token prompt: got %v (%v), want [%d]", n, got, err, want)
		}
	}
}

// TestChunkOptions: bad chunking options are refused with
// errs.ErrInvalidInput.
func TestChunkOptions(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, filepath.Join(root, "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, tc := range []struct {
		name string
		o    EngineOptions
	}{
		{"prefix cache without chunks", EngineOptions{PrefixCache: true}},
		{"negative chunk", EngineOptions{PrefillChunk: -2}},
		{"chunk as long as the context", EngineOptions{PrefillChunk: m.MaxContext()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.MaxSequences = 1
			e, err := NewEngine(ctx, m, tc.o)
			if err == nil {
				_ = e.Close()
			}
			if !errors.Is(err, errs.ErrInvalidInput) {
				t.Errorf("got %v, want errs.ErrInvalidInput", err)
			}
		})
	}
}

// TestDefaultPrefillChunk: serve's default chunk size per context length
// (64 below the context, else 32 or 16, else whole prompts), and an engine
// given AutoPrefillChunk chunks by it with the prefix cache on, or, where
// the context is too short to chunk, prefills whole with the cache off.
func TestDefaultPrefillChunk(t *testing.T) {
	for _, tc := range []struct{ ctx, want int }{
		{4096, 64}, {128, 64}, {65, 64}, {64, 32}, {33, 32}, {32, 16}, {17, 16}, {16, 0}, {1, 0},
	} {
		if got := DefaultPrefillChunk(tc.ctx); got != tc.want {
			t.Errorf("DefaultPrefillChunk(%d) = %d, want %d", tc.ctx, got, tc.want)
		}
	}
	b := testBackend(t)
	ctx := context.Background()
	for _, mc := range []int{128, 16} {
		m, err := Load(ctx, b, filepath.Join(fixtureDir(t), "llama"), LoadOptions{MaxContext: mc})
		if err != nil {
			t.Fatal(err)
		}
		e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 1, PrefillChunk: AutoPrefillChunk, PrefixCache: true})
		if err != nil {
			m.Close()
			t.Fatalf("context %d: %v", mc, err)
		}
		size, prefix := 0, false
		if e.chunks != nil {
			size, prefix = e.chunks.size, e.chunks.prefix
		}
		want := DefaultPrefillChunk(mc)
		if size != want || prefix != (want > 0) {
			t.Errorf("context %d: chunks of %d, prefix cache %v; want %d, %v", mc, size, prefix, want, want > 0)
		}
		_ = e.Close()
		m.Close()
	}
}

// TestChunkPlan: the chunk plan against hand-computed cases (chunks of
// 16): the grid never moves, a chunk past the context's end included.
func TestChunkPlan(t *testing.T) {
	c := &chunker{size: 16}
	for _, tc := range []struct{ p, end, next int }{
		{0, 40, 16},  // a whole chunk
		{32, 40, 40}, // the rest, padded
		{48, 56, 56},
		{64, 70, 70}, // [64, 80) passes a 72-token context: the null block takes 72..79
	} {
		if next := c.plan(tc.p, tc.end); next != tc.next {
			t.Errorf("plan(%d, %d): got %d, want %d", tc.p, tc.end, next, tc.next)
		}
	}
}

// TestChunkedLongPromptWholePath: a prompt longer than every prefill
// bucket, let through by Generate because chunking is on, ends with an
// errs.ErrInvalidInput error when it must be prefilled whole (n choices),
// instead of being cut to the bucket. Injected fault: fitsPrefill always
// nil makes the prompt run truncated and finish "length" without error.
func TestChunkedLongPromptWholePath(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, filepath.Join(root, "llama"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 2, PrefillBuckets: []int{16}, MinDecodeContext: 16, PrefillChunk: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	chans, err := e.GenerateN(ctx, Request{Prompt: make([]int, 40), MaxTokens: 2}, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		_, finish, err := collect(ch)
		if finish != "error" || !errors.Is(err, errs.ErrInvalidInput) {
			t.Errorf("choice %d: finish %q, err %v; want error matching errs.ErrInvalidInput", i, finish, err)
		}
	}
}

// TestPrefixCacheForgetsForeignSlots: an n-choice request (prefilled
// whole, its blocks never cached) takes every free block and slot after a
// chunked prompt's blocks were cached, so it may take and overwrite them
// (paged.go: take evicts the least recently used); that prompt, asked
// again, must not reuse overwritten blocks and still gives transformers'
// greedy ids. Injected fault: take keeping an evicted block's hash entry
// and metadata (paged_test.go's TestPagedPrefixBitwise says what fails).
func TestPrefixCacheForgetsForeignSlots(t *testing.T) {
	root := fixtureDir(t)
	b := testBackend(t)
	ctx := context.Background()
	dir := filepath.Join(root, "llama")
	ref := readReference(t, dir)
	m, err := Load(ctx, b, dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 2, MinPrefill: 16, MinDecodeContext: 16, PrefillChunk: 4, PrefixCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	a := ref.References[4] // 17 tokens: 4 blocks of 4
	generate := func() {
		ch, err := e.Generate(ctx, Request{Prompt: a.PromptIDs, MaxTokens: len(a.TokenIDs)})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := collect(ch)
		if err != nil || !slices.Equal(got, a.TokenIDs) {
			t.Errorf("got %v (%v), transformers %v (stats %+v)", got, err, a.TokenIDs, e.PrefixStats())
		}
	}
	generate() // its slot becomes a donor
	other := slices.Clone(ref.References[1].PromptIDs)
	chans, err := e.GenerateN(ctx, Request{Prompt: other, MaxTokens: 40}, 2) // takes both slots
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		if _, _, err := collect(ch); err != nil {
			t.Fatal(err)
		}
	}
	generate()
}
