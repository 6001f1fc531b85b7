package engine

import (
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/tensorbridge/tensorbridge/cpu/gemm"
	"github.com/tensorbridge/tensorbridge/cpu/parallel"
)

// operandView is how a DotGeneral operand is read as a batch of strided
// matrices: element (b, i, j) is at b*bStride + i*rStride + j*cStride,
// after an optional transposition into [batch, rows, cols] order when its
// axes do not group into single strides.
type operandView struct {
	perm                      []int // nil: read in place
	dims                      []int // the operand's dimensions
	batch, rows, cols         int
	bStride, rStride, cStride int
	bOff                      []int // offset of each batch element when the batch axes are not one stride
}

// off returns the offset of batch element b.
func (v *operandView) off(b int) int {
	if v.bOff != nil {
		return v.bOff[b]
	}
	return b * v.bStride
}

// dotPlan is a DotGeneral lowered to batched GEMMs.
type dotPlan struct {
	lhs, rhs operandView
	m, n, k  int
	batch    int
	out      shapes.Shape
	onesOnce sync.Once
	unit     []float32
}

// dotKernel returns the float32 DotGeneral kernel and the values it
// reads: its operands, or the int8 weights under a ConvertDType feeding
// its right operand.
func dotKernel(e *Engine, n *node) (kernel, []*value) {
	if !allFloat32(n) {
		return nil, nil
	}
	a := n.attr.(dotAttr)
	ls, rs := n.in[0].shape(), n.in[1].shape()
	p := &dotPlan{
		lhs: viewOf(ls, a.lb, freeAxes(ls.Rank(), a.lb, a.lc), a.lc),
		rhs: viewOf(rs, a.rb, a.rc, freeAxes(rs.Rank(), a.rb, a.rc)),
	}
	p.batch, p.m, p.k, p.n = p.lhs.batch, p.lhs.rows, p.lhs.cols, p.rhs.cols
	p.out = n.shapes[0]
	if q := int8Source(n.in[1]); q != nil && p.weightsView() {
		return p.runInt8, []*value{n.in[0], q}
	}
	if w := n.in[1].n; w.konst != nil && (p.rhs.perm != nil || p.rhs.bOff != nil || (p.k > 1 && p.rhs.rStride != 1)) {
		if flat, err := e.inner.BufferData(w.konst); err == nil {
			packed := p.packWeights(flat.([]float32))
			return func(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
				return p.runPacked(r, ins[0], packed)
			}, n.in[:1]
		}
	}
	return p.run, n.in
}

// packWeights lays a constant right operand out once, at compile time, as
// the kernels read it best: per batch element, N rows of K contiguous
// values (Bᵀ), so no run packs it again.
func (p *dotPlan) packWeights(flat []float32) []float32 {
	src := p.rhs.materialize(flat)
	packed := make([]float32, p.batch*p.n*p.k)
	for b := range p.batch {
		base, dst := p.rhs.off(b), packed[b*p.n*p.k:]
		for j := range p.n {
			for q := range p.k {
				dst[j*p.k+q] = src[base+q*p.rhs.rStride+j*p.rhs.cStride]
			}
		}
	}
	p.rhs = operandView{batch: p.batch, rows: p.k, cols: p.n, bStride: p.n * p.k, rStride: 1, cStride: p.k}
	return packed
}

// runPacked computes the product of x by rhs, the right operand's values
// in the order p.rhs reads them (packed by packWeights for a constant).
func (p *dotPlan) runPacked(r *run, x backends.Buffer, rhs []float32) ([]backends.Buffer, error) {
	lhs, err := r.f32(x)
	if err != nil {
		return nil, err
	}
	lhs = p.lhs.materialize(lhs)
	out, flat, err := r.alloc(p.out)
	if err != nil {
		return nil, err
	}
	switch {
	case p.m <= gemvRows && p.weightsView():
		err = p.gemvF32(r, lhs, rhs, flat.([]float32))
	case p.m <= gemvRows && p.inPlaceForm() != formNone:
		err = p.gemvBatched(r, lhs, rhs, flat.([]float32))
	default:
		err = p.gemms(r, lhs, rhs, flat.([]float32))
	}
	if err != nil {
		_ = r.x.e.inner.BufferFinalize(out)
		return nil, err
	}
	return r.one(out), nil
}

