package onnx

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/tensorbridge/tensorbridge/ir"
	"github.com/tensorbridge/tensorbridge/onnx/onnxpb"
)

// Shape and data-movement ops: Shape, Size, Reshape, Flatten, Squeeze,
// Unsqueeze, Concat, Split, Slice, Gather, Expand, Tile, Transpose, Pad,
// Identity, DepthToSpace, SpaceToDepth. Each has a host evaluator so shape
// computations fold into constants. All register here, with their
// padding-analysis rules (padsafe.go); the code of Reshape, Flatten,
// Squeeze and Unsqueeze is in ops_reshape.go, of Concat and Split in
// ops_concat.go, of Slice and Gather in ops_slice.go, of Pad in ops_pad.go.

func init() {
	register("Shape", 1, convShape).withHost(convShape).onlyShapes()
	registerPadRule("Shape", padShape).readsShapes()
	register("Size", 1, convSize).withHost(convSize).onlyShapes()
	registerPadRule("Size", padSize).readsShapes()
	register("Identity", 1, convIdentity).withHost(convIdentity)
	registerPadRule("Identity", padIdentity)
	registerReshape("Reshape", 5, reshapeTarget).needs(1)
	registerPadRule("Reshape", padReshape).takesSize(1)
	registerReshape("Flatten", 1, flattenDims)
	registerPadRule("Flatten", padFlatten)
	registerReshape("Squeeze", 1, squeezeDims)
	registerReshape("Squeeze", 13, squeezeDims).needs(1)
	registerPadRule("Squeeze", padSqueeze)
	registerReshape("Unsqueeze", 1, unsqueezeDims)
	registerReshape("Unsqueeze", 13, unsqueezeDims).needs(1)
	registerPadRule("Unsqueeze", padUnsqueeze)
	register("Concat", 4, convConcat).withHost(hostConcatOp)
	registerPadRule("Concat", padConcat)
	register("Split", 2, convSplit).withHost(hostSplit)
	register("Split", 13, convSplit).withHost(hostSplit).needs(1)
	registerPadRule("Split", padSplit)
	register("Slice", 1, convSlice).withHost(hostSlice)
	register("Slice", 10, convSlice).withHost(hostSlice).needs(1, 2, 3, 4)
	registerPadRule("Slice", padSlice)
	register("Gather", 1, convGather).withHost(hostGather)
	registerPadRule("Gather", padGather).takesSize(1)
	register("Expand", 8, convExpand).withHost(hostExpand).needs(1)
	registerPadRule("Expand", padExpand).takesSize(1)
	register("Tile", 6, convTile).withHost(hostTile).needs(1)
	register("Transpose", 1, convTranspose).withHost(hostTranspose)
	registerPadRule("Transpose", padTranspose)
	register("Pad", 2, convPad).withHost(hostPad)
	register("Pad", 11, convPad).withHost(hostPad).needs(1, 3)
	register("DepthToSpace", 1, convDepthToSpace)
	register("SpaceToDepth", 1, convSpaceToDepth)
	register("SpaceToDepth", 28, convSpaceToDepth) // adds mode (DCR, CRD)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("DepthToSpace", "Pad", "SpaceToDepth")
	registerPadRule("Tile", padUnanalysed).withoutInputs().takesSize(1) // not analysed; repeats are not data
}

// shapeHost is the Shape op's result for dims, honouring opset-15 start/end.
func convShape(c *opCtx) error {
	dims := c.dims(0)
	r := len(dims)
	start, end := int(c.attrInt("start", 0)), int(c.attrInt("end", int64(r)))
	if start < 0 {
		start += r
	}
	if end < 0 {
		end += r
	}
	start, end = min(max(start, 0), r), min(max(end, 0), r)
	out := []int64{}
	for k := start; k < end; k++ {
		out = append(out, int64(dims[k]))
	}
	c.setHost(0, hostInt64s(out))
	return nil
}

func convSize(c *opCtx) error {
	c.setHost(0, hostInt64s([]int64{int64(numElems(c.dims(0)))}, []int{}...))
	return nil
}

func convIdentity(c *opCtx) error {
	v := c.input(0)
	if v.seq != nil || v.none { // sequences and optionals (values.go)
		c.copyValue(0, v)
		return nil
	}
	if v.host != nil {
		c.setHost(0, v.host)
		return nil
	}
	c.setDT(0, v.node, v.dt)
	return nil
}

func expandDims(c *opCtx) []int {
	shape := c.constInts(1)
	dims, err := broadcastDims(c.dims(0), toInts(shape))
	if err != nil {
		c.fail("%v", err)
	}
	return dims
}

func convExpand(c *opCtx) error {
	c.set(0, broadcastNodeTo(c.in(0), expandDims(c)))
	return nil
}

