package onnx

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
)

// TensorScatter (opset 24, a KV-cache write,
// https://onnx.ai/onnx/operators/onnx__TensorScatter.html) and Col2Im
// (opset 18, https://onnx.ai/onnx/operators/onnx__Col2Im.html). Both are
// built from gathers over index tables computed on the host, never from a
// product with a 0/1 matrix: a gather moves values exactly, so an Inf or NaN
// stays where it belongs instead of turning its neighbours into NaN.

func init() {
	register("TensorScatter", 24, convTensorScatter)
	register("Col2Im", 18, convCol2Im).needs(1, 2)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("Col2Im", "TensorScatter")
}

// int64Const is a constant Int64 node of the given values and dims.
func int64Const(g *graph.Graph, vals []int64, dims ...int) *graph.Node {
	t, err := hostInt64s(vals, dims...).toIR()
	if err != nil {
		panic(err)
	}
	return graph.ConstTensor(g, t)
}

// convTensorScatter writes update (past_cache's shape but sequence length S
// on axis) into past_cache at write_indices[b] (per batch, default 0) along
// axis: present[..., (w[b]+s) on axis, ...] = update[..., s, ...] for s < S,
// the position taken modulo the cache length in mode "circular"; every other
// position keeps past_cache's value. Built as a per-batch gather of update's
// rows and a select, so write_indices may be a run-time value.
func convTensorScatter(c *opCtx) error {
	past, upd := c.in(0), c.in(1)
	pd, ud := past.Shape().Dimensions, upd.Shape().Dimensions
	r := len(pd)
	if r < 2 || len(ud) != r {
		c.fail("past_cache %v and update %v must have the same rank, at least 2", pd, ud)
	}
	axis := c.normAxis(c.attrInt("axis", -2), r)
	if axis == 0 {
		c.fail("axis must not be the batch axis 0")
	}
	for k := range pd {
		if k != axis && pd[k] != ud[k] || k == axis && ud[k] > pd[k] {
			c.fail("update %v does not fit past_cache %v on axis %d", ud, pd, k)
		}
	}
	mode := c.attrString("mode", "linear")
	if mode != "linear" && mode != "circular" {
		c.fail("mode must be linear or circular, got %q", mode)
	}
	if upd.DType() != past.DType() {
		c.fail("update's dtype %s differs from past_cache's %s", upd.DType(), past.DType())
	}
	g := past.Graph()
	b, m, s := pd[0], pd[axis], ud[axis]
	var w *graph.Node
	if c.has(2) {
		w = c.in(2)
		if wd := w.Shape().Dimensions; len(wd) != 1 || wd[0] != b {
			c.fail("write_indices must be (%d), got %v", b, wd)
		}
		w = graph.ConvertDType(w, ir.Int64)
	} else {
		w = filled(g, ir.Int64, []int{b}, 0)
	}
	// Axes other than batch and axis, in order; past and update are moved to
	// (batch, axis, rest...) and flattened to (batch, len, R).
	perm := []int{0, axis}
	rest := []int{}
	restN := 1
	for k := 1; k < r; k++ {
		if k != axis {
			perm = append(perm, k)
			rest = append(rest, pd[k])
			restN *= pd[k]
		}
	}
	pt := graph.Reshape(graph.TransposeAllDims(past, perm...), b, m, restN)
	ut := graph.Reshape(graph.TransposeAllDims(upd, perm...), b*s, restN)
	js := make([]int64, m)
	for j := range js {
		js[j] = int64(j)
	}
	src := graph.Sub(broadcastNodeTo(int64Const(g, js, 1, m), []int{b, m}),
		broadcastNodeTo(graph.Reshape(w, b, 1), []int{b, m})) // (b, m): update row for cache row j
	if mode == "circular" {
		mm := filled(g, ir.Int64, []int{b, m}, float64(m))
		src = graph.Mod(graph.Add(graph.Mod(src, mm), mm), mm)
	}
	valid := graph.LogicalAnd(graph.GreaterOrEqual(src, filled(g, ir.Int64, []int{b, m}, 0)),
		graph.LessThan(src, filled(g, ir.Int64, []int{b, m}, float64(s))))
	clamped := graph.Where(valid, src, filled(g, ir.Int64, []int{b, m}, 0))
	bs := make([]int64, b)
	for k := range bs {
		bs[k] = int64(k * s)
	}
	rows := graph.Add(clamped, broadcastNodeTo(int64Const(g, bs, b, 1), []int{b, m}))
	got := gatherAxis(ut, rows, 0) // (b, m, R)
	full := []int{b, m, restN}
	out := graph.Where(broadcastNodeTo(graph.Reshape(valid, b, m, 1), full), got, pt)
	out = graph.Reshape(out, append([]int{b, m}, rest...)...)
	inv := make([]int, r)
	for k, p := range perm {
		inv[p] = k
	}
	c.set(0, graph.TransposeAllDims(out, inv...))
	return nil
}