// freeAxes returns the axes of a rank-r operand that are neither batch nor
// contracting, in order.
func freeAxes(r int, batch, contract []int) []int {
	var f []int
	for i := range r {
		if !slices.Contains(batch, i) && !slices.Contains(contract, i) {
			f = append(f, i)
		}
	}
	return f
}

// viewOf groups the axes of s into batch, rows and cols, rows and cols
// each one stride (the batch elements may be anywhere: their offsets are
// tabulated), or plans a transposition into that order when they do not
// group.
func viewOf(s shapes.Shape, batch, rows, cols []int) operandView {
	st := rowMajorStrides(s.Dimensions)
	bn, bs, ok1 := group(s.Dimensions, st, batch)
	rn, rs, ok2 := group(s.Dimensions, st, rows)
	cn, cs, ok3 := group(s.Dimensions, st, cols)
	if ok2 && ok3 {
		v := operandView{dims: s.Dimensions, batch: bn, rows: rn, cols: cn, bStride: bs, rStride: rs, cStride: cs}
		if !ok1 {
			v.bOff = batchOffsets(s.Dimensions, st, batch)
		}
		return v
	}
	perm := slices.Concat(batch, rows, cols)
	return operandView{perm: perm, dims: s.Dimensions, batch: bn, rows: rn, cols: cn, bStride: rn * cn, rStride: cn, cStride: 1}
}

// batchOffsets returns the offset of each element of the batch axes, in
// their order.
func batchOffsets(dims, st, axes []int) []int {
	n := 1
	for _, a := range axes {
		n *= dims[a]
	}
	offs := make([]int, 0, n)
	idx := make([]int, len(axes))
	for range n {
		o := 0
		for i, a := range axes {
			o += idx[i] * st[a]
		}
		offs = append(offs, o)
		for i := len(axes) - 1; i >= 0; i-- {
			if idx[i]++; idx[i] < dims[axes[i]] {
				break
			}
			idx[i] = 0
		}
	}
	return offs
}

// rowMajorStrides returns the element strides of a row-major array.
func rowMajorStrides(dims []int) []int {
	st := make([]int, len(dims))
	acc := 1
	for i := len(dims) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= dims[i]
	}
	return st
}

// group returns the size of axes taken together (in the given order) and
// their common stride, with ok false when they are not laid out as one
// strided axis. Axes of size 1 are ignored.
func group(dims, st []int, axes []int) (size, stride int, ok bool) {
	size, stride, last := 1, 0, -1
	for _, a := range axes {
		size *= dims[a]
		if dims[a] == 1 {
			continue
		}
		if last >= 0 && st[last] != st[a]*dims[a] {
			return size, 0, false
		}
		last, stride = a, st[a]
	}
	if size == 0 {
		return 0, 0, true
	}
	return size, stride, true
}

// run computes the product.
func (p *dotPlan) run(r *run, ins []backends.Buffer) ([]backends.Buffer, error) {
	rhs, err := r.f32(ins[1])
	if err != nil {
		return nil, err
	}
	return p.runPacked(r, ins[0], p.rhs.materialize(rhs))
}

// materialize returns the operand's values in the order the view reads:
// flat itself, or a transposed copy.
func (v *operandView) materialize(flat []float32) []float32 {
	if v.perm == nil {
		return flat
	}
	t := make([]float32, len(flat))
	transpose(t, flat, v.dims, v.perm)
	return t
}

// gemms runs one GEMM per batch element: in parallel over the batch, one
// thread each, when the matrices are small (attention heads), else one
// after another with the threads inside each GEMM.
func (p *dotPlan) gemms(r *run, lhs, rhs, c []float32) error {
	one := func(b, threads int) error {
		a := gemm.Matrix{Data: lhs[p.lhs.off(b):], RowStride: p.lhs.rStride, ColStride: p.lhs.cStride}
		bm := gemm.Matrix{Data: rhs[p.rhs.off(b):], RowStride: p.rhs.rStride, ColStride: p.rhs.cStride}
		return gemm.Sgemm(p.m, p.n, p.k, a, bm, c[b*p.m*p.n:], p.n, false, threads)
	}
	if p.batch > 1 && p.m*p.n*p.k < 1<<18 {
		var first error
		err := parallel.For(p.batch, 1, r.threads, func(lo, hi int) {
			for b := lo; b < hi; b++ {
				if err := one(b, 1); err != nil && first == nil {
					first = err
				}
			}
		})
		if err != nil {
			return err
		}
		return first
	}
	for b := range p.batch {
		if err := one(b, r.threads); err != nil {
			return err
		}
	}
	return nil
}
