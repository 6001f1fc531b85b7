package llm

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkDecodeStep times one decode program run at batch 1 and 16 on
// the checkpoint in $TENSORBRIDGE_LLM_BENCH_DIR, every row at position
// 144 (a 16-token prompt plus 128 new tokens), so the step's time can be
// split from the engine's scheduling.
func BenchmarkDecodeStep(b *testing.B) {
	dir := os.Getenv("TENSORBRIDGE_LLM_BENCH_DIR")
	if dir == "" {
		b.Skip("TENSORBRIDGE_LLM_BENCH_DIR not set")
	}
	be := testBackend(b)
	ctx := context.Background()
	m, err := Load(ctx, be, dir, LoadOptions{MaxContext: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("b%d", n), func(b *testing.B) {
			e, err := NewEngine(ctx, m, EngineOptions{MaxSequences: n, PrefillBuckets: []int{16}})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			rows := make([]row, n)
			for i := range rows {
				rows[i] = row{token: 5 + i, pos: 144, slot: i}
			}
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if _, _, err := e.runDecode(ctx, e.progs.exe(decodeProg(n, 256)), n, 256, rows, false); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/step")
		})
	}
}
