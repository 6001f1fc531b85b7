package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Linear algebra and scans: MatMul, Gemm, CumSum.

func init() {
	register("MatMul", 1, convMatMul)
	registerPadRule("MatMul", padMatMul)
	register("Gemm", 7, convGemm)
	registerPadRule("Gemm", padGemm)
	register("CumSum", 11, convCumSum).needs(1)
	registerPadRule("CumSum", padCumSum)
	register("CumProd", 26, convCumProd).needs(1)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("CumProd")
}

// matMul is numpy matmul: 1-D operands are promoted to matrices (and the
// added axis removed), leading batch axes broadcast.
func matMul(a, b *graph.Node) *graph.Node {
	ar, br := a.Rank(), b.Rank()
	if ar == 0 || br == 0 {
		panic(errorf("MatMul of a scalar (%s, %s)", a.Shape(), b.Shape()))
	}
	if ar == 1 {
		a = graph.Reshape(a, 1, a.Shape().Dimensions[0])
	}
	if br == 1 {
		b = graph.Reshape(b, b.Shape().Dimensions[0], 1)
	}
	ad, bd := a.Shape().Dimensions, b.Shape().Dimensions
	if y := matMulUnbatched(a, b, ar, br); y != nil {
		return y
	}
	batch, err := broadcastDims(ad[:len(ad)-2], bd[:len(bd)-2])
	if err != nil {
		panic(err)
	}
	a = broadcastNodeTo(a, append(append([]int{}, batch...), ad[len(ad)-2:]...))
	b = broadcastNodeTo(b, append(append([]int{}, batch...), bd[len(bd)-2:]...))
	nb := len(batch)
	batchAxes := make([]int, nb)
	for k := range batchAxes {
		batchAxes[k] = k
	}
	y := dotGeneral(a, []int{nb + 1}, batchAxes, b, []int{nb}, batchAxes)
	outDims := append([]int{}, batch...)
	if ar > 1 {
		outDims = append(outDims, ad[len(ad)-2])
	}
	if br > 1 {
		outDims = append(outDims, bd[len(bd)-1])
	}
	return graph.Reshape(y, outDims...)
}

// matMulUnbatched handles the common case where one operand (typically a
// weight) has no batch axes, or only batch axes of size 1, and the other
// has batch axes: [..., m, k] x [k, n]. Broadcasting the weight to the
// other operand's batch shape and running a batched product would copy it
// once per batch element on every call (a [128,1,256] x [256,768]
// projection of a sequence-first encoder broadcasts the 0.75 MB weight 128
// times) and run as many tiny products; a single contraction over k with
// no batch axes is one large matrix product, the same arithmetic. a and b
// are at least 2-D here (1-D operands already promoted); ar and br are
// the ranks before promotion. It returns nil when the case does not apply.
func matMulUnbatched(a, b *graph.Node, ar, br int) *graph.Node {
	ad, bd := a.Shape().Dimensions, b.Shape().Dimensions
	ones := func(d []int) bool {
		for _, v := range d {
			if v != 1 {
				return false
			}
		}
		return true
	}
	aBatch, bBatch := ad[:len(ad)-2], bd[:len(bd)-2]
	var y *graph.Node
	var batch []int
	switch {
	case len(aBatch) > 0 && ones(bBatch) && !ones(aBatch) && len(bBatch) <= len(aBatch):
		// [..., m, k] x [k, n] -> [..., m, n] directly.
		b2 := b
		if len(bBatch) > 0 {
			b2 = graph.Reshape(b, bd[len(bd)-2:]...)
		}
		y = dotGeneral(a, []int{len(ad) - 1}, nil, b2, []int{0}, nil)
		batch = aBatch
	case len(bBatch) > 0 && ones(aBatch) && !ones(bBatch) && len(aBatch) <= len(bBatch):
		// [m, k] x [..., k, n] -> [m, ..., n], then m moved behind the batch axes.
		a2 := a
		if len(aBatch) > 0 {
			a2 = graph.Reshape(a, ad[len(ad)-2:]...)
		}
		nb := len(bBatch)
		y = dotGeneral(a2, []int{1}, nil, b, []int{nb}, nil)
		perm := make([]int, 0, nb+2)
		for k := 1; k <= nb; k++ {
			perm = append(perm, k)
		}
		perm = append(perm, 0, nb+1)
		y = graph.TransposeAllAxes(y, perm...)
		batch = bBatch
	default:
		return nil
	}
	outDims := append([]int{}, batch...)
	if ar > 1 {
		outDims = append(outDims, ad[len(ad)-2])
	}
	if br > 1 {
		outDims = append(outDims, bd[len(bd)-1])
	}
	return graph.Reshape(y, outDims...)
}

