// Package gemm multiplies float32 matrices on the CPU: C = A·B (+ C).
//
// The operands are strided views, so a transposed operand costs nothing
// extra: packing reads it through its strides.
package gemm

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// Matrix is a strided view of a float32 matrix: element (i, j) is
// Data[i*RowStride+j*ColStride].
type Matrix struct {
	Data                 []float32
	RowStride, ColStride int
}

// Sgemm computes C = A·B, or C += A·B when accumulate, for an m×k A, a k×n
// B and a row-major m×n C whose rows are ldc apart. threads ≤ 0 means
// GOMAXPROCS. A panic inside a worker is returned as *parallel.PanicError.
func Sgemm(m, n, k int, a, b Matrix, c []float32, ldc int, accumulate bool, threads int) error {
	if m < 0 || n < 0 || k < 0 {
		return fmt.Errorf("gemm: negative size m=%d n=%d k=%d", m, n, k)
	}
	if m == 0 || n == 0 {
		return nil
	}
	return parallel.For(m, 1, threads, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := c[i*ldc : i*ldc+n]
			if !accumulate {
				clear(row)
			}
			for p := 0; p < k; p++ {
				av := a.Data[i*a.RowStride+p*a.ColStride]
				bo := p * b.RowStride
				for j := range row {
					row[j] += av * b.Data[bo+j*b.ColStride]
				}
			}
		}
	})
}
