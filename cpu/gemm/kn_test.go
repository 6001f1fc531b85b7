package gemm

import (
	"math/rand/v2"
	"testing"

	"github.com/tensorbridge/tensorbridge/cpu/gemv"
)

// TestKNAgainstFloat64: products with a row-major B that the K×N path
// takes (useKN) match the float64 product within the rounding bound of
// the other paths, through Sgemm and SgemmWith, for row-major and
// strided A, on 1 and 3 threads, with shapes that end mid row block and
// mid column block and one that spans several column blocks of B
// (without the assembly K×N kernels, the purego build, the same products
// run on the other paths).
func TestKNAgainstFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	shapes := []struct{ m, n, k int }{{5, 10, 200}, {64, 196, 384}, {13, 49, 960}, {200, 300, 64}, {37, 700, 300}, {9, 3136, 144}, {32, 1000, 27}}
	for _, s := range shapes {
		for _, la := range []layout{rowMajor, colMajor} {
			for _, threads := range []int{1, 3} {
				p := newProblem(rng, s.m, s.n, s.k, la, rowMajor, false, threads)
				b := store(p.b, p.k, p.n, p.lb)
				if !useKN(p.m, p.n, p.k, b) && gemv.KNAccelerated() {
					t.Fatalf("%v: not taken by the K×N path", p)
				}
				for _, with := range []bool{false, true} {
					c := append([]float32(nil), p.c0...)
					var err error
					if with {
						err = SgemmWith(p.m, p.n, p.k, store(p.a, p.m, p.k, p.la), b, c, p.ldc, Options{}, threads)
					} else {
						err = Sgemm(p.m, p.n, p.k, store(p.a, p.m, p.k, p.la), b, c, p.ldc, false, threads)
					}
					if err != nil {
						t.Fatal(err)
					}
					p.check(t, "kn", c)
				}
			}
		}
	}
}