func convMatMul(c *opCtx) error {
	c.set(0, matMul(c.in(0), c.in(1)))
	return nil
}

// convGemm is alpha·A'·B' + beta·C with optional transposes.
func convGemm(c *opCtx) error {
	a, b := c.in(0), c.in(1)
	if a.Rank() != 2 || b.Rank() != 2 {
		c.fail("A and B must be matrices, got %s and %s", a.Shape(), b.Shape())
	}
	if c.attrInt("transA", 0) != 0 {
		a = graph.TransposeAllAxes(a, 1, 0)
	}
	if c.attrInt("transB", 0) != 0 {
		b = graph.TransposeAllAxes(b, 1, 0)
	}
	y := dotGeneral(a, []int{1}, nil, b, []int{0}, nil)
	if alpha := c.attrFloat("alpha", 1); alpha != 1 {
		y = graph.Mul(y, scalarLikeB(y, alpha))
	}
	if c.has(2) {
		cc := c.in(2)
		if beta := c.attrFloat("beta", 1); beta != 1 {
			cc = graph.Mul(cc, scalarLikeB(cc, beta))
		}
		y = graph.Add(y, broadcastNodeTo(cc, y.Shape().Dimensions))
	}
	c.set(0, y)
	return nil
}

// convCumSum supports the exclusive and reverse attributes by reversing
// (with a gather) and subtracting the input.
// padCumSum is CumSum's padding rule (padsafe.go): a forward sum at a real
// position reads only earlier positions, so padding at the end of the
// summed axis is exact when real positions are a prefix of it (D itself,
// or D merged batch-major); a reverse sum reads the padded positions.
func padCumSum(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, _ bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	ax, ok := r.constInts(n, 1)
	if !ok || len(ax) != 1 {
		return fail("has an axis the analysis does not know")
	}
	a, ok := normAxis(ax[0], x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	if r.isD(x.dims[a]) && attrI(attrs, "reverse", 0) != 0 {
		return fail("sums in reverse along it, so padded positions reach real ones")
	}
	if r.isD(x.dims[a]) && !r.batchMajor(x.dims[a]) {
		return fail("sums along it merged behind other sizes, so padded positions come before real ones")
	}
	return []*pval{{rank: x.rank, dims: x.dims}}
}

func convCumSum(c *opCtx) error {
	x := c.in(0)
	ax := c.constInts(1)
	if len(ax) != 1 {
		c.fail("axis must have one element")
	}
	axis := c.normAxis(ax[0], x.Rank())
	if hasZeroDim(x) { // nothing to sum, and GoMLX's ReduceWindow refuses an empty window
		c.set(0, x)
		return nil
	}
	rev := c.attrInt("reverse", 0) != 0
	if rev {
		x = reverseAxis(x, axis)
	}
	y := graph.CumSum(x, axis)
	if c.attrInt("exclusive", 0) != 0 {
		y = graph.Sub(y, x)
	}
	if rev {
		y = reverseAxis(y, axis)
	}
	c.set(0, y)
	return nil
}

// convCumProd is the cumulative product along axis
// (https://onnx.ai/onnx/operators/onnx__CumProd.html), inclusive or
// exclusive, forward or reverse, by log2(n) doubling steps (each element
// times the one s places before it, for s = 1, 2, 4...): no division, so
// zeros and integers are exact.
func convCumProd(c *opCtx) error {
	x := c.in(0)
	ax := c.constInts(1)
	if len(ax) != 1 {
		c.fail("axis must have one element")
	}
	axis := c.normAxis(ax[0], x.Rank())
	rev := c.attrInt("reverse", 0) != 0
	if rev {
		x = reverseAxis(x, axis)
	}
	n := x.Shape().Dimensions[axis]
	// shifted moves y s places along axis, filling with ones.
	shifted := func(y *graph.Node, s int) *graph.Node {
		d := append([]int{}, y.Shape().Dimensions...)
		d[axis] = s
		ones := filled(y.Graph(), y.DType(), d, 1)
		if s >= n {
			return graph.Reshape(filled(y.Graph(), y.DType(), y.Shape().Dimensions, 1), y.Shape().Dimensions...)
		}
		return graph.Concatenate([]*graph.Node{ones, sliceAxis(y, axis, 0, n-s, 1)}, axis)
	}
	y := x
	for s := 1; s < n; s *= 2 {
		y = graph.Mul(y, shifted(y, s))
	}
	if c.attrInt("exclusive", 0) != 0 && n > 0 {
		y = shifted(y, 1)
	}
	if rev {
		y = reverseAxis(y, axis)
	}
	c.set(0, y)
	return nil
}

func init() {
	register("Det", 11, convDet)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("Det")
}

// convDet computes determinants of the trailing square matrices with the
// Leibniz formula (a sum over permutations), exact in structure and
// adequate for the small matrices it is limited to (up to 5x5).
func convDet(c *opCtx) error {
	x := c.in(0)
	d := x.Shape().Dimensions
	r := len(d)
	if r < 2 || d[r-1] != d[r-2] {
		c.fail("expects [..., M, M], got %v", d)
	}
	m := d[r-1]
	if m > 5 {
		c.fail("determinants of %dx%d matrices are not supported (at most 5x5)", m, m)
	}
	batch := d[:r-2]
	if m == 0 { // the determinant of a 0x0 matrix is the empty product, 1
		c.set(0, filled(x.Graph(), x.DType(), batch, 1))
		return nil
	}
	elem := make([][]*graph.Node, m)
	for i := range m {
		elem[i] = make([]*graph.Node, m)
		row := sliceAxis(x, r-2, i, i+1, 1)
		for j := range m {
			elem[i][j] = graph.Reshape(sliceAxis(row, r-1, j, j+1, 1), batch...)
		}
	}
	var sum *graph.Node
	permute(m, func(p []int, sign int) {
		term := elem[0][p[0]]
		for i := 1; i < m; i++ {
			term = graph.Mul(term, elem[i][p[i]])
		}
		if sign < 0 {
			term = graph.Neg(term)
		}
		if sum == nil {
			sum = term
		} else {
			sum = graph.Add(sum, term)
		}
	})
	c.set(0, sum)
	return nil
}

// permute calls fn with every permutation of 0..n-1 and its sign.
func permute(n int, fn func(p []int, sign int)) {
	p := make([]int, n)
	used := make([]bool, n)
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			inv := 0
			for a := range n {
				for b := a + 1; b < n; b++ {
					if p[a] > p[b] {
						inv++
					}
				}
			}
			fn(p, 1-2*(inv%2))
			return
		}
		for v := range n {
			if !used[v] {
				used[v], p[k] = true, v
				rec(k + 1)
				used[v] = false
			}
		}
	}
	rec(0)
}

