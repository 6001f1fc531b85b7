package llm

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// BenchmarkGenerate measures the engine on the checkpoint in
// $TENSORBRIDGE_LLM_BENCH_DIR (scripts/bench-llm.py make DIR; BENCHMARKS.md
// has the commands and the figures): single-stream decode tokens/s over 128
// new tokens, time to first token for a 512-token prompt, aggregate
// tokens/s of 16 concurrent streams, and the share of a step spent outside
// the compiled program. TENSORBRIDGE_LLM_BENCH_QUANTIZE=int8 loads the
// projections as int8.
func BenchmarkGenerate(b *testing.B) {
	dir := os.Getenv("TENSORBRIDGE_LLM_BENCH_DIR")
	if dir == "" {
		b.Skip("TENSORBRIDGE_LLM_BENCH_DIR not set")
	}
	be := testBackend(b)
	ctx := context.Background()
	quant, err := ParseQuantization(os.Getenv("TENSORBRIDGE_LLM_BENCH_QUANTIZE")) // "int8": quant.go
	if err != nil {
		b.Fatal(err)
	}
	m, err := Load(ctx, be, dir, LoadOptions{MaxContext: 1024, Quantize: quant})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	prompt := func(n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = 2 + i%15000
		}
		return p
	}
	run := func(e *Engine, p []int, n int) (ttft, total time.Duration) {
		start := time.Now()
		ch, err := e.Generate(ctx, Request{Prompt: p, MaxTokens: n, IgnoreEOS: true})
		if err != nil {
			b.Fatal(err)
		}
		for tk := range ch {
			if ttft == 0 && tk.ID >= 0 {
				ttft = time.Since(start)
			}
			if tk.Err != nil {
				b.Fatal(tk.Err)
			}
		}
		return ttft, time.Since(start)
	}
	b.Run("single", func(b *testing.B) {
		e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 1, PrefillBuckets: []int{16, 512}})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		for range b.N {
			before := e.totals()
			ttft, total := run(e, prompt(16), 128)
			after := e.totals()
			decode := total - ttft
			b.ReportMetric(127/decode.Seconds(), "tokens/s")
			host := (after.Total - before.Total) - (after.InProgram - before.InProgram)
			b.ReportMetric(100*host.Seconds()/(after.Total-before.Total).Seconds(), "%host")
			ttft512, _ := run(e, prompt(512), 1)
			b.ReportMetric(float64(ttft512.Microseconds())/1000, "ttft512-ms")
			b.ReportMetric(float64(m.WeightBytes())/1e6, "weight-MB")
		}
	})
	b.Run("concurrent16", func(b *testing.B) {
		e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 16, PrefillBuckets: []int{16}})
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		for range b.N {
			start := time.Now()
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() { defer wg.Done(); run(e, prompt(16), 128) }()
			}
			wg.Wait()
			b.ReportMetric(16*128/time.Since(start).Seconds(), "tokens/s")
		}
	})
}
