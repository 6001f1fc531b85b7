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
// computations fold into constants.

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

// reshapeDims resolves ONNX Reshape's target: 0 copies the input dimension
// (unless allowzero), -1 is inferred.
func reshapeDims(c *opCtx, in []int, shape []int64, allowZero bool) []int {
	out := make([]int, len(shape))
	infer := -1
	known := 1
	for k, s := range shape {
		switch {
		case s == 0 && !allowZero:
			if k >= len(in) {
				c.fail("shape %v copies dimension %d, but the input has rank %d", shape, k, len(in))
			}
			out[k] = in[k]
		case s == -1:
			if infer >= 0 {
				c.fail("shape %v has more than one -1", shape)
			}
			infer = k
			continue
		case s < 0:
			c.fail("invalid shape %v", shape)
		default:
			out[k] = int(s)
		}
		known *= out[k]
	}
	total := numElems(in)
	if infer >= 0 {
		if known == 0 || total%known != 0 {
			c.fail("cannot reshape %v to %v", in, shape)
		}
		out[infer] = total / known
	}
	if numElems(out) != total {
		c.fail("cannot reshape %v (%d elements) to %v", in, total, shape)
	}
	return out
}

// registerReshape registers an op that only reshapes its first input, to
// the dims target computes, in the graph and on the host alike.
func registerReshape(op string, since int, target func(*opCtx) []int) *opDef {
	conv := func(c *opCtx) error {
		c.set(0, graph.Reshape(c.in(0), target(c)...))
		return nil
	}
	host := func(c *opCtx) error {
		h, err := c.hostIn(0).reshaped(target(c))
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
	return register(op, since, conv).withHost(host)
}

func reshapeTarget(c *opCtx) []int {
	if c.opset < 5 {
		return reshapeDims(c, c.dims(0), c.attrInts("shape", nil), false)
	}
	return reshapeDims(c, c.dims(0), c.constInts(1), c.attrInt("allowzero", 0) != 0)
}

func flattenDims(c *opCtx) []int {
	dims := c.dims(0)
	axis := int(c.attrInt("axis", 1))
	if axis < 0 {
		axis += len(dims)
	}
	if axis < 0 || axis > len(dims) {
		c.fail("axis %d out of range for rank %d", c.attrInt("axis", 1), len(dims))
	}
	return []int{numElems(dims[:axis]), numElems(dims[axis:])}
}

// axesArg reads the axes of Squeeze/Unsqueeze/Reduce*: an attribute in
// older opsets, optional input k in newer ones.
func (c *opCtx) axesArg(inputIdx int, fromInput bool) ([]int64, bool) {
	if fromInput {
		if !c.has(inputIdx) {
			return nil, false
		}
		return c.constInts(inputIdx), true
	}
	if !c.hasAttr("axes") {
		return nil, false
	}
	return c.attrInts("axes", nil), true
}

func squeezeDims(c *opCtx) []int {
	dims := c.dims(0)
	axes, ok := c.axesArg(1, c.opset >= 13)
	drop := make([]bool, len(dims))
	if !ok {
		for k, d := range dims {
			drop[k] = d == 1
		}
	} else {
		for _, a := range c.normAxes(axes, len(dims)) {
			if dims[a] != 1 {
				c.fail("cannot squeeze axis %d of size %d", a, dims[a])
			}
			drop[a] = true
		}
	}
	out := []int{}
	for k, d := range dims {
		if !drop[k] {
			out = append(out, d)
		}
	}
	return out
}

func unsqueezeDims(c *opCtx) []int {
	dims := c.dims(0)
	axes, ok := c.axesArg(1, c.opset >= 13)
	if !ok {
		c.fail("missing axes")
	}
	r := len(dims) + len(axes)
	ins := make([]bool, r)
	for _, a := range c.normAxes(axes, r) {
		if ins[a] {
			c.fail("axis %d repeated", a)
		}
		ins[a] = true
	}
	out := make([]int, 0, r)
	j := 0
	for k := range r {
		if ins[k] {
			out = append(out, 1)
		} else {
			out = append(out, dims[j])
			j++
		}
	}
	return out
}

func convConcat(c *opCtx) error {
	var parts []*graph.Node
	rank := -1
	for k := range c.inputs {
		if !c.has(k) {
			continue
		}
		rank = c.rank(k)
		if numElems(c.dims(k)) == 0 {
			continue // empty operands contribute nothing
		}
		parts = append(parts, c.in(k))
	}
	if rank < 0 {
		c.fail("needs at least one input")
	}
	axis := c.normAxis(c.attrInt("axis", 0), rank)
	if len(parts) == 0 {
		// Every operand is empty: the result is too.
		var dims []int
		total := 0
		for k := range c.inputs {
			if c.has(k) {
				dims = append([]int{}, c.dims(k)...)
				total += c.dims(k)[axis]
			}
		}
		dims[axis] = total
		c.setHost(0, hostZeros(c.dtype(0), dims))
		return nil
	}
	if len(parts) == 1 {
		c.set(0, parts[0])
		return nil
	}
	c.set(0, graph.Concatenate(parts, axis))
	return nil
}

// hostConcat concatenates host tensors along axis.
func hostConcat(parts []*hostTensor, axis int) (*hostTensor, error) {
	first := parts[0]
	dims := append([]int{}, first.dims...)
	dims[axis] = 0
	for _, p := range parts {
		if len(p.dims) != len(dims) {
			return nil, fmt.Errorf("concat of ranks %d and %d", len(p.dims), len(dims))
		}
		for k := range dims {
			if k != axis && p.dims[k] != dims[k] {
				return nil, fmt.Errorf("concat along axis %d of shapes %v and %v", axis, first.dims, p.dims)
			}
		}
		dims[axis] += p.dims[axis]
		if err := p.decode(); err != nil {
			return nil, err
		}
	}
	outer := numElems(dims[:axis])
	inner := numElems(dims[axis+1:])
	out := &hostTensor{dt: first.dt, dims: dims}
	for o := range outer {
		for _, p := range parts {
			chunk := p.dims[axis] * inner
			if first.isFloat() {
				out.f = append(out.f, p.f[o*chunk:(o+1)*chunk]...)
			} else {
				out.i = append(out.i, p.i[o*chunk:(o+1)*chunk]...)
			}
		}
	}
	if out.f == nil && out.i == nil {
		if first.isFloat() {
			out.f = []float64{}
		} else {
			out.i = []int64{}
		}
	}
	return out, nil
}

func hostConcatOp(c *opCtx) error {
	var parts []*hostTensor
	for k := range c.inputs {
		if c.has(k) {
			parts = append(parts, c.hostIn(k))
		}
	}
	if len(parts) == 0 {
		return fmt.Errorf("needs at least one input")
	}
	axis := c.normAxis(c.attrInt("axis", 0), parts[0].rank())
	out, err := hostConcat(parts, axis)
	if err != nil {
		return err
	}
	c.setHost(0, out)
	return nil
}

// splitSizes returns the size of each Split output along axis.
func splitSizes(c *opCtx, dim int) []int {
	var sizes []int64
	switch {
	case c.opset >= 13 && c.has(1):
		sizes = c.constInts(1)
	case c.opset < 13 && c.hasAttr("split"):
		sizes = c.attrInts("split", nil)
	}
	if sizes != nil {
		total := 0
		for _, s := range sizes {
			total += int(s)
		}
		if total != dim || len(sizes) != c.numOutputs() {
			c.fail("split sizes %v do not fit dimension %d into %d outputs", sizes, dim, c.numOutputs())
		}
		return toInts(sizes)
	}
	n := c.numOutputs()
	if c.hasAttr("num_outputs") {
		n = int(c.attrInt("num_outputs", 0))
	}
	if n <= 0 {
		c.fail("no outputs")
	}
	// Opset 18: the last chunk may be smaller.
	chunk := (dim + n - 1) / n
	out := make([]int, n)
	left := dim
	for k := range out {
		out[k] = min(chunk, left)
		left -= out[k]
	}
	return out
}

func convSplit(c *opCtx) error {
	x := c.in(0)
	axis := c.normAxis(c.attrInt("axis", 0), x.Rank())
	start := 0
	for k, s := range splitSizes(c, x.Shape().Dimensions[axis]) {
		if s == 0 {
			dims := append([]int{}, x.Shape().Dimensions...)
			dims[axis] = 0
			c.setHost(k, hostZeros(c.dtype(0), dims))
			continue
		}
		c.set(k, sliceAxis(x, axis, start, start+s, 1))
		start += s
	}
	return nil
}

func hostSplit(c *opCtx) error {
	x := c.hostIn(0)
	axis := c.normAxis(c.attrInt("axis", 0), x.rank())
	start := 0
	for k, s := range splitSizes(c, x.dims[axis]) {
		sel := fullSelection(x.dims)
		sel[axis] = rangeInts(start, start+s, 1)
		h, err := hostSelect(x, sel)
		if err != nil {
			return err
		}
		c.setHost(k, h)
		start += s
	}
	return nil
}

// fullSelection selects every index of every axis.
func fullSelection(dims []int) [][]int {
	sel := make([][]int, len(dims))
	for k, d := range dims {
		sel[k] = rangeInts(0, d, 1)
	}
	return sel
}

func rangeInts(start, end, step int) []int {
	out := []int{}
	if step > 0 {
		for k := start; k < end; k += step {
			out = append(out, k)
		}
	} else {
		for k := start; k > end; k += step {
			out = append(out, k)
		}
	}
	return out
}

// hostSelect returns the sub-tensor taking, on each axis, the listed
// indices (in that order, repeats allowed).
func hostSelect(h *hostTensor, sel [][]int) (*hostTensor, error) {
	dims := make([]int, len(sel))
	for k, s := range sel {
		dims[k] = len(s)
	}
	if err := checkHostSize(dims); err != nil {
		return nil, err
	}
	st := strides(h.dims)
	idx := make([]int, numElems(dims))
	forEachIndex(dims, func(flat int, ix []int) {
		j := 0
		for a, i := range ix {
			j += sel[a][i] * st[a]
		}
		idx[flat] = j
	})
	return h.gatherFlat(dims, idx)
}

// sliceSpec resolves ONNX Slice's per-axis (start, end, step) into the list
// of selected indices of every axis.
func sliceSpec(c *opCtx, dims []int) [][]int {
	var starts, ends, axes, steps []int64
	if c.opset < 10 {
		starts, ends, axes = c.attrInts("starts", nil), c.attrInts("ends", nil), c.attrInts("axes", nil)
	} else {
		starts, ends = c.constInts(1), c.constInts(2)
		axes, steps = c.constInts(3), c.constInts(4)
	}
	if len(starts) != len(ends) {
		c.fail("starts %v and ends %v differ in length", starts, ends)
	}
	if axes == nil {
		for k := range starts {
			axes = append(axes, int64(k))
		}
	}
	if steps == nil {
		steps = make([]int64, len(starts))
		for k := range steps {
			steps[k] = 1
		}
	}
	if len(axes) != len(starts) || len(steps) != len(starts) {
		c.fail("starts, ends, axes and steps differ in length")
	}
	sel := fullSelection(dims)
	for k, a := range c.normAxes(axes, len(dims)) {
		d := int64(dims[a])
		s, e, st := starts[k], ends[k], steps[k]
		if st == 0 {
			c.fail("slice step is 0")
		}
		if s < 0 {
			s += d
		}
		if e < 0 {
			e += d
		}
		if st > 0 {
			s, e = min(max(s, 0), d), min(max(e, 0), d)
		} else {
			s, e = min(max(s, 0), d-1), min(max(e, -1), d-1)
		}
		sel[a] = rangeInts(int(s), int(e), int(st))
	}
	return sel
}

func convSlice(c *opCtx) error {
	x := c.in(0)
	dims := x.Shape().Dimensions
	sel := sliceSpec(c, dims)
	for a, s := range sel {
		if len(s) == dims[a] && isIdentity(s) {
			continue
		}
		if len(s) == 0 {
			out := append([]int{}, x.Shape().Dimensions...)
			out[a] = 0
			for b := range sel {
				out[b] = len(sel[b])
			}
			c.setHost(0, hostZeros(c.dtype(0), out))
			return nil
		}
		step := 1
		if len(s) > 1 {
			step = s[1] - s[0]
		}
		if step > 0 {
			x = sliceAxis(x, a, s[0], s[len(s)-1]+1, step)
		} else {
			x = gatherConst(x, a, s)
		}
	}
	c.set(0, x)
	return nil
}

func isIdentity(s []int) bool {
	for k, v := range s {
		if k != v {
			return false
		}
	}
	return true
}

func hostSlice(c *opCtx) error {
	x := c.hostIn(0)
	h, err := hostSelect(x, sliceSpec(c, x.dims))
	if err != nil {
		return err
	}
	c.setHost(0, h)
	return nil
}

func convGather(c *opCtx) error {
	x := c.in(0)
	axis := c.normAxis(c.attrInt("axis", 0), x.Rank())
	dim := x.Shape().Dimensions[axis]
	if c.isHost(1) {
		idx := c.hostIn(1)
		vals, err := idx.ints()
		if err != nil {
			return err
		}
		norm := make([]int64, len(vals))
		for k, v := range vals {
			if v < 0 {
				v += int64(dim)
			}
			if v < 0 || v >= int64(dim) {
				c.fail("index %d out of range for axis %d of size %d", vals[k], axis, dim)
			}
			norm[k] = v
		}
		c.set(0, gatherAxis(x, constNode(c.g, hostInt64s(norm, idx.dims...)), axis))
		return nil
	}
	c.noteIndices(1, []int{dim}, false)
	idx := normalizeIndices(c.in(1), dim)
	c.set(0, gatherAxis(x, idx, axis))
	return nil
}

func hostGather(c *opCtx) error {
	x, idx := c.hostIn(0), c.hostIn(1)
	axis := c.normAxis(c.attrInt("axis", 0), x.rank())
	vals, err := idx.ints()
	if err != nil {
		return err
	}
	dim := x.dims[axis]
	sel := fullSelection(x.dims)
	sel[axis] = make([]int, len(vals))
	for k, v := range vals {
		if v < 0 {
			v += int64(dim)
		}
		if v < 0 || v >= int64(dim) {
			return fmt.Errorf("index %d out of range for axis %d of size %d", vals[k], axis, dim)
		}
		sel[axis][k] = int(v)
	}
	h, err := hostSelect(x, sel)
	if err != nil {
		return err
	}
	out := append(append(append([]int{}, x.dims[:axis]...), idx.dims...), x.dims[axis+1:]...)
	if h, err = h.reshaped(out); err != nil {
		return err
	}
	c.setHost(0, h)
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

// padArgs returns Pad's mode and per-axis amounts.
func padArgs(c *opCtx, rank int) (mode string, before, after []int) {
	mode = c.attrString("mode", "constant")
	var pads []int64
	if c.opset < 11 {
		pads = c.attrInts("pads", nil)
		if pads == nil {
			pads = c.attrInts("paddings", nil)
		}
	} else {
		pads = c.constInts(1)
	}
	axes := make([]int, rank)
	for k := range axes {
		axes[k] = k
	}
	if c.opset >= 18 && c.has(3) {
		axes = c.normAxes(c.constInts(3), rank)
	}
	if len(pads) != 2*len(axes) {
		c.fail("pads %v do not match %d axes", pads, len(axes))
	}
	before, after = make([]int, rank), make([]int, rank)
	for k, a := range axes {
		before[a] = int(pads[k])
		after[a] = int(pads[k+len(axes)])
	}
	return mode, before, after
}

func convPad(c *opCtx) error {
	x := c.in(0)
	mode, before, after := padArgs(c, x.Rank())
	switch mode {
	case "constant":
		var v *graph.Node
		if c.opset < 11 {
			v = scalarLike(x, c.attrFloat("value", 0))
		} else if c.has(2) {
			v = graph.Reshape(c.in(2))
		} else {
			v = scalarLike(x, 0)
		}
		c.set(0, padConstant(x, before, after, v))
	case "edge", "reflect", "wrap":
		for k := range before {
			if before[k] < 0 || after[k] < 0 {
				c.fail("negative pads are only supported in constant mode")
			}
		}
		c.set(0, padIndexed(x, before, after, mode))
	default:
		c.fail("unknown pad mode %q", mode)
	}
	return nil
}

func hostPad(c *opCtx) error {
	x := c.hostIn(0)
	mode, before, after := padArgs(c, x.rank())
	if mode != "constant" {
		// Edge, reflect and wrap only reorder elements.
		sel := make([][]int, x.rank())
		for a, n := range x.dims {
			for k := -before[a]; k < n+after[a]; k++ {
				sel[a] = append(sel[a], padSource(k, n, mode))
			}
		}
		h, err := hostSelect(x, sel)
		if err != nil {
			return err
		}
		c.setHost(0, h)
		return nil
	}
	value := 0.0
	if c.opset < 11 {
		value = c.attrFloat("value", 0)
	} else if c.has(2) {
		v, err := c.hostIn(2).scalarFloat()
		if err != nil {
			return err
		}
		value = v
	}
	// Gather from x extended with one trailing element holding value.
	if err := x.decode(); err != nil {
		return err
	}
	ext := &hostTensor{dt: x.dt, dims: []int{x.size() + 1}}
	if x.isFloat() {
		ext.f = append(append([]float64{}, x.f...), value)
	} else {
		ext.i = append(append([]int64{}, x.i...), int64(value))
	}
	dims := make([]int, x.rank())
	for a, n := range x.dims {
		dims[a] = n + before[a] + after[a]
		if dims[a] < 0 {
			return fmt.Errorf("pads remove more than axis %d holds", a)
		}
	}
	if err := checkHostSize(dims); err != nil {
		return err
	}
	st := strides(x.dims)
	idx := make([]int, numElems(dims))
	forEachIndex(dims, func(flat int, ix []int) {
		j := 0
		for a, i := range ix {
			src := i - before[a]
			if src < 0 || src >= x.dims[a] {
				j = -1
				break
			}
			j += src * st[a]
		}
		if j < 0 {
			j = x.size()
		}
		idx[flat] = j
	})
	h, err := ext.gatherFlat(dims, idx)
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

// padUnsqueeze: inserted axes of size 1 move the padded axis, which keeps
// its facts.
func padUnsqueeze(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	axes, ok := attrIs(attrs, "axes")
	if !ok {
		axes, ok = r.constInts(n, 1)
	}
	if !ok || x.rank < 0 {
		return fail("has axes or a rank the analysis does not know")
	}
	rank := x.rank + len(axes)
	added := map[int]bool{}
	for _, a := range axes {
		k, ok := normAxis(a, rank)
		if !ok {
			return fail("has an axis out of range")
		}
		added[k] = true
	}
	out := &pval{rank: rank, elems: x.elems, fc: x.fc, mask: x.mask, orig: x.orig, idiom: x.idiom}
	src := 0
	remap := map[int]int{}
	for i := 0; i < rank; i++ {
		if added[i] {
			out.dims = append(out.dims, cdim(1))
			continue
		}
		out.dims = append(out.dims, x.dims[src])
		remap[src] = i
		src++
	}
	out.padc, out.neg, out.zero = remapFacts(x, remap)
	return []*pval{out}
}

// padSqueeze: removing axes of size 1 moves the padded axis; squeezing
// the padded axis itself (size 1 only in an exact run) is refused.
func padSqueeze(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	axes, ok := attrIs(attrs, "axes")
	if !ok && len(n.Input) > 1 && n.Input[1] != "" {
		axes, ok = r.constInts(n, 1)
		if !ok {
			return fail("has axes the analysis does not know")
		}
	}
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	drop := map[int]bool{}
	if axes == nil {
		for i, d := range x.dims {
			if d.k != sConst {
				if anyInv {
					return fail("squeezes without axes a dimension of unknown size")
				}
				return []*pval{{rank: -1}}
			}
			if d.c == 1 {
				drop[i] = true
			}
		}
	}
	for _, a := range axes {
		k, ok := normAxis(a, x.rank)
		if !ok {
			return fail("has an axis out of range")
		}
		if r.isD(x.dims[k]) {
			return fail("squeezes it")
		}
		drop[k] = true
	}
	out := &pval{elems: x.elems, fc: x.fc, mask: x.mask, orig: x.orig, idiom: x.idiom}
	remap := map[int]int{}
	for i, d := range x.dims {
		if drop[i] {
			continue
		}
		remap[i] = len(out.dims)
		out.dims = append(out.dims, d)
	}
	out.rank = len(out.dims)
	out.padc, out.neg, out.zero = remapFacts(x, remap)
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

// padReshape: the padded axis survives a reshape when the sizes before it
// are the same before and after (a real position's flat index then maps
// to the same real position); merged with other axes it is followed as a
// merged size (padmerge.go).
func padReshape(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x, t := ins[0], padIn(ins, 1)
	if t == nil || t.elems == nil {
		return fail("takes a target shape the analysis does not know")
	}
	allowZero := attrI(attrs, "allowzero", 0) != 0
	if outs := r.mergeReshape(x, t, allowZero, fail); outs != nil {
		return outs
	}
	// Later sizes are known when a -1 before them is resolved.
	target := append([]sdim(nil), t.elems...)
	for i, e := range t.elems {
		target[i] = e
		if e.k == sConst && e.c == 0 && !allowZero {
			if x.rank < 0 || i >= x.rank {
				return fail("copies a dimension the analysis does not know")
			}
			target[i] = x.dims[i]
		}
		if e.k == sConst && e.c == -1 {
			target[i] = sdim{}
			if x.rank >= 0 {
				// -1 is the remaining size: known when every other size is.
				if d, ok := r.remaining(x.dims, target, i); ok {
					target[i] = d
				}
			}
		}
		if target[i].k == sTaint || target[i].k == sProd {
			return fail("reshapes to a size computed from it")
		}
	}
	xAxes := []int{}
	if x.rank >= 0 {
		xAxes = x.dAxes(r.dim)
	} else if anyInv {
		return fail("has an input of unknown rank")
	}
	var tAxes []int
	for i, d := range target {
		if d.k == sSym && d.s == r.dim {
			tAxes = append(tAxes, i)
		}
	}
	if len(xAxes) == 0 && len(tAxes) == 0 {
		out := &pval{rank: len(target), dims: target, mask: x.mask}
		if x.rank <= 1 && len(target) <= 1 {
			out.elems, out.fc = x.elems, x.fc
		}
		return []*pval{out}
	}
	if len(xAxes) != len(tAxes) {
		return fail("merges it with other axes")
	}
	// Each padded axis keeps its place if the axes before it hold the same
	// sizes before and after: then the flat index of a real position maps
	// to the same (real) position.
	for k := range xAxes {
		if !sameProduct(x.dims[:xAxes[k]], target[:tAxes[k]]) {
			return fail("moves it across other axes (the sizes before it differ)")
		}
	}
	out := &pval{rank: len(target), dims: target, mask: x.mask, orig: x.orig, idiom: x.idiom}
	remap := map[int]int{}
	for k := range xAxes {
		remap[xAxes[k]] = tAxes[k]
	}
	out.padc, out.neg, out.zero = remapFacts(x, remap)
	return []*pval{out}
}

// padFlatten: the padded axis survives flattening only merged with axes
// of size 1.
func padFlatten(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	a, ok := clampAxis(attrI(attrs, "axis", 1), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	outer, ok1 := r.merge(x.dims[:a])
	inner, ok2 := r.merge(x.dims[a:])
	if !ok1 || !ok2 {
		return fail("merges it with other axes")
	}
	return []*pval{{rank: 2, dims: []sdim{outer, inner}, mask: x.mask}}
}

// padConcat: joining along another axis keeps positions apart; along the
// padded axis padded rows would land between real ones, refused.
func padConcat(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	rank := -1
	for _, v := range ins {
		if v == nil {
			continue
		}
		if v.rank < 0 {
			return fail("has an input of unknown rank")
		}
		rank = v.rank
	}
	if rank < 0 {
		return fail("has no inputs")
	}
	a, ok := normAxis(attrI(attrs, "axis", 0), rank)
	if !ok {
		return fail("has an axis out of range")
	}
	out := &pval{rank: rank, dims: make([]sdim, rank)}
	var elems []sdim
	trackElems := rank == 1
	sum, known := int64(0), true
	for k, v := range ins {
		if v == nil {
			continue
		}
		if v.rank != rank {
			return fail("joins inputs of different ranks")
		}
		if r.isD(v.dims[a]) {
			return fail("concatenates along it")
		}
		if v.dims[a].k == sConst {
			sum += v.dims[a].c
		} else {
			known = false
		}
		for i, d := range v.dims {
			if i == a {
				continue
			}
			if k == 0 {
				out.dims[i] = d
			} else if r.isD(d) != r.isD(out.dims[i]) || d.k == sMerge && d != out.dims[i] {
				return fail("joins inputs that do not all carry it on the same axes")
			}
		}
		if v.mask {
			out.mask = true
		}
		if v.elems == nil {
			trackElems = false
		}
		elems = append(elems, v.elems...)
	}
	out.dims[a] = sdim{}
	if known {
		out.dims[a] = cdim(sum)
	}
	if trackElems {
		out.elems = elems
		allC := true
		var fc []float64
		for _, e := range elems {
			if e.k != sConst {
				allC = false
			}
			fc = append(fc, float64(e.c))
		}
		if allC {
			out.fc = fc
		}
	} else {
		for _, v := range ins {
			if r.sizeDep(v) {
				return fail("concatenates a value computed from its size")
			}
		}
	}
	return []*pval{out}
}

// padSplit: splitting along another axis keeps positions apart; along
// the padded axis, refused.
func padSplit(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has a rank the analysis does not know")
	}
	a, ok := normAxis(attrI(attrs, "axis", 0), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	if r.isD(x.dims[a]) {
		return fail("splits along it")
	}
	var outs []*pval
	for range n.Output {
		o := &pval{rank: x.rank, dims: append([]sdim{}, x.dims...), mask: x.mask}
		o.dims[a] = sdim{}
		outs = append(outs, o)
	}
	return outs
}

// padSlice: slicing other axes keeps positions apart; slicing the padded
// axis is refused. Slices of shape vectors are followed element by
// element.
func padSlice(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x := ins[0]
	if x.rank < 0 {
		return fail("has an input of unknown rank")
	}
	var starts, ends, axes []int64
	var haveSE, haveAxes bool
	if s, ok := attrIs(attrs, "starts"); ok {
		starts, haveSE = s, true
		ends, _ = attrIs(attrs, "ends")
		axes, haveAxes = attrIs(attrs, "axes")
	} else {
		var ok1, ok2 bool
		starts, ok1 = r.constInts(n, 1)
		ends, ok2 = r.constInts(n, 2)
		haveSE = ok1 && ok2
		if len(n.Input) > 3 && n.Input[3] != "" {
			axes, haveAxes = r.constInts(n, 3)
			if !haveAxes {
				return fail("slices axes the analysis does not know")
			}
		}
		if len(n.Input) > 4 && n.Input[4] != "" {
			if _, ok := r.constInts(n, 4); !ok {
				return fail("slices with steps the analysis does not know")
			}
		}
		for i := 1; i < len(n.Input) && i < 3; i++ {
			if v := r.vals[n.Input[i]]; r.sizeDep(v) {
				return fail("slices at positions computed from its size")
			}
		}
	}
	if !haveAxes {
		if !haveSE {
			// Unknown bounds: any axis may be sliced.
			for i := 0; i < x.rank; i++ {
				axes = append(axes, int64(i))
			}
		} else {
			for i := range starts {
				axes = append(axes, int64(i))
			}
		}
	}
	out := &pval{rank: x.rank, dims: append([]sdim{}, x.dims...), mask: x.mask}
	steps, _ := r.constInts(n, 4)
	for k, a64 := range axes {
		a, ok := normAxis(a64, x.rank)
		if !ok {
			return fail("has an axis out of range")
		}
		if r.isD(x.dims[a]) {
			return fail("slices along it")
		}
		out.dims[a] = slicedDim(x.dims[a], starts, ends, steps, k, haveSE)
		if out.dims[a].k == sOpaque {
			out.dims[a] = r.slicedToSym(n, k)
		}
	}
	if x.rank == 1 && x.elems != nil && haveSE && len(starts) == 1 && len(ends) == 1 {
		l := int64(len(x.elems))
		s, e := starts[0], ends[0]
		if s < 0 {
			s += l
		}
		if e < 0 {
			e += l
		}
		s, e = max(0, min(s, l)), max(0, min(e, l))
		if e >= s {
			out.elems = append([]sdim{}, x.elems[s:e]...)
			out.dims = []sdim{cdim(e - s)}
			if x.fc != nil {
				out.fc = x.fc[s:e]
			}
		}
	} else if r.sizeDep(x) {
		return fail("slices a value computed from its size")
	}
	return []*pval{out}
}

// padGather: gathering along another axis keeps the padded axis; along the
// padded axis only at position 0 (certainly real). Gathers from shape
// vectors are followed element by element.
func padGather(r *padRun, n *onnxpb.Node, attrs map[string]*onnxpb.Attribute, ins []*pval, anyInv bool, fail func(string, ...any) []*pval) []*pval {
	x, idx := ins[0], padIn(ins, 1)
	if x.rank < 0 || idx == nil || idx.rank < 0 {
		return fail("has an input of unknown rank")
	}
	a, ok := normAxis(attrI(attrs, "axis", 0), x.rank)
	if !ok {
		return fail("has an axis out of range")
	}
	if r.sizeDep(idx) {
		return fail("gathers at positions computed from its size")
	}
	if r.isD(x.dims[a]) {
		// Only position 0 is certainly real (when the axis is not empty);
		// any other constant index may be past the real size.
		if idx.fc == nil {
			return fail("gathers along it at positions the analysis does not know")
		}
		for _, f := range idx.fc {
			if f != 0 {
				return fail("gathers along it at position %v, which may be padding", f)
			}
		}
	}
	out := &pval{rank: x.rank - 1 + idx.rank, mask: x.mask}
	out.dims = append(out.dims, x.dims[:a]...)
	out.dims = append(out.dims, idx.dims...)
	out.dims = append(out.dims, x.dims[a+1:]...)
	if x.rank == 1 && x.elems != nil && idx.fc != nil {
		for _, f := range idx.fc {
			k := int(f)
			if k < 0 {
				k += len(x.elems)
			}
			if k < 0 || k >= len(x.elems) {
				out.elems = nil
				break
			}
			out.elems = append(out.elems, x.elems[k])
		}
		if out.elems != nil && x.fc != nil {
			for _, e := range out.elems {
				out.fc = append(out.fc, float64(e.c))
			}
		}
	} else if r.sizeDep(x) {
		return fail("gathers from a value computed from its size")
	}
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
