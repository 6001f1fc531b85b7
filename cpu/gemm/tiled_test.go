package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// view lays out the rows×cols matrix m (row-major values) as a strided
// view: transposed or not, with padding between rows.
func tiledView(vals []float32, rows, cols int, transposed bool, pad int) Matrix {
	if !transposed {
		ld := cols + pad
		d := make([]float32, rows*ld)
		for i := range rows {
			copy(d[i*ld:], vals[i*cols:(i+1)*cols])
		}
		return Matrix{Data: d, RowStride: ld, ColStride: 1}
	}
	ld := rows + pad
	d := make([]float32, cols*ld)
	for i := range rows {
		for j := range cols {
			d[j*ld+i] = vals[i*cols+j]
		}
	}
	return Matrix{Data: d, RowStride: 1, ColStride: ld}
}

// TestTiledAgainstFloat64 (fault injected once: a packing tile one column
// short fails it) compares Sgemm with a float64 triple loop over
// shapes with edges, both operand layouts, accumulation and padded C. The
// error bound is relative to Σ|a·b| per element: float32 sums of k terms
// differ from the exact sum by at most about k·2⁻²⁴ of it; measured worst
// is in the log and the bound (4·2⁻²⁴·√k ... see tol) is within 10× of it.
func TestTiledAgainstFloat64(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{1, 2, 3, 5, 7, 13, 16, 17, 31, 33, 64, 100}
	worst := 0.0
	for _, m := range sizes {
		for _, n := range []int{1, 3, 16, 37, 129} {
			for _, k := range []int{1, 7, 16, 33, 300} {
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						for _, threads := range []int{1, 3} {
							worst = max(worst, checkTiled(t, rng, m, n, k, ta, tb, m%2 == 0, threads))
						}
					}
				}
			}
		}
	}
	t.Logf("worst error / (2^-24 * sum|a*b|): %.3g", worst)
}

// tiledTol bounds |C - exact| / (2⁻²⁴·Σ|a·b|): the worst measured is
// 2.55 (see the log), a sum of k float32 products in blocks.
const tiledTol = 8

func checkTiled(t *testing.T, rng *rand.Rand, m, n, k int, ta, tb, acc bool, threads int) float64 {
	t.Helper()
	a, b := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	for i := range b {
		b[i] = float32(rng.NormFloat64())
	}
	ldc := n + 3
	c := make([]float32, m*ldc)
	for i := range c {
		c[i] = float32(i % 5)
	}
	init := append([]float32(nil), c...)
	if err := tiledSgemm(m, n, k, tiledView(a, m, k, ta, 2), tiledView(b, k, n, tb, 1), c, ldc, acc, nil, threads); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i := range m {
		for j := range n {
			exact, mag := 0.0, 0.0
			for p := range k {
				exact += float64(a[i*k+p]) * float64(b[p*n+j])
				mag += math.Abs(float64(a[i*k+p]) * float64(b[p*n+j]))
			}
			if acc {
				exact += float64(init[i*ldc+j])
				mag += math.Abs(float64(init[i*ldc+j]))
			}
			e := math.Abs(float64(c[i*ldc+j])-exact) / (math.Ldexp(mag, -24) + 1e-30)
			if e > tiledTol {
				t.Fatalf("m=%d n=%d k=%d ta=%v tb=%v acc=%v: C[%d,%d] = %g, want %g (error %.3g units)", m, n, k, ta, tb, acc, i, j, c[i*ldc+j], exact, e)
			}
			worst = max(worst, e)
		}
		for j := n; j < ldc; j++ {
			if c[i*ldc+j] != init[i*ldc+j] {
				t.Fatalf("padding C[%d,%d] changed", i, j)
			}
		}
	}
	return worst
}

// BenchmarkTiled reports the dot-product path's GFLOP/s for square and model shapes, operand B
// row-major (packed per call) and transposed (read in place).
func BenchmarkTiled(b *testing.B) {
	for _, s := range [][3]int{{256, 256, 256}, {1024, 1024, 1024}, {128, 768, 256}, {128, 256, 1024}} {
		for _, threads := range []int{1, 2} {
			for _, tb := range []bool{false, true} {
				m, n, k := s[0], s[1], s[2]
				b.Run(fmt.Sprintf("%dx%dx%d/threads=%d/transposedB=%v", m, n, k, threads, tb), func(b *testing.B) {
					A := tiledView(make([]float32, m*k), m, k, false, 0)
					B := tiledView(make([]float32, k*n), k, n, tb, 0)
					c := make([]float32, m*n)
					b.ReportAllocs()
					for b.Loop() {
						if err := tiledSgemm(m, n, k, A, B, c, n, false, nil, threads); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(2*float64(m*n*k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
