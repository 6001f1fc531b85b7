//go:build amd64 && !purego

package gemm

import (
	"testing"

	"golang.org/x/sys/cpu"
)

// BenchmarkPeakFMA measures the core's float32 multiply-add peak with loops
// of independent FMAs (24 chains on ZMM, 12 on YMM: more than latency ×
// pipes, 4 × 2 on current AMD and Intel cores) and its clock with a chain
// of dependent one-cycle adds. GFLOP/s = FMAs × lanes × 2 / time. It is
// the reference of BENCHMARKS.md's "share of peak" for `matmul`.
func BenchmarkPeakFMA(b *testing.B) {
	const iters = 1 << 16
	b.Run("clock", func(b *testing.B) {
		for b.Loop() {
			clockLoop(iters)
		}
		b.ReportMetric(32*iters*float64(b.N)/b.Elapsed().Seconds()/1e9, "GHz")
	})
	for _, c := range []struct {
		name          string
		fn            func(int)
		chains, lanes int
		ok            bool
	}{
		{"avx512", peakAVX512, 24, 16, cpu.X86.HasAVX512F},
		{"avx2", peakAVX2, 12, 8, cpu.X86.HasAVX2 && cpu.X86.HasFMA},
	} {
		b.Run(c.name, func(b *testing.B) {
			if !c.ok {
				b.Skip("not supported here")
			}
			for b.Loop() {
				c.fn(iters)
			}
			b.ReportMetric(float64(iters*c.chains*c.lanes*2)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
