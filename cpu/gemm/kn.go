package gemm

import (
	"sync"

	"github.com/tensorbridge/tensorbridge/cpu/gemv"
	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// The row-major-B path: C = A·B with B's rows contiguous (a convolution's
// input read in place, a weight stored [K×N]) on gemv's K×N kernels, a
// few rows of A at a time against the rows of B, so that B is neither
// transposed (the dot-product path) nor packed (the packed path). Measured
// on one AVX-512 thread (BenchmarkRowMajorB; BENCHMARKS.md, issue 23): MobileNetV2's 1×1
// products at 14×14 and 7×7 183-194 GFLOP/s against 116-176 transposed
// and 156-181 packed; ResNet-50's and encoder-sized ones 174-245 against
// 64-218; the large cubes and the shallow ones (k < 64) stay faster
// packed, but for few rows of A against a wide B (an image's first
// layer, m = 32, n = 12544, k = 27: 168 against 142 GFLOP/s).

// useKN reports whether the row-major-B path takes an m×n×k product.
func useKN(m, n, k int, b Matrix) bool {
	if b.ColStride != 1 || (k > 1 && b.RowStride < n) || !gemv.KNAccelerated() {
		return false
	}
	return (k >= 128 && (m < 512 || n < 512 || k < 256)) || (k >= 64 && n < 512) || (m <= 32 && n >= 512)
}

// knSgemm is Sgemm (not accumulated) on the row-major-B path, its
// operands validated, with the epilogue post (nil: none) on each tile.
func knSgemm(m, n, k int, a, b Matrix, c []float32, ldc int, post *Post, threads int) error {
	x, ldx, freeX, err := rowsOf(a, m, k, threads)
	defer freeX()
	if err != nil {
		return err
	}
	ldb := b.RowStride
	if k == 1 {
		ldb = n
	}
	// Column blocks of B sized to stay in L2 while the row blocks of A
	// pass them.
	nc := max(64, min(n, l2Bytes/(4*max(k, 1)))/64*64)
	rb, nb := (m+rowBlock-1)/rowBlock, (n+nc-1)/nc
	tile := func(t, threads int) error {
		j0, i0 := (t/rb)*nc, (t%rb)*rowBlock
		rows, cols := min(rowBlock, m-i0), min(nc, n-j0)
		if err := gemv.F32KN(rows, cols, k, x[i0*ldx:], ldx, b.Data[j0:], ldb, c[i0*ldc+j0:], ldc, threads); err != nil {
			return err
		}
		post.block(c, ldc, i0, j0, rows, cols)
		return nil
	}
	if rb*nb == 1 {
		return tile(0, threads)
	}
	var (
		mu    sync.Mutex
		first error
	)
	err = parallel.For(rb*nb, 1, threads, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			if err := tile(t, 1); err != nil {
				mu.Lock()
				first = err
				mu.Unlock()
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return first
}
