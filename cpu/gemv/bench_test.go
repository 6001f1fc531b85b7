package gemv

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchShapes are (M, N, K): LLM decode projections (768↔2048, a 32000-row
// vocabulary head), a 16-row decode batch and an MNIST-sized MLP layer.
var benchShapes = [][3]int{{1, 2048, 768}, {1, 768, 2048}, {1, 32000, 768}, {16, 2048, 768}, {1, 512, 784}}

// benchGEMV runs one shape per sub-benchmark, reporting weight bytes read
// as the throughput (b.SetBytes; GB/s as a metric too) and GFLOP/s.
func benchGEMV(b *testing.B, int8w bool) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, s := range benchShapes {
		M, N, K := s[0], s[1], s[2]
		x := make([]float32, M*K)
		for i := range x {
			x[i] = float32(rng.Float64()*2 - 1)
		}
		y := make([]float32, M*N)
		var wf []float32
		var wi []int8
		var scale []float32
		wBytes := int64(N * K)
		if int8w {
			wi = make([]int8, N*K)
			for i := range wi {
				wi[i] = int8(rng.IntN(256) - 128)
			}
			scale = make([]float32, N)
			for i := range scale {
				scale[i] = 0.01
			}
		} else {
			wf = make([]float32, N*K)
			for i := range wf {
				wf[i] = float32(rng.Float64()*2 - 1)
			}
			wBytes *= 4
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("M=%d/N=%d/K=%d/threads=%d", M, N, K, threads), func(b *testing.B) {
				b.SetBytes(wBytes)
				b.ReportAllocs()
				var err error
				for b.Loop() {
					if int8w {
						err = Int8(M, N, K, x, K, wi, K, scale, y, N, threads)
					} else {
						err = F32(M, N, K, x, K, wf, K, y, N, threads)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				sec := b.Elapsed().Seconds()
				b.ReportMetric(float64(wBytes)*float64(b.N)/sec/1e9, "GB/s")
				b.ReportMetric(2*float64(M*N*K)*float64(b.N)/sec/1e9, "GFLOP/s")
			})
		}
	}
}

func BenchmarkF32(b *testing.B)  { benchGEMV(b, false) }
func BenchmarkInt8(b *testing.B) { benchGEMV(b, true) }

// llamaLayer is one decoder layer's projections of the 100M-parameter
// Llama of BENCHMARKS.md (hidden 768, 4 KV heads of 64, MLP 2048), as
// (N, K): q, k, v, o, gate, up, down.
var llamaLayer = [][2]int{{768, 768}, {256, 768}, {256, 768}, {768, 768}, {2048, 768}, {2048, 768}, {768, 2048}}

// BenchmarkLlamaStep runs the products of one decode step of that model
// (12 layers and a float32 16000-row head) on M rows, each projection with
// its own weights (352 MB float32, 75 MB int8 plus the 49 MB head): unlike
// BenchmarkF32, whose weights stay in the caches between iterations, the
// weights stream from memory as in LLM decode, so this is the figure to
// tune the kernels and the thread split against. It reports ms/step.
func BenchmarkLlamaStep(b *testing.B) {
	const layers, vocab, hidden = 12, 16000, 768
	rng := rand.New(rand.NewPCG(13, 14))
	head := make([]float32, vocab*hidden)
	for i := range head {
		head[i] = float32(rng.Float64()*2 - 1)
	}
	for _, int8w := range []bool{false, true} {
		var wf [][]float32
		var wi [][]int8
		var scale []float32
		for range layers {
			for _, s := range llamaLayer {
				if int8w {
					w := make([]int8, s[0]*s[1])
					for i := range w {
						w[i] = int8(rng.IntN(255) - 127)
					}
					wi = append(wi, w)
				} else {
					w := make([]float32, s[0]*s[1])
					for i := range w {
						w[i] = float32(rng.Float64()*2 - 1)
					}
					wf = append(wf, w)
				}
			}
		}
		scale = make([]float32, 2048)
		for i := range scale {
			scale[i] = 0.01
		}
		for _, M := range []int{1, 16} {
			x := make([]float32, M*2048)
			for i := range x {
				x[i] = float32(rng.Float64()*2 - 1)
			}
			y := make([]float32, M*vocab)
			name := "f32"
			if int8w {
				name = "int8"
			}
			b.Run(fmt.Sprintf("%s/M=%d", name, M), func(b *testing.B) {
				for b.Loop() {
					for i := range layers * len(llamaLayer) {
						s := llamaLayer[i%len(llamaLayer)]
						var err error
						if int8w {
							err = Int8(M, s[0], s[1], x, s[1], wi[i], s[1], scale, y, s[0], 2)
						} else {
							err = F32(M, s[0], s[1], x, s[1], wf[i], s[1], y, s[0], 2)
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					if err := F32(M, vocab, hidden, x, hidden, head, hidden, y, vocab, 2); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/step")
			})
		}
	}
}
