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

// BenchmarkRowMajorB compares, on products with a row-major B (1×1
// convolutions' inputs, [K,N] weights), the K×N path that Sgemm now takes
// with the dot-product path (B transposed per call) and the packed path:
// the figures behind useKN (BENCHMARKS.md, issue 23, third stop).
//
//	go test ./cpu/gemm -run XXX -bench RowMajorB -benchtime 200x
func BenchmarkRowMajorB(b *testing.B) {
	shapes := []struct{ m, n, k int }{
		{64, 196, 384}, {96, 196, 576}, {160, 49, 960}, {960, 49, 160}, {1280, 49, 320}, // MobileNetV2 14×14, 7×7
		{24, 3136, 144}, {64, 3136, 256}, {128, 512, 128}, {16, 512, 128}, {32, 12544, 27},
	}
	for _, s := range shapes {
		A := Matrix{Data: make([]float32, s.m*s.k), RowStride: s.k, ColStride: 1}
		B := Matrix{Data: make([]float32, s.k*s.n), RowStride: s.n, ColStride: 1}
		c := make([]float32, s.m*s.n)
		paths := []struct {
			name string
			run  func() error
		}{
			{"kn", func() error { return knSgemm(s.m, s.n, s.k, A, B, c, s.n, nil, 1) }},
			{"dot", func() error { return tiledSgemm(s.m, s.n, s.k, A, B, c, s.n, false, nil, 1) }},
			{"packed", func() error { return sgemm(active, s.m, s.n, s.k, A, B, c, s.n, false, Options{}, 1) }},
		}
		for _, p := range paths {
			if p.name == "kn" && !useKN(s.m, s.n, s.k, B) {
				continue
			}
			b.Run(fmt.Sprintf("m%dn%dk%d/%s", s.m, s.n, s.k, p.name), func(b *testing.B) {
				for range b.N {
					if err := p.run(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(2*s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
