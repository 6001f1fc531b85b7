package gemm

import (
	"fmt"
	"testing"
)

// benchShapes are the benchmarked m×n×k: squares, a BERT-base layer
// (128 tokens, 768 wide, 256 deep) and a single row against an MNIST-
// sized layer.
var benchShapes = []struct {
	name    string
	m, n, k int
}{
	{"64", 64, 64, 64}, {"256", 256, 256, 256}, {"512", 512, 512, 512}, {"1024", 1024, 1024, 1024},
	{"m128n768k256", 128, 768, 256}, {"m1n512k784", 1, 512, 784},
}

// BenchmarkSgemm reports GFLOP/s (2mnk per call) and allocations for each
// kernel, shape and thread count; operands row-major.
func BenchmarkSgemm(b *testing.B) {
	for _, kern := range availableKernels() {
		for _, s := range benchShapes {
			for _, threads := range []int{1, 2} {
				b.Run(fmt.Sprintf("%s/%s/threads=%d", kern.name, s.name, threads), func(b *testing.B) {
					A := Matrix{Data: make([]float32, s.m*s.k), RowStride: s.k, ColStride: 1}
					B := Matrix{Data: make([]float32, s.k*s.n), RowStride: s.n, ColStride: 1}
					for i := range A.Data {
						A.Data[i] = float32(i%7) - 3
					}
					for i := range B.Data {
						B.Data[i] = float32(i%5) - 2
					}
					c := make([]float32, s.m*s.n)
					b.ReportAllocs()
					for b.Loop() {
						if err := sgemm(kern, s.m, s.n, s.k, A, B, c, s.n, false, Options{}, threads); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkTile runs each kernel alone on one tile with kc = 256 and its
// slivers in L1: the micro-kernel's own GFLOP/s, the ceiling for
// BenchmarkSgemm.
func BenchmarkTile(b *testing.B) {
	for _, kern := range availableKernels() {
		b.Run(kern.name, func(b *testing.B) {
			const kc = 256
			a, bs := make([]float32, kc*kern.mr), make([]float32, kc*kern.nr)
			c := make([]float32, kern.mr*kern.nr)
			for b.Loop() {
				kern.tile(kc, a, bs, kern.nr, c, kern.nr, false)
			}
			b.ReportMetric(2*float64(kc*kern.mr*kern.nr)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
