package llm

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// TestContinuousBatching: 32 concurrent greedy streams of mixed prompt and
// output lengths, a quarter cancelled midway, on an engine of 8 slots:
// every stream gives the tokens it gives running alone (a cancelled one a
// prefix of them, ending "cancelled"); no program is compiled after
// warm-up; the device holds as many buffers after as before (counted on
// xla-cpu; the cpu backend cannot count). Injected fault: padding rows
// writing to slot 0 instead of the scratch slot makes streams differ.
func TestContinuousBatching(t *testing.T) {
	dir := filepath.Join(fixtureDir(t), "qwen2")
	b := testBackend(t)
	ctx := context.Background()
	m, err := Load(ctx, b, dir, LoadOptions{MaxContext: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 8, MinPrefill: 32, MaxQueue: 64, MinDecodeContext: 16}) // context buckets 16, 32, 64
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	compiles := e.compileCount()
	cache0 := b.CacheStats() // xla-cpu: every compile looks up the disk cache
	t.Logf("compile cache before the requests: %d hits, %d misses", cache0.Hits, cache0.Misses)
	live0, _, counts := b.LiveBuffers()

	rng := rand.New(rand.NewPCG(1, 2))
	const n = 32
	reqs := make([]Request, n)
	for i := range reqs {
		p := make([]int, 1+rng.IntN(30))
		for j := range p {
			p[j] = 3 + rng.IntN(m.Config.Vocab-3)
		}
		reqs[i] = Request{Prompt: p, MaxTokens: 1 + rng.IntN(30), IgnoreEOS: i%2 == 0}
	}
	alone := make([][]int, n)
	for i, r := range reqs {
		ch, err := e.Generate(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if alone[i], _, err = collect(ch); err != nil {
			t.Fatal(err)
		}
	}

	var wg sync.WaitGroup
	got := make([][]int, n)
	finish := make([]string, n)
	for i, r := range reqs {
		rctx, cancel := context.WithCancel(ctx)
		ch, err := e.Generate(rctx, r)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			cancelAt := -1
			if i%4 == 1 {
				cancelAt = len(alone[i]) / 2
			}
			for tk := range ch {
				if tk.ID >= 0 {
					got[i] = append(got[i], tk.ID)
					if len(got[i]) == cancelAt {
						cancel()
					}
				}
				if tk.Finish != "" {
					finish[i] = tk.Finish
				}
			}
		}()
	}
	wg.Wait()
	for i := range reqs {
		if i%4 == 1 && len(alone[i]) >= 2 {
			if finish[i] != "cancelled" && !slices.Equal(got[i], alone[i]) {
				t.Errorf("stream %d: cancelled, finished %q with %v", i, finish[i], got[i])
			}
			if len(got[i]) > len(alone[i]) || !slices.Equal(got[i], alone[i][:len(got[i])]) {
				t.Errorf("stream %d: %v is not a prefix of %v", i, got[i], alone[i])
			}
			continue
		}
		if !slices.Equal(got[i], alone[i]) {
			t.Errorf("stream %d: batched %v, alone %v", i, got[i], alone[i])
		}
	}
	if c := e.compileCount(); c != compiles {
		t.Errorf("%d programs compiled after warm-up", c-compiles)
	}
	if c := b.CacheStats(); c.Hits+c.Misses != cache0.Hits+cache0.Misses {
		t.Errorf("the backend compiled %d programs after warm-up", c.Hits+c.Misses-cache0.Hits-cache0.Misses)
	}
	if live, _, _ := b.LiveBuffers(); counts && live != live0 {
		t.Errorf("live device buffers: %d before, %d after", live0, live)
	}
}