// convCol2Im folds sliding blocks back into an image, summing overlaps:
// input (N, C·∏block, L) with L the number of block positions, image_shape
// and block_shape (build-time inputs) of n spatial dimensions, attributes
// dilations, pads (begin..., end...) and strides. Image element p receives
// the sum of every column entry whose block position and in-block offset
// land on p; the (image position → column entries) table is computed on the
// host and applied as one gather and a sum.
func convCol2Im(c *opCtx) error {
	x := c.in(0)
	xd := x.Shape().Dimensions
	img := toInts(c.constInts(1))
	blk := toInts(c.constInts(2))
	n := len(img)
	if n == 0 || len(blk) != n {
		c.fail("image_shape %v and block_shape %v must have the same positive length", img, blk)
	}
	if len(xd) != 3 {
		c.fail("input must be 3-D (N, C*prod(block_shape), L), got %v", xd)
	}
	dil := toInts(c.attrInts("dilations", nil))
	if len(dil) == 0 {
		dil = make([]int, n)
		for k := range dil {
			dil[k] = 1
		}
	}
	str := toInts(c.attrInts("strides", nil))
	if len(str) == 0 {
		str = make([]int, n)
		for k := range str {
			str[k] = 1
		}
	}
	pads := toInts(c.attrInts("pads", nil))
	if len(pads) == 0 {
		pads = make([]int, 2*n)
	}
	if len(dil) != n || len(str) != n || len(pads) != 2*n {
		c.fail("dilations %v, strides %v and pads %v must have %d, %d and %d values", dil, str, pads, n, n, 2*n)
	}
	kSize, blocks := 1, make([]int, n)
	nBlocks := 1
	for d := 0; d < n; d++ {
		if img[d] <= 0 || blk[d] <= 0 || dil[d] <= 0 || str[d] <= 0 || pads[d] < 0 || pads[d+n] < 0 {
			c.fail("image_shape %v, block_shape %v, dilations %v, strides %v and pads %v must be positive (pads non-negative)", img, blk, dil, str, pads)
		}
		kSize *= blk[d]
		blocks[d] = (img[d]+pads[d]+pads[d+n]-dil[d]*(blk[d]-1)-1)/str[d] + 1
		if blocks[d] < 1 {
			c.fail("no block fits on spatial axis %d (image %d, block %d)", d, img[d], blk[d])
		}
		nBlocks *= blocks[d]
	}
	if xd[1]%kSize != 0 {
		c.fail("input's dimension 1 (%d) is not a multiple of prod(block_shape) = %d", xd[1], kSize)
	}
	if xd[2] != nBlocks {
		c.fail("input's dimension 2 (%d) must be the number of block positions %v = %d", xd[2], blocks, nBlocks)
	}
	ch := xd[1] / kSize
	nImg := numElems(img)
	if err := checkHostSize([]int{nImg, kSize}); err != nil {
		return err
	}
	// For each image element, the column entries (kk·L + l) landing there.
	contrib := make([][]int64, nImg)
	maxC := 0
	kk := make([]int, n)
	bb := make([]int, n)
	for k := 0; k < kSize; k++ {
		for rem, d := k, n-1; d >= 0; d-- {
			kk[d] = rem % blk[d]
			rem /= blk[d]
		}
		for l := 0; l < nBlocks; l++ {
			for rem, d := l, n-1; d >= 0; d-- {
				bb[d] = rem % blocks[d]
				rem /= blocks[d]
			}
			flat, in := 0, true
			for d := 0; d < n; d++ {
				p := bb[d]*str[d] - pads[d] + kk[d]*dil[d]
				if p < 0 || p >= img[d] {
					in = false
					break
				}
				flat = flat*img[d] + p
			}
			if in {
				contrib[flat] = append(contrib[flat], int64(k*nBlocks+l))
				maxC = max(maxC, len(contrib[flat]))
			}
		}
	}
	g := x.Graph()
	out := append([]int{xd[0], ch}, img...)
	if maxC == 0 {
		c.set(0, filled(g, x.DType(), out, 0))
		return nil
	}
	zeroCol := int64(kSize * nBlocks) // index of an appended zero entry
	table := make([]int64, nImg*maxC)
	for p := range contrib {
		for j := 0; j < maxC; j++ {
			if j < len(contrib[p]) {
				table[p*maxC+j] = contrib[p][j]
			} else {
				table[p*maxC+j] = zeroCol
			}
		}
	}
	cols := graph.Reshape(x, xd[0], ch, kSize*nBlocks)
	cols = graph.Concatenate([]*graph.Node{cols, filled(g, x.DType(), []int{xd[0], ch, 1}, 0)}, 2)
	picked := gatherAxis(cols, int64Const(g, table, nImg, maxC), 2) // (N, C, nImg, maxC)
	c.set(0, graph.Reshape(graph.ReduceSum(picked, 3), out...))
	return nil
}
