// Package gemm multiplies float32 matrices on the CPU: C = A·B (+ C).
//
// The product is blocked the way BLIS does it (Van Zee & van de Geijn,
// "BLIS: A Framework for Rapidly Instantiating BLAS Functionality", ACM
// TOMS 41(3), 2015): B is packed into kc×nc panels of nr-wide column
// slivers, A into mc×kc blocks of mr-tall row slivers, and a micro-kernel
// written per instruction set (AVX-512, AVX2+FMA, NEON, or portable Go)
// computes one mr×nr tile of C over kc with its accumulators in registers.
// Packing reads the operands through their strides, so any layout of A
// and B, transposed or not, runs the same kernels; only for a short A (at
// most two slivers) is a row-major B read in place, since packing it would
// cost as much as the product. Threads pack each panel of B together and
// split C between them by rows when A is the taller operand, by columns
// when B is the wider one (driver.go's grid).
//
// Files: driver.go (blocking, threads), pack.go, kernel*.go (kernel
// choice, the Go kernel), kernels_*.s (written by gen_kernels.go),
// workspace.go (pooled buffers), peak_amd64.* (the FMA peak loops of
// BenchmarkPeakFMA).
package gemm

import (
	"fmt"
	"math"
)

// Matrix is a strided view of a float32 matrix: element (i, j) is
// Data[i*RowStride+j*ColStride].
type Matrix struct {
	Data                 []float32
	RowStride, ColStride int
}

// Sgemm computes C = A·B, or C += A·B when accumulate, for an m×k A, a k×n
// B and a row-major m×n C whose rows are ldc apart. threads ≤ 0 means
// GOMAXPROCS. Operands too short for their sizes and strides are an error;
// a panic inside a worker is returned as *parallel.PanicError.
func Sgemm(m, n, k int, a, b Matrix, c []float32, ldc int, accumulate bool, threads int) error {
	return dispatch(m, n, k, a, b, c, ldc, accumulate, Options{}, threads)
}

// dispatch runs a product on the path that suits its shape and layout:
// the K×N kernels (a row-major B, not accumulated), the dot-product path,
// or the packed micro-kernels.
func dispatch(m, n, k int, a, b Matrix, c []float32, ldc int, accumulate bool, o Options, threads int) error {
	nonEmpty := m > 0 && n > 0 && k > 0
	kn := !accumulate && nonEmpty && useKN(m, n, k, b)
	if kn || (nonEmpty && useTiled(m, n, k) && !widePacked(n, b)) {
		if err := validate(m, n, k, a, b, c, ldc); err != nil {
			return err
		}
		if kn {
			return knSgemm(m, n, k, a, b, c, ldc, o.Post, threads)
		}
		return tiledSgemm(m, n, k, a, b, c, ldc, accumulate, o.Post, threads)
	}
	return sgemm(active, m, n, k, a, b, c, ldc, accumulate, o, threads)
}

// sgemm is Sgemm on the given micro-kernel (tests run each one).
func sgemm(kern *microKernel, m, n, k int, a, b Matrix, c []float32, ldc int, accumulate bool, o Options, threads int) error {
	if err := validate(m, n, k, a, b, c, ldc); err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil
	}
	if k == 0 {
		if !accumulate {
			for i := range m {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		o.Post.block(c, ldc, 0, 0, m, n)
		return nil
	}
	ws := getWorkspace(newPlan(kern, m, n, k, a, b, c, ldc, accumulate, o.Post, threads))
	defer putWorkspace(ws)
	return ws.plan.run(ws, o.A)
}

// validate checks the sizes and that every element the strides reach lies
// inside its slice, so that the packing loops and the assembly never read
// or write out of bounds.
func validate(m, n, k int, a, b Matrix, c []float32, ldc int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("gemm: negative size m=%d n=%d k=%d", m, n, k)
	}
	if err := checkOperand("A", a, m, k); err != nil {
		return err
	}
	if err := checkOperand("B", b, k, n); err != nil {
		return err
	}
	if m == 0 || n == 0 {
		return nil
	}
	if ldc < n {
		return fmt.Errorf("gemm: C has ldc %d < n %d", ldc, n)
	}
	need, ok := span(m, n, ldc, 1)
	if !ok || len(c) < need {
		return fmt.Errorf("gemm: operand C (%d×%d, ldc %d) needs %s elements, got %d", m, n, ldc, needText(need, ok), len(c))
	}
	return nil
}

// checkOperand checks one rows×cols operand view.
func checkOperand(name string, v Matrix, rows, cols int) error {
	if v.RowStride < 0 || v.ColStride < 0 {
		return fmt.Errorf("gemm: operand %s has negative strides %d,%d", name, v.RowStride, v.ColStride)
	}
	need, ok := span(rows, cols, v.RowStride, v.ColStride)
	if !ok || len(v.Data) < need {
		return fmt.Errorf("gemm: operand %s (%d×%d, strides %d,%d) needs %s elements, got %d",
			name, rows, cols, v.RowStride, v.ColStride, needText(need, ok), len(v.Data))
	}
	return nil
}

// span is the length a rows×cols view with non-negative strides rs, cs
// reaches, (rows-1)·rs + (cols-1)·cs + 1, and false if that overflows int.
func span(rows, cols, rs, cs int) (int, bool) {
	if rows == 0 || cols == 0 {
		return 0, true
	}
	x, ok1 := mulNonNeg(rows-1, rs)
	y, ok2 := mulNonNeg(cols-1, cs)
	if !ok1 || !ok2 || x > math.MaxInt-1-y {
		return 0, false
	}
	return x + y + 1, true
}

// mulNonNeg multiplies two non-negative ints, reporting overflow.
func mulNonNeg(x, y int) (int, bool) {
	if x != 0 && y > math.MaxInt/x {
		return 0, false
	}
	return x * y, true
}

// needText writes a required length, or says it overflows.
func needText(n int, ok bool) string {
	if !ok {
		return "more than MaxInt"
	}
	return fmt.Sprint(n)
}