func hostExpand(c *opCtx) error {
	h, err := c.hostIn(0).broadcastTo(expandDims(c))
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func tileRepeats(c *opCtx) []int {
	reps := toInts(c.constInts(1))
	if len(reps) != c.rank(0) {
		c.fail("repeats %v do not match rank %d", reps, c.rank(0))
	}
	return reps
}

// convTile tiles by broadcasting: x [d0, d1] becomes [1, d0, 1, d1],
// broadcast to [r0, d0, r1, d1], then reshaped to [r0*d0, r1*d1].
func convTile(c *opCtx) error {
	x := c.in(0)
	reps := tileRepeats(c)
	dims := x.Shape().Dimensions
	inter := make([]int, 0, 2*len(dims))
	big := make([]int, 0, 2*len(dims))
	out := make([]int, len(dims))
	for k, d := range dims {
		inter = append(inter, 1, d)
		big = append(big, reps[k], d)
		out[k] = reps[k] * d
	}
	if numElems(out) == 0 {
		c.setHost(0, hostZeros(c.dtype(0), out))
		return nil
	}
	y := graph.Reshape(x, inter...)
	y = broadcastNodeTo(y, big)
	c.set(0, graph.Reshape(y, out...))
	return nil
}

func hostTile(c *opCtx) error {
	x := c.hostIn(0)
	reps := tileRepeats(c)
	out := make([]int, len(reps))
	for a, r := range reps {
		if r < 0 {
			return fmt.Errorf("negative repeat %d", r)
		}
		out[a] = r * x.dims[a]
	}
	if err := checkHostSize(out); err != nil {
		return err
	}
	sel := make([][]int, x.rank())
	for a, d := range x.dims {
		for r := 0; r < reps[a]; r++ {
			for k := range d {
				sel[a] = append(sel[a], k)
			}
		}
		if sel[a] == nil {
			sel[a] = []int{}
		}
	}
	h, err := hostSelect(x, sel)
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func transposePerm(c *opCtx) []int {
	r := c.rank(0)
	perm := c.attrInts("perm", nil)
	if perm == nil {
		out := make([]int, r)
		for k := range out {
			out[k] = r - 1 - k
		}
		return out
	}
	if len(perm) != r {
		c.fail("perm %v does not match rank %d", perm, r)
	}
	return c.normAxes(perm, r)
}

func convTranspose(c *opCtx) error {
	c.set(0, graph.TransposeAllAxes(c.in(0), transposePerm(c)...))
	return nil
}

func hostTranspose(c *opCtx) error {
	h, err := c.hostIn(0).transposed(transposePerm(c))
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func convDepthToSpace(c *opCtx) error {
	x := c.in(0)
	if x.Rank() != 4 {
		c.fail("expects a rank-4 input, got %s", x.Shape())
	}
	b := int(c.attrInt("blocksize", 0))
	d := x.Shape().Dimensions
	n, ch, h, w := d[0], d[1], d[2], d[3]
	if b <= 0 || ch%(b*b) != 0 {
		c.fail("blocksize %d does not divide channels %d", b, ch)
	}
	var y *graph.Node
	if c.attrString("mode", "DCR") == "CRD" {
		y = graph.Reshape(x, n, ch/(b*b), b, b, h, w)
		y = graph.TransposeAllAxes(y, 0, 1, 4, 2, 5, 3)
	} else {
		y = graph.Reshape(x, n, b, b, ch/(b*b), h, w)
		y = graph.TransposeAllAxes(y, 0, 3, 4, 1, 5, 2)
	}
	c.set(0, graph.Reshape(y, n, ch/(b*b), h*b, w*b))
	return nil
}

func convSpaceToDepth(c *opCtx) error {
	x := c.in(0)
	if x.Rank() != 4 {
		c.fail("expects a rank-4 input, got %s", x.Shape())
	}
	b := int(c.attrInt("blocksize", 0))
	d := x.Shape().Dimensions
	n, ch, h, w := d[0], d[1], d[2], d[3]
	if b <= 0 || h%b != 0 || w%b != 0 {
		c.fail("blocksize %d does not divide spatial dims %dx%d", b, h, w)
	}
	y := graph.Reshape(x, n, ch, h/b, b, w/b, b)
	mode := "DCR"
	if c.opset >= 28 {
		mode = c.attrString("mode", "DCR")
	}
	switch mode {
	case "DCR": // output channel (row·b + column)·C + channel
		y = graph.TransposeAllAxes(y, 0, 3, 5, 1, 2, 4)
	case "CRD": // output channel channel·b² + row·b + column
		y = graph.TransposeAllAxes(y, 0, 1, 3, 5, 2, 4)
	default:
		c.fail("mode %q: expected DCR or CRD", mode)
	}
	c.set(0, graph.Reshape(y, n, ch*b*b, h/b, w/b))
	return nil
}

func init() {
	register("ReverseSequence", 10, convReverseSequence)
	// Padding: not analysed (a node that touches the padded dimension
	// keeps it exact).
	registerPadNotAnalysed("ReverseSequence")
}

// convReverseSequence reverses the first seq_lens[b] elements along the
// time axis of each batch entry b, with a gather whose indices are
// (b, t < len[b] ? len[b]-1-t : t).
func convReverseSequence(c *opCtx) error {
	x := c.in(0)
	lens := c.in(1)
	r := x.Rank()
	bAxis := c.normAxis(c.attrInt("batch_axis", 1), r)
	tAxis := c.normAxis(c.attrInt("time_axis", 0), r)
	if bAxis == tAxis {
		c.fail("batch_axis and time_axis are both %d", bAxis)
	}
	// Bring batch and time to the front.
	perm := []int{bAxis, tAxis}
	for a := range r {
		if a != bAxis && a != tAxis {
			perm = append(perm, a)
		}
	}
	xt := graph.TransposeAllAxes(x, perm...)
	d := xt.Shape().Dimensions
	B, T := d[0], d[1]
	if lens.DType() != ir.Int64 {
		lens = graph.ConvertDType(lens, ir.Int64)
	}
	l := broadcastNodeTo(graph.Reshape(lens, B, 1), []int{B, T})
	t := graph.Iota(c.g, ir.MakeShape(ir.Int64, B, T), 1)
	b := graph.Iota(c.g, ir.MakeShape(ir.Int64, B, T), 0)
	src := graph.Where(graph.LessThan(t, l), graph.Sub(graph.Sub(l, t), filled(c.g, ir.Int64, []int{B, T}, 1)), t)
	indices := graph.Concatenate([]*graph.Node{graph.Reshape(b, B, T, 1), graph.Reshape(src, B, T, 1)}, 2)
	offset := []int{}
	for a := 2; a < len(d); a++ {
		offset = append(offset, a)
	}
	sizes := append([]int{1, 1}, d[2:]...)
	y := graph.BackendGather(xt, indices, 2, offset, []int{0, 1}, []int{0, 1}, sizes, false)
	inv := make([]int, r)
	for k, p := range perm {
		inv[p] = k
	}
	c.set(0, graph.TransposeAllAxes(y, inv...))
	return nil
}

// padIdentity is the rule of Identity and Dropout (inference: the input
// unchanged, and a mask of its shape as Dropout's second output).
func padIdentity(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	out := x.clone()
	outs := []*pval{out}
	if len(n.Output) > 1 {
		outs = append(outs, &pval{rank: x.rank, dims: x.dims})
	}
	return outs
}

// padShape: the shape's elements are the input's sizes, the padded
// dimension among them as a symbolic size the analysis follows through
// shape arithmetic.
func padShape(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		if anyInv {
			return fail("reads the shape of a value whose rank the analysis does not know")
		}
		return []*pval{{rank: 1, dims: []sdim{{}}}}
	}
	start, end := attrI(attrs, "start", 0), attrI(attrs, "end", int64(x.rank))
	s, _ := clampAxis(start, x.rank)
	e, _ := clampAxis(end, x.rank)
	out := &pval{rank: 1}
	if e < s {
		e = s
	}
	out.elems = r.mergedElems(append([]sdim{}, x.dims[s:e]...))
	out.dims = []sdim{cdim(int64(e - s))}
	return []*pval{out}
}

// padSize: the element count, computed from the padded size when the
// input carries it.
func padSize(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	out := &pval{rank: 0, elems: []sdim{{}}}
	if anyInv {
		out.elems = []sdim{{k: sTaint}}
	}
	return []*pval{out}
}

// padTranspose: a permutation moves the padded axis, which keeps its
// facts.
func padTranspose(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	perm, ok := attrIs(attrs, "perm")
	if !ok {
		for i := x.rank - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	if len(perm) != x.rank {
		return fail("has a permutation of the wrong length")
	}
	out := &pval{rank: x.rank, mask: x.mask, orig: x.orig, idiom: x.idiom}
	remap := map[int]int{}
	for i, p := range perm {
		if p < 0 || int(p) >= x.rank {
			return fail("has a permutation out of range")
		}
		out.dims = append(out.dims, x.dims[p])
		remap[int(p)] = i
	}
	out.padc, out.neg, out.zero = remapFacts(x, remap)
	return []*pval{out}
}

// padExpand: broadcasting to a shape keeps the padded axis unless it is
// broadcast against another size.
func padExpand(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	s := padIn(ins, 1)
	if s == nil || s.elems == nil || x.rank < 0 {
		return fail("takes a shape the analysis does not know")
	}
	tdims, ok := r.shapeDims(s.elems)
	if !ok {
		return fail("takes a shape computed from its size")
	}
	t := &pval{rank: len(tdims), dims: tdims}
	dims, why := r.broadcast([]*pval{x, t})
	if why != "" {
		return fail("%s", why)
	}
	out := &pval{rank: len(dims), dims: dims, mask: x.mask}
	off := len(dims) - x.rank
	remap := map[int]int{}
	for i := 0; i < x.rank; i++ {
		if x.dims[i] == dims[i+off] {
			remap[i] = i + off
		}
	}
	out.padc, out.neg, out.zero = remapFacts(x, remap)
	out.orig, out.idiom = x.orig, x.idiom
	return []*pval{out}
}
