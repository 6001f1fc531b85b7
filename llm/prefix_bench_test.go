package llm

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkPrefixCache measures, on the checkpoint in
// $TENSORBRIDGE_LLM_BENCH_DIR (as BenchmarkGenerate) at a 1024-token
// context, issue 26's two targets for the prefix cache and chunked
// prefill (BENCHMARKS.md has the figures):
//
//   - ttft: time to first token of a 900-token prompt (new tokens every
//     iteration) and of a second request sharing those 900 tokens and
//     ending differently; ttft-ratio is the second over the first
//     (target <= 0.3). The checkpoint's context is 1024 positions, so the
//     issue's 1,000-token prefix is 900 here.
//   - interleave: 8 streams decode; the gaps between their tokens are
//     timed for 40 steps alone (steady), then while a 1000-token prompt
//     (the longest the context leaves room for) is prefilled; p99-ratio
//     is the p99 gap while it is prefilled over the p99 steady gap
//     (target <= 3). With chunked prefill its first token comes from the
//     next decode step, which it joins with its 1000-token context: the
//     gap of that step (the batch now attends to 1024 positions, a cost
//     of the decode step, not of the prefill) is join-gap-ms. chunk=0
//     runs the same with whole-prompt prefill, for comparison.
//   - cold: a fresh 900-token prompt's time to first token on an idle
//     engine with whole-prompt prefill, chunked prefill, and chunked
//     prefill with the prefix cache (a miss).
//
// TENSORBRIDGE_LLM_BENCH_CHUNK sets the chunk size (default 64).
func BenchmarkPrefixCache(b *testing.B) {
	dir := os.Getenv("TENSORBRIDGE_LLM_BENCH_DIR")
	if dir == "" {
		b.Skip("TENSORBRIDGE_LLM_BENCH_DIR not set")
	}
	chunk := 64
	if s := os.Getenv("TENSORBRIDGE_LLM_BENCH_CHUNK"); s != "" {
		var err error
		if chunk, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	be := testBackend(b)
	ctx := context.Background()
	m, err := Load(ctx, be, dir, LoadOptions{MaxContext: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prompt := func(n, seed int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 2 + (i*7919+seed*104729)%(m.Config.Vocab-2)
		}
		return p
	}
	b.Run("ttft", func(b *testing.B) {
		e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 2, PrefillBuckets: []int{16}, PrefillChunk: chunk, PrefixCache: true})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		for i := range b.N {
			shared := prompt(900, i+1)
			first := benchTTFT(b, e, append(slices.Clone(shared), 11, 12, 13))
			second := benchTTFT(b, e, append(slices.Clone(shared), 21, 22, 23, 24))
			b.ReportMetric(ms(first), "ttft1-ms")
			b.ReportMetric(ms(second), "ttft2-ms")
			b.ReportMetric(second.Seconds()/first.Seconds(), "ttft-ratio")
		}
	})
	// cold: a fresh 900-token prompt's TTFT on an idle engine, prefilled
	// whole (chunk=0), in chunks, and in chunks with the prefix cache on
	// (a miss): whether either can be on by default.
	for _, o := range []EngineOptions{{}, {PrefillChunk: chunk}, {PrefillChunk: chunk, PrefixCache: true}} {
		b.Run("cold/chunk="+strconv.Itoa(o.PrefillChunk)+"/prefix="+strconv.FormatBool(o.PrefixCache), func(b *testing.B) {
			o.MaxSequences, o.PrefillBuckets = 1, []int{16, 1024}
			e, err := NewEngine(ctx, m, o)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			for i := range b.N {
				b.ReportMetric(ms(benchTTFT(b, e, prompt(900, 500+i))), "ttft-ms")
			}
		})
	}
	for _, c := range []int{chunk, 0} {
		b.Run("interleave/chunk="+strconv.Itoa(c), func(b *testing.B) {
			o := EngineOptions{MaxSequences: 9, PrefillChunk: c, PrefillBuckets: []int{16, 1024}}
			e, err := NewEngine(ctx, m, o)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			for i := range b.N {
				steady, during, join := benchInterleave(b, e, prompt(1000, i+1), func(n int) []int { return prompt(16, 1000+n) })
				b.ReportMetric(ms(steady), "steady-p99-ms")
				b.ReportMetric(ms(during), "arrival-p99-ms")
				b.ReportMetric(during.Seconds()/steady.Seconds(), "p99-ratio")
				b.ReportMetric(ms(join), "join-gap-ms")
			}
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchTTFT is the time from Generate to p's first token.
func benchTTFT(b *testing.B, e *Engine, p []int) time.Duration {
	start := time.Now()
	return benchFirst(b, e, p).Sub(start)
}

// benchFirst generates one token after p and returns when it came.
func benchFirst(b *testing.B, e *Engine, p []int) time.Time {
	ch, err := e.Generate(context.Background(), Request{Prompt: p, MaxTokens: 1, IgnoreEOS: true})
	if err != nil {
		b.Fatal(err)
	}
	var at time.Time
	for tk := range ch {
		if at.IsZero() && tk.ID >= 0 {
			at = time.Now()
		}
		if tk.Err != nil {
			b.Fatal(tk.Err)
		}
	}
	return at
}

// benchInterleave runs 8 streams, records the gaps between their tokens,
// and returns the p99 gap of the 40 steps before long arrives and of the
// gaps that end after its arrival and began before its first token (the
// gap of a whole-prompt prefill's stall included), and the largest gap
// ending within 5 ms of its first token (the decode step it joins, with
// chunked prefill; none with whole-prompt prefill, whose first token
// comes from the prefill run).
func benchInterleave(b *testing.B, e *Engine, long []int, short func(int) []int) (steady, during, join time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type gap struct {
		at time.Time
		d  time.Duration
	}
	var mu sync.Mutex
	var gaps []gap
	var wg sync.WaitGroup
	firstTokens := make(chan struct{}, 8)
	for s := range 8 {
		ch, err := e.Generate(ctx, Request{Prompt: short(s), MaxTokens: 600, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last time.Time
			for tk := range ch {
				now := time.Now()
				if tk.ID < 0 {
					continue
				}
				if last.IsZero() {
					firstTokens <- struct{}{}
				} else {
					mu.Lock()
					gaps = append(gaps, gap{now, now.Sub(last)})
					mu.Unlock()
				}
				last = now
			}
		}()
	}
	for range 8 {
		<-firstTokens
	}
	time.Sleep(200 * time.Millisecond) // every stream decoding
	mark := func() int { mu.Lock(); defer mu.Unlock(); return len(gaps) }
	for start := mark(); mark()-start < 8*40; {
		time.Sleep(5 * time.Millisecond)
	}
	arrive := time.Now()
	first := benchFirst(b, e, long)
	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()
	var st, du []time.Duration
	for _, g := range gaps {
		switch {
		case g.at.Before(arrive):
			st = append(st, g.d)
		case g.at.Sub(first).Abs() <= 5*time.Millisecond: // the step it joins
			join = max(join, g.d)
		case g.at.Add(-g.d).Before(first.Add(-5 * time.Millisecond)): // began while it was prefilled
			du = append(du, g.d)
		}
	}
	return p99(st[max(0, len(st)-8*40):]), p99(du), join
}

// p99 is the 99th percentile (nearest rank) of ds.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[min(len(s)-1, (99*len(s)+99)/100-1)]
}
