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
