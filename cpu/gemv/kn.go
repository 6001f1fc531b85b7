package gemv

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// The product by a row-major K×N matrix, y = x·B: the layout of attention's
// second product (the values, [keys, head dim] rows of a KV cache) and of
// any weight stored [in, out]. The kernels read B in place, one panel of up
// to knCols columns at a time: each row of the panel is loaded once per
// block of x rows and added, times x[m, k], to accumulators that hold the
// panel's outputs, so no reduction across lanes is needed and B is not
// copied (a GEMM would pack it, package gemm's dot-product path would
// transpose it).

// knCols is the widest panel of B one kernel call takes: four vectors.
func (k kernel) knCols() int {
	if k == kernAVX2 {
		return 32
	}
	return 64
}

// F32KN computes y[m*ldy + j] = Σ_k x[m*ldx + k] * b[k*ldb + j] for m < M,
// j < N, overwriting y and leaving the rest of y untouched: few rows of x
// times a row-major K×N matrix. The leading dimensions must be at least
// the row lengths (ldx ≥ K, ldb ≥ N, ldy ≥ N). threads ≤ 0 means
// GOMAXPROCS. Bad sizes are returned as errors, and a panic inside a
// worker as *parallel.PanicError.
func F32KN(M, N, K int, x []float32, ldx int, b []float32, ldb int, y []float32, ldy int, threads int) error {
	return f32knWith(active, M, N, K, x, ldx, b, ldb, y, ldy, threads)
}

// KNAccelerated reports whether F32KN runs on an assembly kernel on this
// machine; without one it runs portable Go, which is slower than a GEMM.
func KNAccelerated() bool { return knArch(active) }

// f32knWith is F32KN on a given kernel; tests use it to force each one.
func f32knWith(kern kernel, M, N, K int, x []float32, ldx int, b []float32, ldb int, y []float32, ldy int, threads int) error {
	if M < 0 || N < 0 || K < 0 {
		return fmt.Errorf("gemv: negative size M=%d N=%d K=%d", M, N, K)
	}
	if err := checkOperand("x", "M", "K", "ldx", M, K, ldx, len(x)); err != nil {
		return err
	}
	if err := checkOperand("b", "K", "N", "ldb", K, N, ldb, len(b)); err != nil {
		return err
	}
	if err := checkOperand("y", "M", "N", "ldy", M, N, ldy, len(y)); err != nil {
		return err
	}
	if M == 0 || N == 0 {
		return nil
	}
	if K == 0 {
		clearRows(M, N, y, ldy)
		return nil
	}
	cols := kern.knCols()
	panels := (N + cols - 1) / cols
	grain := max(1, chunkBytes/(4*K*cols))
	t := min(parallel.Threads(threads), (panels+grain-1)/grain)
	if t <= 1 {
		return parallel.Run(func() { knPanels(kern, M, N, K, x, ldx, b, ldb, y, ldy, 0, panels) })
	}
	return parallel.For(panels, grain, t, func(lo, hi int) {
		knPanels(kern, M, N, K, x, ldx, b, ldb, y, ldy, lo, hi)
	})
}

// knPanels computes the column panels [lo, hi) of y for all M rows of x,
// in blocks of the kernel's most rows.
func knPanels(kern kernel, M, N, K int, x []float32, ldx int, b []float32, ldb int, y []float32, ldy int, lo, hi int) {
	cols, mbMax := kern.knCols(), kern.maxMB()
	for p := lo; p < hi; p++ {
		j := p * cols
		n := min(cols, N-j)
		for m := 0; m < M; m += mbMax {
			mb := min(mbMax, M-m)
			knBlock(kern, x[m*ldx:], ldx, mb, b[j:], ldb, K, y[m*ldy+j:], ldy, n)
		}
	}
}

// knBlock computes one block with the given kernel: for m < mb and j < n,
// y[m*ldy+j] = Σ_{i<k} x[m*ldx+i]·b[i*ldb+j], with n ≤ knCols and k ≥ 1.
func knBlock(kern kernel, x []float32, ldx, mb int, b []float32, ldb, k int, y []float32, ldy, n int) {
	if !knBlockArch(kern, x, ldx, mb, b, ldb, k, y, ldy, n) {
		knBlockGo(x, ldx, mb, b, ldb, k, y, ldy, n)
	}
}

// knBlockGo is the portable block: each output row accumulates the rows of
// b, times its x values, in k order, as the assembly kernels do.
func knBlockGo(x []float32, ldx, mb int, b []float32, ldb, k int, y []float32, ldy, n int) {
	var acc [64]float32
	for m := range mb {
		a := acc[:n]
		clear(a)
		xr := x[m*ldx : m*ldx+k]
		for i, xv := range xr {
			br := b[i*ldb : i*ldb+n]
			for j, bv := range br {
				a[j] += xv * bv
			}
		}
		copy(y[m*ldy:m*ldy+n], a)
	}
}