// padMatMul: batch and row axes keep positions apart; contracting over
// the padded axis is exact only when one side is exactly zero at padded
// positions (Softmax weights after a mask) and the other finite there.
func padMatMul(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	a, b := ins[0], padIn(ins, 1)
	if a.rank < 1 || b == nil || b.rank < 1 {
		return fail("has operands of a rank the analysis does not know")
	}
	ad, bd := a.dims, b.dims
	aVec, bVec := a.rank == 1, b.rank == 1
	if aVec {
		ad = append([]sdim{cdim(1)}, ad...)
	}
	if bVec {
		bd = append(append([]sdim{}, bd...), cdim(1))
	}
	kA, kB := ad[len(ad)-1], bd[len(bd)-2]
	if r.isD(kA) || r.isD(kB) {
		// Contracting over the padded axis is exact only when one side is
		// exactly zero at padded positions (masked attention weights) and
		// the other is not mask-derived (so finite there).
		okA := a.zero[a.rank-1] && !b.mask
		okB := !bVec && b.zero[b.rank-2] && !a.mask
		if !(r.isD(kA) && r.isD(kB) && (okA || okB)) {
			return fail("contracts over it")
		}
	}
	batchA := &pval{rank: len(ad) - 2, dims: ad[:len(ad)-2]}
	batchB := &pval{rank: len(bd) - 2, dims: bd[:len(bd)-2]}
	bdims, why := r.broadcast([]*pval{batchA, batchB})
	if why != "" {
		return fail("%s", why)
	}
	dims := append([]sdim{}, bdims...)
	if !aVec {
		dims = append(dims, ad[len(ad)-2])
	}
	if !bVec {
		dims = append(dims, bd[len(bd)-1])
	}
	return []*pval{{rank: len(dims), dims: dims, mask: a.mask || b.mask}}
}

// padGemm: rows keep positions apart; contracting over the padded axis is
// refused.
func padGemm(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	a, b, c := ins[0], padIn(ins, 1), padIn(ins, 2)
	if a.rank != 2 || b == nil || b.rank != 2 {
		return fail("has operands of a rank the analysis does not know")
	}
	ta, tb := attrI(attrs, "transA", 0) != 0, attrI(attrs, "transB", 0) != 0
	mDim, kA := a.dims[0], a.dims[1]
	if ta {
		mDim, kA = kA, mDim
	}
	kB, nDim := b.dims[0], b.dims[1]
	if tb {
		kB, nDim = nDim, kB
	}
	if r.isD(kA) || r.isD(kB) {
		return fail("contracts over it")
	}
	out := &pval{rank: 2, dims: []sdim{mDim, nDim}}
	if c != nil {
		if _, why := r.broadcast([]*pval{out, c}); why != "" {
			return fail("%s", why)
		}
	}
	return []*pval{out}
}
