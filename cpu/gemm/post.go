package gemm

import (
	"fmt"

	"github.com/tensorbridge/tensorbridge/cpu/vec"
)

// Post is an element-wise epilogue applied to each block of C as soon as
// the block is final (after the last step of k), while it is still in
// cache: C[i][j] = min(max(C[i][j] + Bias[i], Lo), Hi), each step rounded
// to float32 and computed as Go's +, max and min compute it, so the result
// is bit for bit that of the three ops run after the product. It is a
// convolution's per-channel bias and ReLU or clip (ReLU6): run as separate
// passes they read and write every activation from memory again.
type Post struct {
	Bias         []float32 // added to row i of C; nil adds nothing
	Lo, Hi       float32   // the bounds, where HasLo, HasHi
	HasLo, HasHi bool
}

// block applies the epilogue to rows i0..i0+rows and columns j0..j0+cols
// of C (rows ldc apart).
func (p *Post) block(c []float32, ldc, i0, j0, rows, cols int) {
	if p == nil || rows <= 0 || cols <= 0 {
		return
	}
	for i := i0; i < i0+rows; i++ {
		p.Row(c[i*ldc+j0:i*ldc+j0+cols], i)
	}
}

// Options are the optional parts of a product (SgemmWith).
type Options struct {
	// Post (nil: none) runs on every element of C, block by block while
	// the blocks are in cache; Post.Bias must hold m values.
	Post *Post
	// A (nil: none) keeps A packed for the next products that take the
	// same, unchanged A (APack).
	A *APack
}

// SgemmWith is Sgemm (C = A·B, not accumulated) with the options o.
func SgemmWith(m, n, k int, a, b Matrix, c []float32, ldc int, o Options, threads int) error {
	if o.Post != nil && o.Post.Bias != nil && len(o.Post.Bias) < m {
		return errShortBias(len(o.Post.Bias), m)
	}
	return dispatch(m, n, k, a, b, c, ldc, false, o, threads)
}

func errShortBias(got, m int) error {
	return fmt.Errorf("gemm: epilogue bias has %d values, want one per row of C (%d)", got, m)
}

// Row applies the epilogue to d, a piece of row i of C (Bias[i]), in one
// pass.
func (p *Post) Row(d []float32, i int) {
	if p == nil {
		return
	}
	var b float32
	if p.Bias != nil {
		b = p.Bias[i]
	}
	vec.AddClamp(d, d, b, p.Lo, p.Hi, p.Bias != nil, p.HasLo, p.HasHi)
}
