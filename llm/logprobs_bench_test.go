package llm

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLogprobsDecode: single-stream decode tokens/s with the top 20
// logprobs (TopLogprobs 20: the logprob variant of the decode program)
// against without, 64 new tokens from a 16-token prompt, on the tiny
// llama fixture and on the checkpoint in $TENSORBRIDGE_LLM_BENCH_DIR when
// set. The target: with/without ≥ 0.9. The logprob programs are
// compiled and run once before timing; the two kinds of run alternate, so
// that a change of load hits both.
//
// Measured on the shared 2-core machine at load 9-12 (so within wide
// noise), -benchtime 5x: llama-100m (vocabulary 32,000, the grouped top-k)
// 0.94 and 1.17 on cpu; the tiny llama (vocabulary 384) 0.40 to 0.95 on
// cpu and 0.68 on xla-cpu: its whole step is 0.2-0.4 ms, and the 20
// dependent argmax rounds add about 0.1 ms of per-op overhead.
func BenchmarkLogprobsDecode(b *testing.B) {
	dirs := map[string]string{"tiny-llama": filepath.Join(fixtureDir(b), "llama")}
	if d := os.Getenv("TENSORBRIDGE_LLM_BENCH_DIR"); d != "" {
		dirs["bench"] = d
	}
	for _, name := range []string{"tiny-llama", "bench"} {
		dir, ok := dirs[name]
		if !ok {
			continue
		}
		b.Run(name, func(b *testing.B) { benchLogprobs(b, dir) })
	}
}

func benchLogprobs(b *testing.B, dir string) {
	be := testBackend(b)
	ctx := context.Background()
	m, err := Load(ctx, be, dir, LoadOptions{MaxContext: 128})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: 1, PrefillBuckets: []int{16}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	prompt := make([]int, 16)
	for i := range prompt {
		prompt[i] = 2 + i
	}
	const n = 64
	decode := func(top int) time.Duration {
		start, ttft := time.Now(), time.Duration(0)
		ch, err := e.Generate(ctx, Request{Prompt: prompt, MaxTokens: n, IgnoreEOS: true, TopLogprobs: top})
		if err != nil {
			b.Fatal(err)
		}
		for tk := range ch {
			if tk.Err != nil {
				b.Fatal(tk.Err)
			}
			if ttft == 0 && tk.ID >= 0 {
				ttft = time.Since(start)
			}
		}
		return time.Since(start) - ttft
	}
	decode(MaxLogprobs) // compiles the logprob programs
	decode(0)
	b.ResetTimer()
	var plain, top time.Duration
	for range b.N {
		plain += decode(0)
		top += decode(MaxLogprobs)
	}
	b.ReportMetric(float64((n-1)*b.N)/plain.Seconds(), "tokens/s")
	b.ReportMetric(float64((n-1)*b.N)/top.Seconds(), "top20-tokens/s")
	b.ReportMetric(plain.Seconds()/top.Seconds(), "top20/plain")
}
